"""Public Keras layers of glomo_tf: GLoMo's own here, the related models' in :mod:`.related`."""

from glomo_tf.layers.context_decoder import ContextDecoder
from glomo_tf.layers.feature_predictor import FeaturePredictor
from glomo_tf.layers.glomo_transfer import GlomoTransfer
from glomo_tf.layers.graph_mixture import GraphMixture
from glomo_tf.layers.graph_predictor import GraphPredictor
from glomo_tf.layers.related import (ContextualizedNonLocal, LinearChainCRF, OrderedMemory,
                                     SharedPrivateRNN)

__all__ = ["ContextDecoder", "ContextualizedNonLocal", "FeaturePredictor", "GlomoTransfer",
           "GraphMixture", "GraphPredictor", "LinearChainCRF", "OrderedMemory", "SharedPrivateRNN"]
