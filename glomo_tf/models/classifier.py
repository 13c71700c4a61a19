"""Text classifiers with and without transferred GLoMo graphs (the paper's Table 1 comparison).

All variants share one architecture, so the only difference between them is where (and whether)
the frozen graphs are fused in:

    token ids -> Embedding(mask_zero) -> [GlomoTransfer] -> Dropout -> BiGRU -> [GlomoTransfer]
              -> masked multi-head self-attention + residual + LayerNorm
              -> masked mean and max pooling -> Dropout -> Dense softmax

=====================  =======================================================================
variant                GLoMo transfer
=====================  =======================================================================
``baseline``           none
``glomo_embeddings``   the predictor's graphs mixed into the word embeddings (before the BiGRU)
``glomo_rnn``          the predictor's graphs mixed into the BiGRU states (before self-attention)
``uniform``            uniform graphs over the admissible sources at the embeddings (the paper's
                       sanity baseline: same extra parameters, no learned structure)
=====================  =======================================================================

The downstream token ids must be the pretraining tokenizer's ids (the predictor reads the same ids
as the classifier's embedding), so the classifier's ``vocabulary_size`` must equal the predictor's.

Example:

>>> import numpy as np
>>> model = build_classifier(vocabulary_size=50, num_classes=2, variant="uniform",
...                          embedding_dim=8, rnn_units=4, attention_heads=2)
>>> model(np.array([[3, 4, 5, 0]], "int32")).shape
TensorShape([1, 2])
"""

import keras
import tensorflow as tf

from glomo_tf.layers.glomo_transfer import GlomoTransfer
from glomo_tf.layers.graph_predictor import GraphPredictor

VARIANTS = ("baseline", "glomo_embeddings", "glomo_rnn", "uniform")
PREDICTOR_VARIANTS = ("glomo_embeddings", "glomo_rnn")


@keras.saving.register_keras_serializable(package="glomo_tf")
class MaskedMeanMaxPooling(keras.layers.Layer):
    """``[mean ; max]`` over the non-padded positions of a sequence.

    Call arguments:
        inputs: ``[features, token_ids]``: features ``[batch, T, d]`` and int ids ``[batch, T]``
            (0 = padding, left out of both the mean and the max).

    Returns:
        ``[batch, 2 d]``; an all-padding row gives zeros.
    """

    def call(self, inputs):
        features, token_ids = inputs
        valid = tf.cast(tf.not_equal(token_ids, 0), features.dtype)[:, :, None]
        count = tf.reduce_sum(valid, axis=1)
        mean = tf.reduce_sum(features * valid, axis=1) / tf.maximum(count, 1.0)
        lowest = tf.cast(features.dtype.min, features.dtype)
        maximum = tf.reduce_max(tf.where(valid > 0, features, lowest), axis=1)
        maximum = tf.where(count > 0, maximum, tf.zeros_like(maximum))
        return tf.concat([mean, maximum], axis=-1)

    def compute_output_shape(self, input_shape):
        features_shape = input_shape[0]
        return (features_shape[0], 2 * features_shape[-1])

    def compute_mask(self, inputs, mask=None):
        return None


@keras.saving.register_keras_serializable(package="glomo_tf")
class SelfAttentionMask(keras.layers.Layer):
    """Token ids ``[batch, T]`` -> bool ``[batch, T, T]``: ``True`` where both positions are real
    tokens (the attention mask of masked self-attention)."""

    def call(self, token_ids):
        valid = tf.not_equal(token_ids, 0)
        return tf.logical_and(valid[:, :, None], valid[:, None, :])

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[1], input_shape[1])

    def compute_mask(self, inputs, mask=None):
        return None


def build_classifier(vocabulary_size, num_classes, variant="baseline", graph_predictor=None,
                     embedding_dim=128, rnn_units=128, attention_heads=4, dropout=0.3,
                     num_mixtures=2, conditioned=True, include_products=True, name=None):
    """A classifier ``token ids [batch, T] (0 = padding) -> class probabilities [batch, classes]``.

    Args:
        vocabulary_size: int, ids of the tokenizer (``<pad>`` and ``<unk>`` included); must be the
            graph predictor's ``vocabulary_size`` when one is given.
        num_classes: int >= 2.
        variant: one of ``"baseline"``, ``"glomo_embeddings"``, ``"glomo_rnn"``, ``"uniform"``
            (see the module docstring).
        graph_predictor: a :class:`GraphPredictor` (from ``glomo_tf.load_graph_predictor``);
            required by ``glomo_embeddings`` and ``glomo_rnn``, unused otherwise. It stays frozen
            (``GlomoTransfer``'s default).
        embedding_dim: int, word-embedding width.
        rnn_units: int, GRU units per direction.
        attention_heads: int, heads of the self-attention (its key width is the feature width
            divided by the heads).
        dropout: float, dropout after the embeddings, on the attention output and before the
            output layer.
        num_mixtures, conditioned, include_products: the transferred graphs' mixtures
            (see :class:`GlomoTransfer`).
        name: model name; default ``"classifier_<variant>"``.

    Returns:
        An uncompiled ``keras.Model``; compile it with a sparse categorical cross-entropy.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}.")
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}.")
    if variant in PREDICTOR_VARIANTS:
        if not isinstance(graph_predictor, GraphPredictor):
            raise ValueError(f"The {variant!r} variant needs a pretrained GraphPredictor "
                             "(glomo_tf.load_graph_predictor(path)); got "
                             f"{type(graph_predictor).__name__}.")
        if graph_predictor.vocabulary_size != vocabulary_size:
            raise ValueError(
                f"vocabulary_size={vocabulary_size} differs from the graph predictor's "
                f"{graph_predictor.vocabulary_size}: tokenize with the pretraining tokenizer and "
                "pass its vocabulary_size, so both read the same ids.")

    def transfer(features, token_ids, graph_mode, layer_name):
        layer = GlomoTransfer(graph_predictor if graph_mode == "learned" else None,
                              num_mixtures=num_mixtures, conditioned=conditioned,
                              include_products=include_products, graph_mode=graph_mode,
                              name=layer_name)
        return layer([features, token_ids])

    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    h = keras.layers.Embedding(vocabulary_size, embedding_dim, mask_zero=True,
                               name="embedding")(token_ids)
    if variant == "glomo_embeddings":
        h = transfer(h, token_ids, "learned", "glomo_embeddings")
    elif variant == "uniform":
        h = transfer(h, token_ids, "uniform", "uniform_graphs")
    h = keras.layers.Dropout(dropout, name="embedding_dropout")(h)
    h = keras.layers.Bidirectional(keras.layers.GRU(rnn_units, return_sequences=True),
                                   name="bigru")(h)
    if variant == "glomo_rnn":
        h = transfer(h, token_ids, "learned", "glomo_rnn")
    width = h.shape[-1]
    attention_mask = SelfAttentionMask(name="attention_mask")(token_ids)
    attended = keras.layers.MultiHeadAttention(
        attention_heads, key_dim=max(1, width // attention_heads), name="self_attention")(
            h, h, attention_mask=attention_mask)
    attended = keras.layers.Dropout(dropout, name="attention_dropout")(attended)
    h = keras.layers.LayerNormalization(name="attention_norm")(
        keras.layers.Add(name="residual")([h, attended]))
    pooled = MaskedMeanMaxPooling(name="mean_max_pooling")([h, token_ids])
    pooled = keras.layers.Dropout(dropout, name="output_dropout")(pooled)
    probabilities = keras.layers.Dense(num_classes, activation="softmax", dtype="float32",
                                       name="probabilities")(pooled)
    return keras.Model(token_ids, probabilities, name=name or f"classifier_{variant}")
