"""Sentence-pair classifiers with and without transferred GLoMo graphs (the paper's MNLI setting).

Both sentences go through one shared encoder, the graphs are computed per sentence by the frozen
predictor (it never sees the pair), and an ESIM-style soft alignment relates the two
(Chen et al., 2017, "Enhanced LSTM for Natural Language Inference"):

    each sentence: ids -> Embedding(mask_zero) -> [GlomoTransfer] -> Dropout -> BiGRU
                       -> [GlomoTransfer]                                   = a (first), b (second)
    alignment:     e_ij = a_i . b_j;  a~_i = sum_j softmax_j(e_ij) b_j,  b~_j = sum_i softmax_i(e_ij) a_i
    composition:   [a ; a~ ; a - a~ ; a * a~] -> Dense(relu) -> Dropout -> BiGRU
                       -> masked mean and max pooling                       (b likewise, shared)
    classifier:    [v_a ; v_b] -> Dropout -> Dense(tanh) -> Dropout -> Dense softmax

The variants are those of :func:`glomo_tf.models.build_classifier` that transfer graphs:
``baseline`` (no GlomoTransfer), ``glomo_embeddings`` (the predictor's graphs mixed into the word
embeddings), ``glomo_rnn`` (into the first BiGRU's states), ``uniform`` (uniform graphs at the
embeddings: the same extra parameters without learned structure), ``uniform_rnn`` (uniform graphs
at the first BiGRU's states, ``glomo_rnn``'s place).

Example:

>>> import numpy as np
>>> model = build_pair_classifier(vocabulary_size=50, num_classes=3, variant="uniform",
...                               embedding_dim=8, rnn_units=4)
>>> model([np.array([[3, 4, 5, 0]], "int32"), np.array([[6, 7, 0]], "int32")]).shape
TensorShape([1, 3])
"""

import keras
import tensorflow as tf

from glomo_tf.models.classifier import (PREDICTOR_VARIANTS, MaskedMeanMaxPooling,
                                        check_graph_predictor, transfer_layer)

PAIR_VARIANTS = ("baseline", "glomo_embeddings", "glomo_rnn", "uniform", "uniform_rnn")


@keras.saving.register_keras_serializable(package="glomo_tf")
class SoftAlignment(keras.layers.Layer):
    """ESIM's local inference: each unit of one sentence attends over the other sentence's units.

    Call arguments:
        inputs: ``[a, b, a_ids, b_ids]``: features ``[batch, Ta, d]`` and ``[batch, Tb, d]``, and
            their token ids (0 = padding: padded units are never attended to).

    Returns:
        ``[m_a, m_b]``: ``[a ; a~ ; a - a~ ; a * a~]`` ``[batch, Ta, 4 d]`` and the same for ``b``,
        where ``a~_i = sum_j softmax_j(a_i . b_j) b_j`` and ``b~_j = sum_i softmax_i(a_i . b_j)
        a_i``. The outputs carry the padding masks of the ids.
    """

    def call(self, inputs):
        a, b, a_ids, b_ids = inputs
        scores = tf.einsum("bid,bjd->bij", tf.cast(a, "float32"), tf.cast(b, "float32"))
        a_valid, b_valid = tf.not_equal(a_ids, 0), tf.not_equal(b_ids, 0)
        lowest = tf.constant(-1e9, "float32")
        to_b = tf.nn.softmax(tf.where(b_valid[:, None, :], scores, lowest), axis=2)
        to_a = tf.nn.softmax(tf.where(a_valid[:, :, None], scores, lowest), axis=1)
        a_aligned = tf.einsum("bij,bjd->bid", tf.cast(to_b, b.dtype), b)
        b_aligned = tf.einsum("bij,bid->bjd", tf.cast(to_a, a.dtype), a)
        return [self._enhance(a, a_aligned), self._enhance(b, b_aligned)]

    @staticmethod
    def _enhance(x, aligned):
        return tf.concat([x, aligned, x - aligned, x * aligned], axis=-1)

    def compute_output_shape(self, input_shape):
        a_shape, b_shape = input_shape[0], input_shape[1]
        return [(*a_shape[:-1], 4 * a_shape[-1]), (*b_shape[:-1], 4 * b_shape[-1])]

    def compute_mask(self, inputs, mask=None):
        return [keras.ops.not_equal(inputs[2], 0), keras.ops.not_equal(inputs[3], 0)]


def shared_text_encoder(vocabulary_size, variant, graph_predictor, embedding_dim, rnn_units,
                        dropout, num_mixtures, transfer_dropout, top_k, graph_temperature,
                        form=None):
    """The encoder both texts of a pair model share (this module's classifier and
    :func:`glomo_tf.models.build_reader`): ``encode(ids, graphs=None)``, ids -> Embedding ->
    [GlomoTransfer] -> Dropout -> BiGRU -> [GlomoTransfer] as ``variant`` places it, one set of
    layers for every call. ``graphs``: the text's graphs given as an input (dense) instead of
    computed from ``ids`` by the predictor. ``form``: None (the paper's fusion) or a dict of
    :func:`~glomo_tf.models.classifier.transfer_layer`'s ``transfer_form`` and
    ``propagation_*`` arguments."""
    learned = variant in PREDICTOR_VARIANTS
    if learned:
        check_graph_predictor(variant, graph_predictor, vocabulary_size)
    transfer = None
    if variant != "baseline":
        transfer = transfer_layer(graph_predictor if learned else None, **(form or {}),
                                  num_mixtures=num_mixtures,
                                  graph_mode="learned" if learned else "uniform",
                                  dropout=transfer_dropout, top_k=top_k if learned else None,
                                  graph_temperature=graph_temperature if learned else None,
                                  name=variant if learned else "uniform_graphs")
    embedding = keras.layers.Embedding(vocabulary_size, embedding_dim, mask_zero=True,
                                       name="embedding")
    embedding_dropout = keras.layers.Dropout(dropout, name="embedding_dropout")
    encoder = keras.layers.Bidirectional(keras.layers.GRU(rnn_units, return_sequences=True),
                                         name="encoder_bigru")

    def encode(ids, graphs=None):
        source = ids if graphs is None else graphs
        h = embedding(ids)
        if variant in ("glomo_embeddings", "uniform"):
            h = transfer([h, source])
        h = encoder(embedding_dropout(h))
        if variant in ("glomo_rnn", "uniform_rnn"):
            h = transfer([h, source])
        return h

    return encode


def build_pair_classifier(vocabulary_size, num_classes, variant="baseline", graph_predictor=None,
                          embedding_dim=128, rnn_units=128, dropout=0.3, num_mixtures=2,
                          transfer_dropout=0.0, top_k=None, graph_temperature=None,
                          transfer_form="fusion", propagation_steps=3,
                          propagation_aggregation="mean", propagation_update="gru",
                          propagation_directions="both", propagation_hidden_units=None,
                          propagation_layer_norm=False, name=None):
    """A pair classifier ``[first ids [batch, Ta], second ids [batch, Tb]] -> class probabilities``.

    Args:
        vocabulary_size: int, ids of the tokenizer; the graph predictor's ``vocabulary_size``
            when one is given (both read the same ids).
        num_classes: int >= 2.
        variant: one of :data:`PAIR_VARIANTS` (see the module docstring).
        graph_predictor: a frozen :class:`GraphPredictor`; required by ``glomo_embeddings`` and
            ``glomo_rnn``, unused otherwise.
        embedding_dim: word-embedding width.
        rnn_units: GRU units per direction (encoder and composition), and the width of the
            composition's projection and of the classifier's hidden layer.
        dropout: after the embeddings, the projection and before both classifier layers.
        num_mixtures: the :class:`GlomoTransfer` layers' setting.
        transfer_dropout: the :class:`GlomoTransfer` layers' setting.
        top_k: the :class:`GlomoTransfer` layers' setting.
        graph_temperature: the :class:`GlomoTransfer` layers' setting.
        transfer_form: ``"fusion"`` (default, the paper's) or ``"propagation"``
            (:class:`GraphPropagation`), as :func:`~glomo_tf.models.build_classifier`'s.
        propagation_steps: :class:`GraphPropagation`'s ``steps``.
        propagation_aggregation: :class:`GraphPropagation`'s ``aggregation``.
        propagation_update: :class:`GraphPropagation`'s ``update``.
        propagation_directions: :class:`GraphPropagation`'s ``directions``.
        propagation_hidden_units: :class:`GraphPropagation`'s ``hidden_units``.
        propagation_layer_norm: :class:`GraphPropagation`'s ``layer_norm``.
        name: model name; default ``"pair_classifier_<variant>"``.

    Returns:
        An uncompiled ``keras.Model`` with inputs ``first_ids`` and ``second_ids``.
    """
    if variant not in PAIR_VARIANTS:
        raise ValueError(f"A pair classifier's variant is one of {', '.join(PAIR_VARIANTS)}, "
                         f"got {variant!r}.")
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}.")
    encode = shared_text_encoder(vocabulary_size, variant, graph_predictor, embedding_dim,
                                 rnn_units, dropout, num_mixtures, transfer_dropout, top_k,
                                 graph_temperature,
                                 form=dict(transfer_form=transfer_form,
                                           propagation_steps=propagation_steps,
                                           propagation_aggregation=propagation_aggregation,
                                           propagation_update=propagation_update,
                                           propagation_directions=propagation_directions,
                                           propagation_hidden_units=propagation_hidden_units,
                                           propagation_layer_norm=propagation_layer_norm))
    projection = keras.layers.Dense(rnn_units, activation="relu", name="projection")
    projection_dropout = keras.layers.Dropout(dropout, name="projection_dropout")
    composition = keras.layers.Bidirectional(keras.layers.GRU(rnn_units, return_sequences=True),
                                             name="composition_bigru")
    pooling = MaskedMeanMaxPooling(name="mean_max_pooling")

    first_ids = keras.Input((None,), dtype="int32", name="first_ids")
    second_ids = keras.Input((None,), dtype="int32", name="second_ids")
    enhanced = SoftAlignment(name="soft_alignment")(
        [encode(first_ids), encode(second_ids), first_ids, second_ids])
    pooled = [pooling([composition(projection_dropout(projection(m))), ids])
              for m, ids in zip(enhanced, (first_ids, second_ids))]
    h = keras.layers.Concatenate(name="pair_features")(pooled)
    h = keras.layers.Dropout(dropout, name="hidden_dropout")(h)
    h = keras.layers.Dense(rnn_units, activation="tanh", name="hidden")(h)
    h = keras.layers.Dropout(dropout, name="output_dropout")(h)
    probabilities = keras.layers.Dense(num_classes, activation="softmax", dtype="float32",
                                       name="probabilities")(h)
    return keras.Model([first_ids, second_ids], probabilities,
                       name=name or f"pair_classifier_{variant}")
