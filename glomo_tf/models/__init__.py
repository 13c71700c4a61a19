"""Models of glomo_tf."""

from glomo_tf.models.classifier import build_classifier
from glomo_tf.models.pretrainer import GlomoPretrainer, Perplexity

__all__ = ["GlomoPretrainer", "Perplexity", "build_classifier"]
