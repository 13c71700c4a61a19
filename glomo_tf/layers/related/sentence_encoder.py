"""``SentenceEncoder``: the bidirectional-GRU sentence encoder of Quick Thoughts and of the
self-supervised objectives of the thesis' chapter 3 (Section 3.2.2), optionally fed GLoMo graphs."""

import keras
import tensorflow as tf

from glomo_tf import hparams
from glomo_tf.hparams import SENTENCE_ENCODER, SENTENCE_POOLINGS
from glomo_tf.layers.glomo_transfer import GlomoTransfer
from glomo_tf.layers.graph_predictor import optional_graph_predictor


@keras.saving.register_keras_serializable(package="glomo_tf")
class SentenceEncoder(keras.layers.Layer):
    """Token ids -> embeddings -> bidirectional GRU -> a sentence vector.

    The sentence vector is the concatenation ``[h_fw ; h_bw]`` of the forward GRU's state after the
    last real unit and the backward GRU's state after the first (Section 3.2.2: "the final hidden
    states of the forward and backward GRUs are concatenated"). With ``return_sequences`` the
    per-position states ``h^i = [h_fw^i ; h_bw^i]`` come too (Global-to-Local's ``h_trg^i``,
    Section 3.2.4), zero at padded positions.

    Padding (id 0) is masked: a sentence's vector does not depend on how much padding follows it.
    The GRUs' kernels use uniform Xavier initialisation (Section 3.3.2; Keras's default).

    With a ``graph_predictor`` (usually a pretrained, frozen GLoMo predictor over the same
    vocabulary), a :class:`GlomoTransfer` sits between the embeddings and the GRUs: they read
    ``[E ; gate(E, M E)]`` instead of ``E`` (Yang et al. 2018, Section 2.3). The encoder's
    vocabulary may extend the predictor's at the end (its tokenizer with ``[MASK]`` appended,
    :func:`glomo_tf.data.sentences.with_mask_unit`): the predictor reads those ids as ``<unk>``. The thesis has no such
    encoder; it is this library's way to feed GLoMo graphs to a sentence encoder.

    Args:
        vocabulary_size: int, number of ids (0 is padding).
        embedding_dim: int, width of the word embeddings.
        units: int, width of each direction's GRU (the vector has ``2 * units``).
            Defaults: :data:`glomo_tf.hparams.SENTENCE_ENCODER` (the thesis' sizes).
        graph_predictor: None, or a :class:`GraphPredictor` whose vocabulary the encoder's
            starts with.
        num_mixtures: int, the transfer's mixtures per direction (with a ``graph_predictor``).
        fine_tune: bool, train the graph predictor too (default False: frozen).
        return_sequences: bool, return ``{"vector", "states"}`` instead of the vector alone.
        embeddings_initializer: the embeddings' initializer.

    Call arguments:
        token_ids: int ``[batch, T]``, padded with 0 at the end.
        training: bool.
        pooling: ``"final"`` (default: the thesis' vector), ``"max"`` or ``"mean"``: the
            per-position states ``h^i`` pooled over the real units instead
            (:data:`glomo_tf.hparams.SENTENCE_POOLINGS`; a sentence without units gets zeros).

    Returns:
        ``[batch, 2 * units]``, or with ``return_sequences`` a dict with ``vector`` and
        ``states`` ``[batch, T, 2 * units]``.

    Example:

    >>> import numpy as np
    >>> encoder = SentenceEncoder(vocabulary_size=30, embedding_dim=8, units=6)
    >>> encoder(np.array([[3, 4, 5, 0], [7, 2, 0, 0]], "int32")).shape
    TensorShape([2, 12])

    References:
        Logeswaran and Lee, "An efficient framework for learning sentence representations",
        ICLR 2018; the thesis in ``papers/self-supervised-sentence-representation-thesis.txt``,
        Sections 3.2.2-3.2.4.
    """

    def __init__(self, vocabulary_size, embedding_dim=SENTENCE_ENCODER["embedding_dim"],
                 units=SENTENCE_ENCODER["units"], graph_predictor=None,
                 num_mixtures=1, fine_tune=False, return_sequences=False,
                 embeddings_initializer="uniform", **kwargs):
        super().__init__(**kwargs)
        (self.vocabulary_size, self.embedding_dim, self.units,
         self.num_mixtures) = hparams.check_positive(
            vocabulary_size=vocabulary_size, embedding_dim=embedding_dim, units=units,
            num_mixtures=num_mixtures)
        graph_predictor = optional_graph_predictor(graph_predictor)
        if graph_predictor is not None and graph_predictor.vocabulary_size > vocabulary_size:
            raise ValueError(
                f"the graph predictor reads {graph_predictor.vocabulary_size} ids but the encoder "
                f"only {vocabulary_size}: the encoder's vocabulary must be the predictor's run's "
                "tokenizer (with [MASK] appended, or not).")
        self.fine_tune = bool(fine_tune)
        self.return_sequences = bool(return_sequences)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.graph_predictor = graph_predictor
        self.embedding = keras.layers.Embedding(
            self.vocabulary_size, self.embedding_dim, mask_zero=True,
            embeddings_initializer=self.embeddings_initializer, dtype=self.dtype_policy,
            name="embedding")
        self.transfer = None if graph_predictor is None else GlomoTransfer(
            graph_predictor, num_mixtures=self.num_mixtures, fine_tune=self.fine_tune,
            dtype=self.dtype_policy, name="glomo_transfer")
        self.forward_gru = keras.layers.GRU(self.units, return_sequences=True, return_state=True,
                                            dtype=self.dtype_policy, name="forward_gru")
        self.backward_gru = keras.layers.GRU(self.units, return_sequences=True,
                                             return_state=True, go_backwards=True,
                                             dtype=self.dtype_policy, name="backward_gru")

    def build(self, input_shape=None):
        self.embedding.build((None, None))
        width = self.embedding_dim
        if self.transfer is not None:
            self.transfer.build([(None, None, self.embedding_dim), (None, None)])
            width = self.transfer.compute_output_shape(
                [(None, None, self.embedding_dim), (None, None)])[-1]
        self.forward_gru.build((None, None, width))
        self.backward_gru.build((None, None, width))
        self.built = True

    @property
    def embeddings(self):
        """The word embedding matrix ``[vocabulary_size, embedding_dim]``."""
        return self.embedding.embeddings

    def call(self, token_ids, training=None, pooling="final"):
        if pooling not in SENTENCE_POOLINGS:
            raise ValueError(f"unknown pooling {pooling!r}; choose from "
                             f"{', '.join(SENTENCE_POOLINGS)}.")
        token_ids = tf.convert_to_tensor(token_ids)
        if token_ids.shape.rank != 2 or not token_ids.dtype.is_integer:
            raise ValueError("SentenceEncoder takes int token ids [batch, T]; got "
                             f"{token_ids.dtype.name} of shape {tuple(token_ids.shape)}.")
        mask = tf.not_equal(token_ids, 0)
        x = self.embedding(token_ids)
        if self.transfer is not None:
            # Ids beyond the predictor's vocabulary ([MASK] appended to its tokenizer's) read as
            # <unk> for the predictor.
            known = token_ids < self.graph_predictor.vocabulary_size
            predictor_ids = tf.where(known, token_ids, tf.ones_like(token_ids))
            x = self.transfer([x, predictor_ids], training=training)
        forward, forward_last = self.forward_gru(x, mask=mask, training=training)
        backward, backward_last = self.backward_gru(x, mask=mask, training=training)
        if pooling == "final":
            vector = tf.concat([forward_last, backward_last], axis=-1)
            if not self.return_sequences:
                return vector
        states = tf.concat([forward, tf.reverse(backward, axis=[1])], axis=-1)
        real = tf.cast(mask, states.dtype)[:, :, None]
        states = states * real
        if pooling == "max":
            lowest = tf.cast(states.dtype.min, states.dtype)
            pooled = tf.reduce_max(tf.where(mask[:, :, None], states, lowest), axis=1)
            vector = tf.where(tf.reduce_any(mask, axis=1)[:, None], pooled, tf.zeros_like(pooled))
        elif pooling == "mean":
            vector = tf.reduce_sum(states, axis=1) / tf.maximum(tf.reduce_sum(real, axis=1), 1.0)
        if not self.return_sequences:
            return vector
        return {"vector": vector, "states": states}

    def compute_mask(self, token_ids, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        vector = (input_shape[0], 2 * self.units)
        if not self.return_sequences:
            return vector
        return {"vector": vector, "states": (input_shape[0], input_shape[1], 2 * self.units)}

    def get_config(self):
        config = super().get_config()
        config.update(
            vocabulary_size=self.vocabulary_size, embedding_dim=self.embedding_dim,
            units=self.units,
            graph_predictor=(None if self.graph_predictor is None
                             else keras.saving.serialize_keras_object(self.graph_predictor)),
            num_mixtures=self.num_mixtures, fine_tune=self.fine_tune,
            return_sequences=self.return_sequences,
            embeddings_initializer=keras.initializers.serialize(self.embeddings_initializer))
        return config
