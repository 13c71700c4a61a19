"""Ordered Memory (Shen, Tan, Hosseini, Lin, Sordoni and Courville, NeurIPS 2019): a latent-tree
sentence encoder with a stack of ``N`` memory slots, stick-breaking attention and a gated
recursive cell."""

import keras
import tensorflow as tf

from glomo_tf import hparams
from glomo_tf.layers._common import compute_cast, sequence_inputs


def stick_breaking(scores, admissible):
    """Eqs. 4.9-4.11: the distribution ``p`` over slots from scores ``alpha`` ``[B, N]``.

    ``admissible`` ``[B, N]`` is ``pi_{t-1}^{i+1}`` (the previous cumulative probability shifted
    one slot up, 1 at the last slot). ``beta = exp(alpha - max alpha)`` with the maximum taken over
    the admissible slots (``admissible > 0``), ``beta_hat = beta * admissible`` (Eq. 4.10) and
    ``p^i = beta_hat^i prod_{j<i} (1 - beta_hat^j)`` (Eq. 4.11) for ``i < N``; the last slot takes
    what remains of the stick, so ``p`` sums to one exactly (Eq. 4.11 applied to the last slot too
    sums to ``1 - prod_j (1 - beta_hat^j)``). Float32 in, float32 out.
    """
    masked = tf.where(admissible > 0, scores, tf.fill(tf.shape(scores), -1e30))
    beta = tf.exp(scores - tf.reduce_max(masked, axis=-1, keepdims=True))  # Eq. 4.9
    beta_hat = tf.minimum(beta, 1.0) * admissible  # Eq. 4.10
    remaining = tf.math.cumprod(1.0 - beta_hat, axis=-1, exclusive=True)
    last = tf.one_hot(tf.shape(scores)[-1] - 1, tf.shape(scores)[-1], dtype=scores.dtype)
    return remaining * (beta_hat * (1.0 - last) + last)  # Eq. 4.11


def masked_softmax_over_slots(scores, admissible):
    """The normalisation of the authors' released code instead of Eq. 4.11:
    ``p^i = exp(alpha^i - max) * admissible^i / sum_j exp(alpha^j - max) * admissible^j``
    (``admissible`` as in :func:`stick_breaking`; the last slot's is 1, so the sum is positive).
    Float32 in, float32 out."""
    masked = tf.where(admissible > 0, scores, tf.fill(tf.shape(scores), -1e30))
    weights = tf.exp(scores - tf.reduce_max(masked, axis=-1, keepdims=True)) * admissible
    return weights / tf.reduce_sum(weights, axis=-1, keepdims=True)


def released_admissible(admissible):
    """The released code's mask: ``pi_{t-1}^{i+1}`` below ``1e-5`` counts as an empty slot."""
    return tf.where(admissible < 1e-5, tf.zeros_like(admissible), admissible)


def released_optimizer(learning_rate=1e-3):
    """The optimizer of the authors' released ListOps and logic training: Adam without momentum
    (``beta_1 = 0``), epsilon ``1e-9``, the global gradient norm clipped to 1 (their L2 weight
    decay of ``1.2e-6`` is left out)."""
    return keras.optimizers.Adam(learning_rate, beta_1=0.0, epsilon=1e-9, global_clipnorm=1.0)


ATTENTIONS = {"stick_breaking": stick_breaking, "softmax": masked_softmax_over_slots}
# Eq. 4.8's scores (``tanh``), or the released code's (``layer_norm``).
SCORERS = ("tanh", "layer_norm")


@keras.saving.register_keras_serializable(package="glomo_tf")
class OrderedMemory(keras.layers.Layer):
    """Ordered Memory: a stack of ``N`` slots of width ``D`` written with stick-breaking attention,
    whose candidate sub-trees are composed by a gated recursive cell.

    At step ``t`` (Algorithm 1 of the paper, slots ``i = 1..N``, slot ``N`` the bottom of the
    stack):

    * ``x~_t = LN(W x_t + b)`` (Eq. 4.1);
    * ``alpha_t^i = w2 . tanh(W1 [M^_{t-1}^i ; x~_t] + b1) + b2`` (Eq. 4.8) and ``p_t`` the
      stick-breaking distribution over slots masked by ``pi_{t-1}^{i+1}`` (Eqs. 4.9-4.11, see
      :func:`stick_breaking`): ``p_t`` only points at an occupied slot or the free slot just
      above the stack;
    * ``pi_t^i = sum_{j<=i} p_t^j``, ``pi<_t^i = sum_{j>=i} p_t^j`` (Eqs. 4.3-4.4);
    * ``M_t^i = M_{t-1}^i (1 - pi<_t^i) + M^_{t-1}^i pi<_t^i`` (Eq. 4.5);
    * ``M^_t^0 = x~_t`` and for ``i = 1..N``: ``o_t^i = cell(M_t^i, M^_t^{i-1})``,
      ``M^_t^i = x~_t (1 - pi_t^i) + o_t^i pi_t^i`` (Eqs. 4.6-4.7, with Algorithm 1's exponent
      ``i``: Eq. 4.7 prints ``i + 1``, which would zero the slot just above the stack);
    * the cell: ``[v; h; c; u] = W2 ReLU(W1 [M^_t^{i-1} ; M_t^i] + b1) + b2`` (Eq. 4.12, hidden
      width ``4 D``) and ``o = LN(sigmoid(v) M^^{i-1} + sigmoid(h) M^i + sigmoid(c) u)`` (Eq. 4.13),
      ``LN`` the layer norm of Eq. 4.1 (shared parameters).

    The memory starts empty: ``M_0 = M^_0 = 0`` and ``pi_0 = 0``, so ``p_1`` points at slot ``N``.
    The output of a sequence is ``M^_T^N`` of its last real step. The part of ``W1 M^i`` that does
    not depend on the slot recursion is computed for all slots in one product; only the
    ``M^^{i-1}`` half runs slot by slot. The loop over time is a ``tf.while_loop`` (it compiles
    with XLA).

    Padded steps (``mask`` False) leave ``M``, ``M^`` and ``pi`` unchanged; their per-step outputs
    and attention rows are zero. Padding may be anywhere, not only at the end.

    Dropout (Table A.1's four rates): ``input_dropout`` on the inputs ``x_t``; ``attention_dropout``
    on the hidden layer of Eq. 4.8; ``hidden_dropout`` on the cell's inputs and its hidden layer
    (Eq. 4.12); ``output_dropout`` on the outputs (the input of a classifier's MLP). The attention
    and hidden masks are drawn once per sequence and shared by its steps (variational dropout).

    Args:
        units: int, slot width ``D``.
        num_slots: int, number of slots ``N`` (the tree depth the memory can hold). The weights do
            not depend on it: a call can raise it (``num_slots=`` call argument).
        input_dropout: float in [0, 1), Table A.1's *In* rate.
        hidden_dropout: float in [0, 1), Table A.1's *Hidden* rate.
        attention_dropout: float in [0, 1), Table A.1's *Attention* rate.
        output_dropout: float in [0, 1), Table A.1's *Out* rate.
        return_sequences: bool, return ``M^_t^N`` at every step ``[B, T, D]`` instead of the last.
        return_attention: bool, also return the attention distributions ``p_t`` ``[B, T, N]``
            (float32; zero rows at padded steps), the input of :func:`glomo_tf.trees.induce_trees`.
        attention: ``"stick_breaking"`` (the thesis, Eqs. 4.9-4.11) or ``"softmax"`` (the
            authors' released code: the scores masked by ``pi_{t-1}^{i+1}``, where values below
            ``1e-5`` count as empty slots, and normalised, :func:`masked_softmax_over_slots`).
        scorer: ``"tanh"`` (Eq. 4.8) or ``"layer_norm"``, the authors' released code:
            ``alpha^i = w . ReLU(LN_q(W_q x~_t + b_q) + LN_k(W_k M^_{t-1}^i + b_k)) / sqrt(D)``,
            with two layer norms of their own: the scores start small and alike over the slots,
            and the key's layer norm makes them independent of the slots' norms.
        dynamic_threshold: optional float, Appendix A.3's dynamic computation: at inference
            (``training`` false), the cell of slot ``i`` is skipped at a step where
            ``pi_t^i < dynamic_threshold`` for every sequence of the batch (then
            ``M^_t^i = x~_t (1 - pi_t^i)``); the paper uses ``1e-5``. ``None`` computes every cell.
        **kwargs: standard layer arguments.

    Call arguments:
        inputs: float ``[batch, T, d]``.
        mask: optional bool ``[batch, T]``, ``True`` at real steps; by default the Keras mask
            attached to ``inputs`` (e.g. by ``Embedding(mask_zero=True)``).
        training: bool, enables dropout.
        num_slots: optional int, overrides ``num_slots`` for this call (e.g. twice as many slots
            at test time for longer sequences than in training).

    Returns:
        ``M^_T^N`` ``[batch, D]`` (``[batch, T, D]`` with ``return_sequences``); with
        ``return_attention`` the tuple ``(outputs, p)``.

    Example:

    >>> import numpy as np
    >>> layer = OrderedMemory(8, num_slots=4, return_attention=True)
    >>> x = np.random.rand(2, 5, 3).astype("float32")
    >>> mask = np.array([[True] * 5, [True] * 3 + [False] * 2])
    >>> outputs, p = layer(x, mask=mask)
    >>> tuple(outputs.shape), tuple(p.shape)
    ((2, 8), (2, 5, 4))
    >>> rows = p.numpy().sum(-1)  # each real step's distribution sums to 1; padded rows are zero
    >>> bool(np.allclose(rows[0], 1.0)), bool(np.allclose(rows[1], [1, 1, 1, 0, 0]))
    (True, True)

    References:
        Shen, Tan, Hosseini, Lin, Sordoni and Courville, "Ordered Memory", NeurIPS 2019; Eqs.
        4.1-4.13, Algorithm 1 and Appendices A.2-A.4 of Shen's thesis, chapter 4.
    """

    def __init__(self, units, num_slots, input_dropout=0.0, hidden_dropout=0.0,
                 attention_dropout=0.0, output_dropout=0.0, return_sequences=False,
                 return_attention=False, attention="stick_breaking", dynamic_threshold=None,
                 scorer="tanh", **kwargs):
        super().__init__(**kwargs)
        self.units, self.num_slots = hparams.check_positive(units=units, num_slots=num_slots)
        (self.input_dropout, self.hidden_dropout, self.attention_dropout,
         self.output_dropout) = hparams.check_rates(
            input_dropout=input_dropout, hidden_dropout=hidden_dropout,
            attention_dropout=attention_dropout, output_dropout=output_dropout)
        hparams.check_choice("attention", attention, tuple(ATTENTIONS))
        hparams.check_choice("scorer", scorer, SCORERS)
        if dynamic_threshold is not None and not 0.0 < float(dynamic_threshold) < 1.0:
            raise ValueError("dynamic_threshold must be None or in (0, 1) (the paper uses 1e-5), "
                             f"got {dynamic_threshold}.")
        self.return_sequences = bool(return_sequences)
        self.return_attention = bool(return_attention)
        self.attention = attention
        self.scorer = scorer
        self.dynamic_threshold = None if dynamic_threshold is None else float(dynamic_threshold)
        self.supports_masking = True
        self.seed_generator = keras.random.SeedGenerator(seed=None)

    def build(self, inputs_shape):
        d_in, D = int(inputs_shape[-1]), self.units
        policy = self.dtype_policy

        def dense(name, width, input_width, use_bias=True, activation=None):
            layer = keras.layers.Dense(width, use_bias=use_bias, activation=activation,
                                       dtype=policy, name=name)
            layer.build((None, input_width))
            return layer

        self.input_projection = dense("input_projection", D, d_in)  # W, b of Eq. 4.1
        # LN of Eq. 4.1, shared with Eq. 4.13.
        self.layer_norm = keras.layers.LayerNormalization(epsilon=1e-5, dtype=policy,
                                                          name="layer_norm")
        self.layer_norm.build((None, D))
        # Eq. 4.8: W1 = [W1_memory, W1_query], b1 with the memory half. The released code's
        # scorer: W_k, b_k (memory) and W_q, b_q (query), each with a layer norm.
        released = self.scorer == "layer_norm"
        self.attention_memory = dense("attention_memory", D, D)
        self.attention_query = dense("attention_query", D, D, use_bias=released)
        if released:
            self.attention_memory_norm, self.attention_query_norm = (
                keras.layers.LayerNormalization(epsilon=1e-5, dtype=policy, name=name)
                for name in ("attention_memory_norm", "attention_query_norm"))
            self.attention_memory_norm.build((None, D))
            self.attention_query_norm.build((None, D))
        # w2 (Eq. 4.9 subtracts the maximum, which cancels b2: no bias).
        self.attention_score = dense("attention_score", 1, D, use_bias=False)
        # Eq. 4.12: W1 = [W1_candidate, W1_memory] (b1 with the candidate half), W2, b2.
        self.cell_candidate = dense("cell_candidate", 4 * D, D)
        self.cell_memory = dense("cell_memory", 4 * D, D, use_bias=False)
        self.cell_output = dense("cell_output", 4 * D, 4 * D)
        self.built = True

    _w = compute_cast

    # ------------------------------------------------------------------ pieces
    def _dropout_mask(self, shape, rate, training):
        """A 0/(1/keep) mask of ``shape`` (None when dropout is off)."""
        if not training or rate == 0.0:
            return None
        keep = keras.random.uniform(shape, seed=self.seed_generator) >= rate
        return tf.cast(keep, self.compute_dtype) / (1.0 - rate)

    def cell(self, candidate, memory_part, memory, masks):
        """Eqs. 4.12-4.13 for one slot: ``candidate`` is ``M^_t^{i-1}`` ``[B, D]``, ``memory``
        is ``M_t^i`` and ``memory_part`` its (batched) ``W1_memory`` product ``[B, 4D]``."""
        candidate_in = candidate if masks[0] is None else candidate * masks[0]
        hidden = tf.nn.relu(self.cell_candidate(candidate_in) + memory_part)
        if masks[1] is not None:
            hidden = hidden * masks[1]
        gates, update = tf.split(self.cell_output(hidden), [3 * self.units, self.units], -1)
        vertical, horizontal, cell_gate = tf.split(tf.sigmoid(gates), 3, axis=-1)
        return self.layer_norm(vertical * candidate + horizontal * memory
                               + cell_gate * update)  # Eq. 4.13

    def step(self, x_t, query_t, state, num_slots, masks, dynamic):
        """One time step of Algorithm 1: ``(M, M^, pi)`` -> new state, output and ``p_t``."""
        memory, candidates, cum_prob = state  # [B, N, D], [B, N, D], [B, N] (float32)
        attention_mask, hidden_masks = masks
        # Eq. 4.8 (or the released code's scores) over every slot at once.
        keys = self.attention_memory(candidates)
        if self.scorer == "tanh":
            hidden = tf.tanh(keys + query_t[:, None, :])
        else:
            hidden = tf.nn.relu(self.attention_memory_norm(keys) + query_t[:, None, :])
        if attention_mask is not None:
            hidden = hidden * attention_mask
        scores = tf.cast(self.attention_score(hidden)[..., 0], tf.float32)
        if self.scorer == "layer_norm":
            scores = scores / float(self.units) ** 0.5
        admissible = tf.concat([cum_prob[:, 1:], tf.ones_like(cum_prob[:, :1])], axis=1)
        if self.attention == "softmax":
            admissible = released_admissible(admissible)
        p = ATTENTIONS[self.attention](scores, admissible)  # Eqs. 4.9-4.11
        cum = tf.math.cumsum(p, axis=1)  # Eq. 4.3
        rev_cum = tf.math.cumsum(p, axis=1, reverse=True)  # Eq. 4.4
        rev = tf.cast(rev_cum, self.compute_dtype)[..., None]
        memory = memory * (1.0 - rev) + candidates * rev  # Eq. 4.5
        # The memory half of Eq. 4.12's first layer, for every slot in one product.
        memory_in = memory if hidden_masks[2] is None else memory * hidden_masks[2]
        memory_parts = self.cell_memory(memory_in)
        cum_c = tf.cast(cum, self.compute_dtype)
        candidate = x_t
        new_candidates = []
        for i in range(num_slots):  # Eqs. 4.6-4.7
            slot_masks = (None if hidden_masks[0] is None else hidden_masks[0][:, i],
                          None if hidden_masks[1] is None else hidden_masks[1][:, i])
            kept = x_t * (1.0 - cum_c[:, i:i + 1])

            def composed(candidate=candidate, i=i, kept=kept, slot_masks=slot_masks):
                o = self.cell(candidate, memory_parts[:, i], memory[:, i], slot_masks)
                return kept + o * cum_c[:, i:i + 1]

            if dynamic is None:
                candidate = composed()
            else:  # Appendix A.3: skip the cell where no sequence of the batch reaches the slot
                candidate = tf.cond(tf.reduce_max(cum[:, i]) < dynamic, lambda kept=kept: kept,
                                    composed)
            new_candidates.append(candidate)
        candidates = tf.stack(new_candidates, axis=1)
        return (memory, candidates, cum), candidate, p

    # ------------------------------------------------------------------ call
    def call(self, inputs, mask=None, training=False, num_slots=None):
        inputs, mask = sequence_inputs(self, inputs, mask)
        N = self.num_slots if num_slots is None else int(num_slots)
        if N < 1:
            raise ValueError(f"num_slots must be a positive integer, got {num_slots}.")
        D = self.units
        batch, steps = tf.shape(inputs)[0], tf.shape(inputs)[1]
        projected, queries = self._read_inputs(inputs, training)
        real = tf.ones((batch, steps), tf.bool) if mask is None else tf.cast(mask, tf.bool)

        attention_mask = self._dropout_mask((batch, N, D), self.attention_dropout, training)
        hidden_masks = (self._dropout_mask((batch, N, D), self.hidden_dropout, training),
                        self._dropout_mask((batch, N, 4 * D), self.hidden_dropout, training),
                        self._dropout_mask((batch, N, D), self.hidden_dropout, training))
        masks = (attention_mask, hidden_masks)
        dynamic = None if training else self.dynamic_threshold

        dtype = self.compute_dtype
        zeros = tf.zeros((batch, N, D), dtype)
        state = (zeros, zeros, tf.zeros((batch, N), tf.float32))
        x_seq = tf.transpose(projected, [1, 0, 2])
        q_seq = tf.transpose(queries, [1, 0, 2])
        real_seq = tf.transpose(real)
        outputs_ta = tf.TensorArray(dtype, size=steps, element_shape=(None, D))
        probs_ta = tf.TensorArray(tf.float32, size=steps, element_shape=(None, N))

        def body(t, memory, candidates, cum_prob, outputs_ta, probs_ta):
            new_state, output, p = self.step(x_seq[t], q_seq[t], (memory, candidates, cum_prob),
                                              N, masks, dynamic)
            keep = real_seq[t]
            memory, candidates, cum_prob = (
                tf.where(keep[:, None, None], new_state[0], memory),
                tf.where(keep[:, None, None], new_state[1], candidates),
                tf.where(keep[:, None], new_state[2], cum_prob))
            outputs_ta = outputs_ta.write(t, tf.where(keep[:, None], output, tf.zeros_like(output)))
            probs_ta = probs_ta.write(t, tf.where(keep[:, None], p, tf.zeros_like(p)))
            return t + 1, memory, candidates, cum_prob, outputs_ta, probs_ta

        _, _, candidates, _, outputs_ta, probs_ta = tf.while_loop(
            lambda t, *_: t < steps, body, (tf.constant(0), *state, outputs_ta, probs_ta),
            maximum_iterations=steps)  # XLA needs it to differentiate the loop
        if self.return_sequences:
            outputs = tf.transpose(outputs_ta.stack(), [1, 0, 2])
            outputs = tf.reshape(outputs, (batch, steps, D))
        else:
            outputs = candidates[:, -1]  # M^_T^N (padded steps left the state unchanged)
        outputs = self._drop(outputs, self.output_dropout, training)
        if self.return_attention:
            probs = tf.reshape(tf.transpose(probs_ta.stack(), [1, 0, 2]), (batch, steps, N))
            return outputs, probs
        return outputs

    def _read_inputs(self, inputs, training):
        """Eq. 4.1's projected inputs (after the input dropout) and the attention's queries,
        the x~ half of Eq. 4.8: ``[B, T, D]`` each."""
        projected = self.layer_norm(self.input_projection(
            self._drop(inputs, self.input_dropout, training)))
        queries = self.attention_query(projected)
        if self.scorer == "layer_norm":
            queries = self.attention_query_norm(queries)
        return projected, queries

    def _drop(self, x, rate, training):
        """Inverted dropout of ``x`` at ``rate`` in training (from the layer's seed generator)."""
        if not (rate and training):
            return x
        keep = keras.random.uniform(tf.shape(x), seed=self.seed_generator)
        return x * tf.cast(keep >= rate, x.dtype) / (1.0 - rate)

    def compute_mask(self, inputs, mask=None):
        out = mask if self.return_sequences else None
        return [out, None] if self.return_attention else out

    def compute_output_shape(self, inputs_shape):
        batch, steps = inputs_shape[0], inputs_shape[1]
        outputs = (batch, steps, self.units) if self.return_sequences else (batch, self.units)
        if self.return_attention:
            return outputs, (batch, steps, self.num_slots)
        return outputs

    def compute_output_spec(self, inputs, mask=None, training=False, num_slots=None):
        shape = tuple(inputs.shape)
        batch, steps = shape[0], shape[1]
        outputs = keras.KerasTensor(
            (batch, steps, self.units) if self.return_sequences else (batch, self.units),
            dtype=self.compute_dtype)
        if self.return_attention:
            N = self.num_slots if num_slots is None else int(num_slots)
            return outputs, keras.KerasTensor((batch, steps, N), dtype="float32")
        return outputs

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units, "num_slots": self.num_slots,
                       "input_dropout": self.input_dropout,
                       "hidden_dropout": self.hidden_dropout,
                       "attention_dropout": self.attention_dropout,
                       "output_dropout": self.output_dropout,
                       "return_sequences": self.return_sequences,
                       "return_attention": self.return_attention,
                       "attention": self.attention,
                       "scorer": self.scorer,
                       "dynamic_threshold": self.dynamic_threshold})
        return config
