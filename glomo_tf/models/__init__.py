"""Models of glomo_tf."""

from glomo_tf.models.classifier import build_classifier
from glomo_tf.models.graph_fed import GraphFedModel
from glomo_tf.models.image_classifier import build_image_classifier
from glomo_tf.models.pair_classifier import build_pair_classifier
from glomo_tf.models.pretrainer import GlomoPretrainer, Perplexity
from glomo_tf.models.pretrainer_2d import GlomoPretrainer2D
from glomo_tf.models.sentence_pretrainer import SentencePretrainer
from glomo_tf.models.task import GlomoClassifier, GlomoPairClassifier

__all__ = ["GlomoClassifier", "GlomoPairClassifier", "GlomoPretrainer", "GlomoPretrainer2D",
           "GraphFedModel", "Perplexity", "SentencePretrainer", "build_classifier",
           "build_image_classifier", "build_pair_classifier"]
