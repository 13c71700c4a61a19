"""A GRU whose state is split into a shared and a private part, with local auxiliary losses."""

import keras
import numpy as np
import tensorflow as tf

from glomo_tf.layers._common import compute_cast, gru_update, sequence_inputs


def sample_anchors(lengths, num_anchors, seed=None):
    """One anchor per region: real positions ``[0, length)`` are cut into ``num_anchors`` equal
    regions ``[floor(i * length / n), floor((i + 1) * length / n))`` and one position is drawn
    uniformly inside each (Section 3.1 of the paper).

    Args:
        lengths: int ``[batch]``, number of real positions of each sequence (padding at the end).
        num_anchors: int, anchors (and regions) per sequence ``n``.
        seed: optional int or ``keras.random.SeedGenerator``.

    Returns:
        ``(anchors, valid)``: int32 ``[batch, n]`` positions and bool ``[batch, n]``, ``False``
        for the empty regions of sequences shorter than ``n`` (their anchor is then 0 and must be
        ignored).
    """
    lengths = tf.cast(lengths, tf.int32)
    region = tf.range(num_anchors, dtype=tf.int32)[None, :]
    starts = region * lengths[:, None] // num_anchors
    ends = (region + 1) * lengths[:, None] // num_anchors
    widths = ends - starts
    draws = keras.random.uniform(tf.shape(widths), seed=seed)
    offsets = tf.cast(tf.floor(draws * tf.cast(widths, draws.dtype)), tf.int32)
    offsets = tf.clip_by_value(offsets, 0, tf.maximum(widths - 1, 0))
    valid = widths > 0
    anchors = tf.where(valid, starts + offsets, tf.zeros_like(starts))
    return anchors, valid


@keras.saving.register_keras_serializable(package="glomo_tf")
class SharedPrivateRNN(keras.layers.Layer):
    """GRU with a shared and a private part of its state, trained with local auxiliary losses.

    The state ``h = [h^s ; h^p]`` of one GRU is split into a shared part (the first
    ``r = round(units * shared_fraction)`` units) and a private part (the rest). Both parts read
    the inputs; the private part reads the whole previous state, while the shared part reads only
    the previous shared state (the recurrent-kernel block from ``h^p`` to the gates of ``h^s`` is
    fixed at zero). This is what keeps the private part free of auxiliary gradients across time
    (the paper's Figure 1-c): otherwise the auxiliary loss at an anchor would reach ``h^p`` at
    earlier steps through ``h^s``.

    During training, when the token ids are passed as ``aux_targets``, one anchor is sampled
    uniformly inside each of ``num_anchors`` equal regions of every real sequence (see
    :func:`sample_anchors`). At an anchor ``a``, an auxiliary GRU of ``r`` units starts from
    ``h^s_a`` (``f`` = identity, as in Trinh et al.) and, with teacher forcing,

    * reconstructs the preceding ``reconstruct_length`` units backwards, ``x_{a-1}, x_{a-2}, ...``
      (inputs ``x_a, x_{a-1}, ...``), and/or
    * predicts the following ``predict_length`` units ``x_{a+1}, x_{a+2}, ...``
      (inputs ``x_a, x_{a+1}, ...``),

    each with its own GRU and output projection to ``vocabulary_size`` logits. Steps that fall
    outside the real sequence are ignored. ``aux_weight`` times the mean cross-entropy over all
    valid steps is added with ``add_loss``. The full state ``h`` is the output (for the supervised
    task). ``shared_fraction=1.0`` shares everything (the RNN-AE of Trinh et al.).

    Args:
        units: int, width of the state ``d``.
        shared_fraction: float in ``(0, 1]``, share of the state sent to the auxiliary tasks.
        num_anchors: int, anchors (and regions) per sequence.
        reconstruct_length: int, units reconstructed backwards from each anchor (0: none).
        predict_length: int, units predicted forwards from each anchor (0: none).
        aux_weight: float, coefficient of the auxiliary loss.
        vocabulary_size: int, size of the output projection of the auxiliary decoders; required
            when ``reconstruct_length`` or ``predict_length`` is positive.
        return_sequences: bool, return every state (``True``) or only the last real one.
        seed: optional int, seed of the anchor sampling.
        **kwargs: standard layer arguments.

    Call arguments:
        inputs: float ``[batch, T, d_in]`` (e.g. embeddings of the token ids).
        mask: optional bool ``[batch, T]`` (padding at the end); by default the Keras mask
            attached to ``inputs``, also when ``aux_targets`` are passed.
        aux_targets: optional int ``[batch, T]`` token ids the auxiliary decoders must produce;
            the auxiliary loss is added only when they are given and ``training`` is true.
        training: bool.

    Returns:
        ``[batch, T, units]`` states (zero at padded positions) with ``return_sequences=True``,
        else ``[batch, units]``, the state at the last real position.

    Example:

    >>> import numpy as np
    >>> layer = SharedPrivateRNN(8, shared_fraction=0.5, num_anchors=2, reconstruct_length=2,
    ...                          predict_length=2, vocabulary_size=20, seed=1)
    >>> ids = np.array([[3, 4, 5, 6, 7, 8], [9, 2, 3, 0, 0, 0]])
    >>> x = np.random.rand(2, 6, 4).astype("float32")
    >>> states = layer(x, mask=ids > 0, aux_targets=ids, training=True)
    >>> tuple(states.shape), len(layer.losses)
    ((2, 6, 8), 1)

    References:
        "RNNs with private and shared representations for semi-supervised sequence learning"
        (Sections 3.1-3.2, Figure 1-c); Trinh, Dai, Luong and Le, "Learning longer-term
        dependencies in RNNs with auxiliary losses", ICML 2018.
    """

    def __init__(self, units, shared_fraction=0.5, num_anchors=2, reconstruct_length=0,
                 predict_length=0, aux_weight=1.0, vocabulary_size=None, return_sequences=True,
                 seed=None, **kwargs):
        super().__init__(**kwargs)
        self.units = int(units)
        self.shared_fraction = float(shared_fraction)
        if not 0.0 < self.shared_fraction <= 1.0:
            raise ValueError(f"shared_fraction must be in (0, 1], got {shared_fraction}.")
        self.shared_units = int(round(self.units * self.shared_fraction))
        if self.shared_units < 1:
            raise ValueError(f"round(units * shared_fraction) = 0: no shared unit "
                             f"(units={units}, shared_fraction={shared_fraction}).")
        self.num_anchors = int(num_anchors)
        self.reconstruct_length = int(reconstruct_length)
        self.predict_length = int(predict_length)
        if self.num_anchors < 1 or self.reconstruct_length < 0 or self.predict_length < 0:
            raise ValueError("num_anchors must be positive and the lengths non-negative.")
        self.aux_weight = float(aux_weight)
        self.vocabulary_size = None if vocabulary_size is None else int(vocabulary_size)
        if self.has_auxiliary_tasks and self.vocabulary_size is None:
            raise ValueError("vocabulary_size is required when reconstruct_length or "
                             "predict_length is positive.")
        self.return_sequences = bool(return_sequences)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.supports_masking = True

    @property
    def has_auxiliary_tasks(self):
        return self.reconstruct_length > 0 or self.predict_length > 0

    def build(self, inputs_shape, aux_targets_shape=None):
        d_in, u, r = int(inputs_shape[-1]), self.units, self.shared_units
        self.kernel = self.add_weight(name="kernel", shape=(d_in, 3 * u),
                                      initializer="glorot_uniform")
        self.recurrent_kernel = self.add_weight(name="recurrent_kernel", shape=(u, 3 * u),
                                                initializer="orthogonal")
        self.input_bias = self.add_weight(name="input_bias", shape=(3 * u,), initializer="zeros")
        self.recurrent_bias = self.add_weight(name="recurrent_bias", shape=(3 * u,),
                                              initializer="zeros")
        # The shared gates (columns [g*u, g*u + r) of gate g) never read the private rows.
        structure = np.ones((u, 3 * u), "float32")
        for gate in range(3):
            structure[r:, gate * u:gate * u + r] = 0.0
        self.recurrent_structure = structure
        self.reconstructor = self.reconstruct_projection = None
        self.predictor = self.predict_projection = None
        # The auxiliary decoders share this layer's dtype policy (also one given to this layer
        # alone, not globally), as the main recurrence does.
        policy = self.dtype_policy
        if self.reconstruct_length:
            self.reconstructor = keras.layers.GRU(r, return_sequences=True, dtype=policy,
                                                  name="reconstructor")
            self.reconstructor.build((None, None, d_in))
            self.reconstruct_projection = keras.layers.Dense(
                self.vocabulary_size, dtype=policy, name="reconstruct_projection")
            self.reconstruct_projection.build((None, None, r))
        if self.predict_length:
            self.predictor = keras.layers.GRU(r, return_sequences=True, dtype=policy,
                                              name="predictor")
            self.predictor.build((None, None, d_in))
            self.predict_projection = keras.layers.Dense(self.vocabulary_size, dtype=policy,
                                                         name="predict_projection")
            self.predict_projection.build((None, None, r))
        self.built = True

    _w = compute_cast

    # ------------------------------------------------------------------ main recurrence
    def run(self, inputs, mask):
        """The GRU over ``inputs [B, T, d_in]``: every state ``[B, T, units]`` (padded steps carry
        the previous state)."""
        gates_x = tf.matmul(inputs, self._w(self.kernel)) + self._w(self.input_bias)
        recurrent_kernel = self._w(self.recurrent_kernel) * tf.constant(
            self.recurrent_structure, self.compute_dtype)
        recurrent_bias = self._w(self.recurrent_bias)

        def step(state, elems):
            gx, real = elems
            new_state = gru_update(gx, tf.matmul(state, recurrent_kernel) + recurrent_bias, state)
            return tf.where(real[:, None], new_state, state)

        initial = tf.zeros([tf.shape(inputs)[0], self.units], self.compute_dtype)
        states = tf.scan(step, (tf.transpose(gates_x, [1, 0, 2]), tf.transpose(mask)),
                         initializer=initial)
        return tf.transpose(states, [1, 0, 2])

    # ------------------------------------------------------------------ auxiliary tasks
    def auxiliary_loss(self, inputs, states, aux_targets, mask, anchors=None, valid=None):
        """``aux_weight`` times the mean cross-entropy of the local reconstruction/prediction.

        Args:
            inputs: ``[B, T, d_in]``, the teacher-forced decoder inputs.
            states: ``[B, T, units]`` main states; only ``states[..., :shared_units]`` is read.
            aux_targets: int ``[B, T]`` token ids.
            mask: bool ``[B, T]``.
            anchors: optional ``[B, num_anchors]`` from :func:`sample_anchors`; sampled
                with the layer's seed generator when not given.
            valid: optional bool ``[B, num_anchors]`` from :func:`sample_anchors`, given with
                ``anchors``.
        """
        lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)
        if anchors is None:
            anchors, valid = sample_anchors(lengths, self.num_anchors, seed=self.seed_generator)
        anchors = tf.cast(anchors, tf.int32)
        shared = tf.gather(states, anchors, axis=1, batch_dims=1)[..., :self.shared_units]
        targets = tf.cast(aux_targets, tf.int32)
        losses, weights = [], []
        for decoder, projection, direction, length in (
                (self.reconstructor, self.reconstruct_projection, -1, self.reconstruct_length),
                (self.predictor, self.predict_projection, 1, self.predict_length)):
            if length:
                ce, ok = self._decode(decoder, projection, direction, length, inputs, targets,
                                      lengths, anchors, valid, shared)
                losses.append(ce)
                weights.append(ok)
        ce = tf.concat(losses, axis=0)
        ok = tf.cast(tf.concat(weights, axis=0), ce.dtype)
        mean_ce = tf.reduce_sum(ce * ok) / tf.maximum(tf.reduce_sum(ok), 1.0)
        return self.aux_weight * mean_ce

    def _decode(self, decoder, projection, direction, length, inputs, targets, lengths, anchors,
                valid, shared):
        """Teacher-forced decoding of ``length`` units in ``direction`` from every anchor:
        per-step cross-entropy and validity, both flat."""
        batch, time = tf.shape(inputs)[0], tf.shape(inputs)[1]
        offsets = tf.range(1, length + 1, dtype=tf.int32)[None, None, :]
        target_positions = anchors[..., None] + direction * offsets  # [B, n, length]
        input_positions = target_positions - direction  # the first input is x_a itself
        ok = (valid[..., None] & (target_positions >= 0)
              & (target_positions < lengths[:, None, None]))
        flat = [batch, self.num_anchors * length]
        target_ids = tf.gather(targets, tf.reshape(tf.clip_by_value(target_positions, 0, time - 1),
                                                   flat), axis=1, batch_dims=1)
        decoder_inputs = tf.gather(
            inputs, tf.reshape(tf.clip_by_value(input_positions, 0, time - 1), flat), axis=1,
            batch_dims=1)
        decoder_inputs = tf.reshape(decoder_inputs, [-1, length, inputs.shape[-1]])
        initial = tf.reshape(shared, [-1, self.shared_units])
        logits = projection(decoder(decoder_inputs, initial_state=[initial]))
        ce = keras.losses.sparse_categorical_crossentropy(
            tf.reshape(target_ids, [-1, length]), tf.cast(logits, "float32"), from_logits=True)
        return tf.reshape(ce, [-1]), tf.reshape(ok, [-1])

    # ------------------------------------------------------------------ call
    def call(self, inputs, mask=None, aux_targets=None, training=False):
        inputs, mask = sequence_inputs(self, inputs, mask)
        if mask is None:
            mask = tf.ones(tf.shape(inputs)[:2], tf.bool)
        mask = tf.cast(mask, tf.bool)
        states = self.run(inputs, mask)
        if training and aux_targets is not None and self.has_auxiliary_tasks:
            self.add_loss(self.auxiliary_loss(inputs, states, aux_targets, mask))
        if self.return_sequences:
            return states * tf.cast(mask, states.dtype)[..., None]
        return states[:, -1]  # padded steps carry the last real state

    def compute_mask(self, inputs, mask=None):
        return mask if self.return_sequences else None

    def compute_output_shape(self, inputs_shape, aux_targets_shape=None):
        if self.return_sequences:
            return tuple(inputs_shape[:-1]) + (self.units,)
        return (inputs_shape[0], self.units)

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units, "shared_fraction": self.shared_fraction,
                       "num_anchors": self.num_anchors,
                       "reconstruct_length": self.reconstruct_length,
                       "predict_length": self.predict_length, "aux_weight": self.aux_weight,
                       "vocabulary_size": self.vocabulary_size,
                       "return_sequences": self.return_sequences, "seed": self.seed})
        return config
