"""Public Keras layers of glomo_tf: GLoMo's own here, the related models' in :mod:`.related`."""

from glomo_tf.layers.context_decoder import ContextDecoder
from glomo_tf.layers.conv_encoder import CausalConvEncoder
from glomo_tf.layers.feature_predictor import FeaturePredictor
from glomo_tf.layers.glomo_transfer import GlomoTransfer
from glomo_tf.layers.graph_input import GraphInput
from glomo_tf.layers.graph_mixture import GraphMixture
from glomo_tf.layers.graph_predictor import CoupledGraphPredictor, GraphPredictor, graph_predictor
from glomo_tf.layers.graph_predictor_2d import GraphPredictor2D
from glomo_tf.layers.graph_propagation import GraphPropagation
from glomo_tf.layers.graph_scorer import GraphScorer, LiveRowHinge
from glomo_tf.layers.masked_conv_2d import MaskedConv2D
from glomo_tf.layers.related import (ContextualizedNonLocal, LinearChainCRF, OrderedMemory,
                                     SentenceEncoder, SharedPrivateRNN)

__all__ = ["CausalConvEncoder", "ContextDecoder", "ContextualizedNonLocal",
           "CoupledGraphPredictor", "FeaturePredictor", "GlomoTransfer", "GraphInput",
           "GraphMixture", "GraphPredictor", "GraphPredictor2D", "GraphPropagation",
           "GraphScorer", "LinearChainCRF", "LiveRowHinge", "MaskedConv2D", "OrderedMemory",
           "SentenceEncoder", "SharedPrivateRNN", "graph_predictor"]
