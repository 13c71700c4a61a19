"""The GLoMo context decoder: an RNN that predicts the next ``D`` units from a feature (Eq. 3)."""

import keras
import tensorflow as tf

from glomo_tf import hparams, ops
from glomo_tf.layers._common import gru_update, time_slice


@keras.saving.register_keras_serializable(package="glomo_tf")
class ContextDecoder(keras.layers.Layer):
    """Decodes the context of length ``D`` around sampled positions, autoregressively.

    For a start position ``t`` and an initial state ``f_t`` (the top feature ``F^L_t`` of the feature
    predictor), a stack of GRU layers, every layer initialised with ``f_t``, reads
    ``[0, e(x_{t+1}), ..., e(x_{t+D-1})]`` and predicts ``x_{t+1}, ..., x_{t+D}`` (Eq. 3); the backward
    decoder predicts ``x_{t-1}, ..., x_{t-D}``. The output projection is the transpose of the
    embedding matrix passed in (tied weights, no bias). Targets outside the sequence or on padding
    get weight 0.

    Args:
        hidden_dim: int, state width; equals the embedding width.
        context_length: int, ``D``, units predicted per position (1 is the ``-sequence`` ablation).
        num_layers: int, stacked GRU layers.
        direction: ``"forward"`` or ``"backward"``.
        dropout: float, dropout on the initial states and between GRU layers.

    Call arguments:
        initial_states: ``[batch, S, hidden_dim]``, the state each decoded context starts from.
        positions: int ``[S]`` (any integer dtype), the start position ``t`` of each state
            (shared by the batch).
        token_ids: int ``[batch, T]``, the sequence the targets come from (0 = padding).
        embedding_matrix: ``[vocabulary_size, hidden_dim]``, inputs and tied output projection.
        training: bool.

    Returns:
        A dict with ``"logits"`` ``[batch, S, D, vocabulary_size]``, ``"targets"`` int
        ``[batch, S, D]`` and ``"weights"`` float ``[batch, S, D]``.

    Example:

    >>> import numpy as np
    >>> dec = ContextDecoder(hidden_dim=8, context_length=3)
    >>> ids = np.array([[4, 2, 7, 1, 3]], dtype="int32")
    >>> emb = np.random.rand(10, 8).astype("float32")
    >>> out = dec(np.random.rand(1, 2, 8).astype("float32"), np.array([0, 1]), ids, emb)
    >>> out["targets"].numpy().tolist()
    [[[2, 7, 1], [7, 1, 3]]]

    References:
        Yang et al., NeurIPS 2018, Section 2.1, Eq. 3.
    """

    def __init__(self, hidden_dim, context_length=3, num_layers=2, direction="forward",
                 dropout=0.0, **kwargs):
        super().__init__(**kwargs)
        hparams.check_choice("direction", direction, ops.DIRECTIONS)
        if context_length < 1 or num_layers < 1:
            raise ValueError(
                f"context_length and num_layers must be >= 1, got {context_length}, {num_layers}.")
        self.hidden_dim = int(hidden_dim)
        self.context_length = int(context_length)
        self.num_layers = int(num_layers)
        self.direction = direction
        self.dropout = float(dropout)
        self._step = 1 if direction == "forward" else -1
        # Keras GRU layers hold each layer's weights (and keep the saved files' layout);
        # _unrolled_gru computes with them.
        self.rnns = [keras.layers.GRU(hidden_dim, dtype=self.dtype_policy, name=f"gru_{i}")
                     for i in range(self.num_layers)]
        self.state_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

    def build(self, *args, **kwargs):
        for rnn in self.rnns:
            rnn.build((None, self.context_length, self.hidden_dim))
        self.built = True

    def target_positions(self, positions):
        """``[S, D]`` positions ``t + j`` (forward) or ``t - j`` (backward), ``j = 1..D``."""
        offsets = tf.range(1, self.context_length + 1, dtype=positions.dtype) * self._step
        return positions[:, None] + offsets[None, :]

    def call(self, initial_states, positions, token_ids, embedding_matrix, training=False):
        positions = tf.convert_to_tensor(positions)
        if not positions.dtype.is_integer:
            raise TypeError(f"ContextDecoder expects integer positions [S], got dtype "
                            f"{positions.dtype}.")
        positions = tf.cast(positions, tf.int32)  # any integer dtype (NumPy's default is int64)
        token_ids = tf.cast(token_ids, tf.int32)
        length = tf.shape(token_ids)[1]
        target_pos = self.target_positions(positions)  # [S, D]
        in_range = (target_pos >= 0) & (target_pos < length)
        targets = tf.gather(token_ids, tf.clip_by_value(target_pos, 0, length - 1), axis=1)
        targets = tf.where(in_range[None], targets, 0)  # [B, S, D]
        weights = tf.cast(targets != 0, tf.float32)
        embedding_matrix = tf.cast(embedding_matrix, self.compute_dtype)
        target_emb = tf.gather(embedding_matrix, targets)  # [B, S, D, d]
        batch, num_pos = tf.shape(targets)[0], tf.shape(targets)[1]
        # [0, emb(x_{t+1}), .., emb(x_{t+D-1})]: the targets shifted one step (a Slice and a pad,
        # whose gradients are cheap on CPU outside XLA)
        inputs = tf.pad(time_slice(target_emb, 0, self.context_length - 1, axis=2),
                        [[0, 0], [0, 0], [1, 0], [0, 0]])
        inputs = tf.reshape(inputs, [-1, self.context_length, self.hidden_dim])
        state = tf.reshape(tf.cast(initial_states, self.compute_dtype), [-1, self.hidden_dim])
        state = self.state_dropout(state, training=training)
        hidden = inputs
        for i, rnn in enumerate(self.rnns):
            if i and training and self.dropout > 0:
                hidden = self.state_dropout(hidden, training=training)
            hidden = self._unrolled_gru(rnn.cell, hidden, state)
        # One [B*S*D, d] x [d, V] product: a batched matmul would broadcast the table over the
        # B*S contexts, and its gradient would materialise a [B*S, V, d] tensor before summing.
        logits = tf.matmul(tf.reshape(hidden, [-1, self.hidden_dim]), embedding_matrix,
                           transpose_b=True)
        logits = tf.reshape(logits, [batch, num_pos, self.context_length, -1])
        return {"logits": logits, "targets": targets, "weights": weights}

    def _unrolled_gru(self, cell, inputs, state):
        """``inputs [N, D, d]`` through one GRU layer started at ``state [N, d]``: what ``cell``'s
        Keras ``GRU`` computes (``reset_after``, its weights), unrolled over the ``D`` steps with
        the input part of every step as one product. Keras' cell slices its kernels at every
        step, and those slices' gradients cost about a fifth of the decoders' time outside XLA."""
        units = self.hidden_dim
        kernel, recurrent_kernel = (tf.cast(w, self.compute_dtype)
                                    for w in (cell.kernel, cell.recurrent_kernel))
        input_bias, recurrent_bias = tf.unstack(tf.cast(cell.bias, self.compute_dtype))
        gates_x = tf.nn.bias_add(tf.matmul(tf.reshape(inputs, [-1, units]), kernel), input_bias)
        outputs = []
        for step_gates in tf.unstack(tf.reshape(gates_x, [-1, self.context_length, 3 * units]),
                                     axis=1):
            gates_h = tf.nn.bias_add(tf.matmul(state, recurrent_kernel), recurrent_bias)
            state = gru_update(step_gates, gates_h, state, keras_order=True)
            outputs.append(state)
        return tf.stack(outputs, axis=1)

    def compute_output_shape(self, states_shape, positions_shape, ids_shape, embedding_shape):
        batch, num_pos = states_shape[0], states_shape[1]
        return {"logits": (batch, num_pos, self.context_length, embedding_shape[0]),
                "targets": (batch, num_pos, self.context_length),
                "weights": (batch, num_pos, self.context_length)}

    def get_config(self):
        config = super().get_config()
        config.update({
            "hidden_dim": self.hidden_dim,
            "context_length": self.context_length,
            "num_layers": self.num_layers,
            "direction": self.direction,
            "dropout": self.dropout,
        })
        return config
