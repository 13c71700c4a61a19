"""A BiDAF-style extractive reader at CPU size, with and without transferred GLoMo graphs (the
paper's SQuAD setting, Table 1).

The passage and the question share the embedding and the encoder; the graphs are computed per
text by the frozen predictor:

    each text:   ids -> Embedding(mask_zero) -> [GlomoTransfer] -> Dropout -> BiGRU
                     -> [GlomoTransfer]                     = p (passage), q (question)
    bi-attention (Seo et al., 2017): S_tj = w . [p_t ; q_j ; p_t * q_j]
                 c2q_t = sum_j softmax_j(S_tj) q_j;  q2c = sum_t softmax_t(max_j S_tj) p_t
                 g_t = [p_t ; c2q_t ; p_t * c2q_t ; p_t * q2c] -> Dense(relu) -> Dropout
    self-attention over the passage (a unit never attends to itself), added to g
    modelling:   BiGRU -> m;  start logits = w_s . m_t;  end logits = w_e . BiGRU(m)_t
    inference:   the span s <= e < s + 30 maximising p_start(s) p_end(e)

The variants are :func:`glomo_tf.models.build_pair_classifier`'s: ``baseline``,
``glomo_embeddings`` (graphs into the word embeddings, the paper's first Table 1 row),
``glomo_rnn`` (into the encoder's states, its second), ``uniform`` (uniform graphs at the
embeddings), ``uniform_rnn`` (uniform graphs at the encoder's states, ``glomo_rnn``'s place).

Example:

>>> import numpy as np
>>> model = build_reader(vocabulary_size=50, variant="uniform", embedding_dim=8, rnn_units=4)
>>> start, end = model([np.array([[3, 4, 5, 6, 0]], "int32"), np.array([[7, 8, 0]], "int32")])
>>> start.shape, end.shape
(TensorShape([1, 5]), TensorShape([1, 5]))
"""

import keras
import tensorflow as tf

from glomo_tf.models.classifier import PREDICTOR_VARIANTS
from glomo_tf.models.pair_classifier import PAIR_VARIANTS, shared_text_encoder

READER_VARIANTS = PAIR_VARIANTS
NEGATIVE = -1e9


@keras.saving.register_keras_serializable(package="glomo_tf")
class BiAttention(keras.layers.Layer):
    """BiDAF's attention flow between a passage and a question.

    Call arguments:
        inputs: ``[p, q, p_ids, q_ids]``: features ``[batch, Tp, d]`` and ``[batch, Tq, d]`` and
            their token ids (0 = padding, never attended to).

    Returns:
        ``[p ; c2q ; p * c2q ; p * q2c]`` ``[batch, Tp, 4 d]`` (see the module docstring).
    """

    def build(self, input_shape):
        d = input_shape[0][-1]
        self.similarity = self.add_weight(name="similarity", shape=(3, d),
                                          initializer="glorot_uniform")
        self.built = True

    def call(self, inputs):
        p, q, p_ids, q_ids = inputs
        p32, q32 = tf.cast(p, "float32"), tf.cast(q, "float32")
        w = tf.cast(self.similarity, "float32")
        scores = (tf.einsum("btd,d->bt", p32, w[0])[:, :, None]
                  + tf.einsum("bjd,d->bj", q32, w[1])[:, None, :]
                  + tf.einsum("btd,bjd->btj", p32 * w[2], q32))
        q_valid = tf.not_equal(q_ids, 0)[:, None, :]
        p_valid = tf.not_equal(p_ids, 0)
        to_question = tf.nn.softmax(tf.where(q_valid, scores, NEGATIVE), axis=-1)
        c2q = tf.einsum("btj,bjd->btd", to_question, q32)
        strongest = tf.reduce_max(tf.where(q_valid, scores, NEGATIVE), axis=-1)
        to_passage = tf.nn.softmax(tf.where(p_valid, strongest, NEGATIVE), axis=-1)
        q2c = tf.einsum("bt,btd->bd", to_passage, p32)[:, None, :]
        out = tf.concat([p32, c2q, p32 * c2q, p32 * q2c], axis=-1)
        return tf.cast(out, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return (*input_shape[0][:-1], 4 * input_shape[0][-1])

    def compute_mask(self, inputs, mask=None):
        return keras.ops.not_equal(inputs[2], 0)


@keras.saving.register_keras_serializable(package="glomo_tf")
class PassageSelfAttention(keras.layers.Layer):
    """Dot-product self-attention over the passage's units (a unit never attends to itself nor to
    padding), returned added to the input: ``x_t + sum_s softmax_s(x_t . W x_s) x_s``.

    Call arguments:
        inputs: ``[x, ids]``: features ``[batch, T, d]`` and token ids ``[batch, T]``.
    """

    def build(self, input_shape):
        d = input_shape[0][-1]
        self.kernel = self.add_weight(name="kernel", shape=(d, d), initializer="glorot_uniform")
        self.built = True

    def call(self, inputs):
        x, ids = inputs
        x32 = tf.cast(x, "float32")
        scores = tf.einsum("btd,de,bse->bts", x32, tf.cast(self.kernel, "float32"), x32)
        valid = tf.not_equal(ids, 0)
        length = tf.shape(ids)[1]
        allowed = valid[:, None, :] & ~tf.eye(length, dtype=tf.bool)[None]
        weights = tf.nn.softmax(tf.where(allowed, scores, NEGATIVE), axis=-1)
        weights *= tf.cast(tf.reduce_any(allowed, axis=-1, keepdims=True), weights.dtype)
        return tf.cast(x32 + tf.einsum("bts,bsd->btd", weights, x32), self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return input_shape[0]

    def compute_mask(self, inputs, mask=None):
        return keras.ops.not_equal(inputs[1], 0)


@keras.saving.register_keras_serializable(package="glomo_tf")
class SpanLogits(keras.layers.Layer):
    """``w . x_t + b`` per unit, ``-1e9`` on padding: ``[batch, T, d], ids -> [batch, T]``."""

    def build(self, input_shape):
        self.dense = keras.layers.Dense(1, dtype=self.dtype_policy, name="dense")
        self.dense.build(input_shape[0])
        self.built = True

    def call(self, inputs):
        x, ids = inputs
        logits = tf.cast(tf.squeeze(self.dense(x), -1), "float32")
        return tf.where(tf.not_equal(ids, 0), logits, NEGATIVE)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[1])

    def compute_mask(self, inputs, mask=None):
        return None


def build_reader(vocabulary_size, variant="baseline", graph_predictor=None, embedding_dim=64,
                 rnn_units=64, dropout=0.2, num_mixtures=2, transfer_dropout=0.0, top_k=None,
                 graph_temperature=None, passage_graphs=False, name=None):
    """A reader ``[passage ids [batch, Tp], question ids [batch, Tq]] -> [start logits, end
    logits]``, both ``[batch, Tp]`` (padding at ``-1e9``): train both with a sparse categorical
    cross-entropy from logits on the answer's first and last unit.

    Args:
        vocabulary_size: ids of the tokenizer (the graph predictor's when one is given).
        variant: one of :data:`READER_VARIANTS` (see the module docstring).
        graph_predictor: a frozen :class:`GraphPredictor`; required by ``glomo_embeddings`` and
            ``glomo_rnn``, unused otherwise.
        embedding_dim: word-embedding width.
        rnn_units: GRU units per direction (encoder, modelling layers), and the width of the
            attention flow's projection (``2 rnn_units``).
        dropout: after the embeddings and the projection.
        num_mixtures: the :class:`GlomoTransfer` layers' setting.
        transfer_dropout: the :class:`GlomoTransfer` layers' setting.
        top_k: the :class:`GlomoTransfer` layers' setting.
        graph_temperature: the :class:`GlomoTransfer` layers' setting.
        passage_graphs: bool (GLoMo variants): the model takes a third input, the predictor's
            dense graphs of the passages ``[batch, 2, L, K, Tp, Tp]`` computed beforehand (a
            :mod:`glomo_tf.data.graph_cache` of the fixed passages), and runs the predictor on
            the questions only. Its weights are those of the model without it (same layers, same
            names: ``set_weights`` carries them over), its outputs the same to float round-off.
        name: model name; default ``"reader_<variant>"``.
    """
    if variant not in READER_VARIANTS:
        raise ValueError(f"A reader's variant is one of {', '.join(READER_VARIANTS)}, got "
                         f"{variant!r}.")
    if passage_graphs and variant not in PREDICTOR_VARIANTS:
        raise ValueError(f"passage_graphs feeds a predictor's graphs: variants "
                         f"{' / '.join(PREDICTOR_VARIANTS)}, not {variant!r}.")
    encode = shared_text_encoder(vocabulary_size, variant, graph_predictor, embedding_dim,
                                 rnn_units, dropout, num_mixtures, transfer_dropout, top_k,
                                 graph_temperature)

    passage_ids = keras.Input((None,), dtype="int32", name="passage_ids")
    question_ids = keras.Input((None,), dtype="int32", name="question_ids")
    inputs = [passage_ids, question_ids]
    graphs = None
    if passage_graphs:
        graphs = keras.Input((2, graph_predictor.num_layers, graph_predictor.num_heads, None,
                              None), name="passage_graphs")
        inputs.append(graphs)
    g = BiAttention(name="bi_attention")(
        [encode(passage_ids, graphs), encode(question_ids), passage_ids, question_ids])
    g = keras.layers.Dense(2 * rnn_units, activation="relu", name="projection")(g)
    g = keras.layers.Dropout(dropout, name="projection_dropout")(g)
    g = PassageSelfAttention(name="self_attention")([g, passage_ids])
    m = keras.layers.Bidirectional(keras.layers.GRU(rnn_units, return_sequences=True),
                                   name="modelling_bigru")(g)
    m_end = keras.layers.Bidirectional(keras.layers.GRU(rnn_units, return_sequences=True),
                                       name="end_bigru")(m)
    start = SpanLogits(name="start")([m, passage_ids])
    end = SpanLogits(name="end")([keras.layers.Concatenate(name="end_features")([m, m_end]),
                                  passage_ids])
    return keras.Model(inputs, [start, end], name=name or f"reader_{variant}")
