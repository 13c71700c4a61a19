"""glomo_tf: GLoMo latent relational graphs, learned without labels and transferred in Keras."""

from glomo_tf.layers import (ContextDecoder, ContextualizedNonLocal, FeaturePredictor,
                             GlomoTransfer, GraphMixture, GraphPredictor, LinearChainCRF,
                             SharedPrivateRNN)
from glomo_tf.models import GlomoPretrainer, Perplexity
from glomo_tf.saving import load_graph_predictor, save_graph_predictor

__version__ = "0.1.0"

__all__ = ["ContextDecoder", "ContextualizedNonLocal", "FeaturePredictor", "GlomoPretrainer",
           "GlomoTransfer", "GraphMixture", "GraphPredictor", "LinearChainCRF", "Perplexity",
           "SharedPrivateRNN", "load_graph_predictor", "save_graph_predictor"]
