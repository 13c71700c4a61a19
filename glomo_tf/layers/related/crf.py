"""A linear-chain conditional random field: the node-level output layer of CN3 (its Eq. 7)."""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="glomo_tf")
class LinearChainCRF(keras.layers.Layer):
    """Linear-chain CRF over per-position tag scores, with log-likelihood and Viterbi decoding.

    The score of a tag sequence ``y_1..y_n`` (``n`` real positions of a sequence) is::

        score(y) = start[y_1] + sum_t emissions[t, y_t] + sum_{t>1} transitions[y_{t-1}, y_t]
                   + end[y_n]

    and ``p(y | x) = exp(score(y)) / Z`` where ``log Z`` is computed by the forward algorithm in
    log space. Positions where ``mask`` is ``False`` are ignored: padding must come after the real
    positions, and every sequence needs at least one real position. Both recursions run as
    ``tf.scan`` over time, so the number of steps may be dynamic.

    ``transitions[i, j]`` is the score of moving from tag ``i`` (at ``t - 1``) to tag ``j``
    (at ``t``).

    Args:
        num_tags: int, number of tags ``N``.
        **kwargs: standard layer arguments (``name``, ``dtype``, ...).

    Call arguments:
        emissions: float ``[batch, T, N]``, unnormalised per-position tag scores.
        mask: optional bool ``[batch, T]``, ``True`` at real positions (Keras masking passes it).

    Returns:
        int32 ``[batch, T]``: the Viterbi (most probable) tags; padded positions get tag 0.
        :meth:`decode` also returns the best scores, :meth:`log_likelihood` gives the training
        objective (``-log_likelihood`` is the loss).

    Example:

    >>> import numpy as np
    >>> crf = LinearChainCRF(3)
    >>> emissions = np.random.rand(2, 4, 3).astype("float32")
    >>> mask = np.array([[True] * 4, [True, True, False, False]])
    >>> tags = crf(emissions, mask=mask)
    >>> tuple(tags.shape), int(tags[1, 3])
    ((2, 4), 0)
    >>> tuple(crf.log_likelihood(emissions, tags, mask).shape)
    (2,)

    References:
        Lafferty, McCallum and Pereira, ICML 2001 (conditional random fields);
        Huang, Xu and Yu, 2015 (BiLSTM-CRF); Liu et al., AAAI 2019 (CN3), Eq. 7.
    """

    def __init__(self, num_tags, **kwargs):
        super().__init__(**kwargs)
        if int(num_tags) < 1:
            raise ValueError(f"num_tags must be a positive integer, got {num_tags}.")
        self.num_tags = int(num_tags)
        self.supports_masking = True

    def build(self, emissions_shape=None):
        n = self.num_tags
        init = keras.initializers.RandomUniform(-0.1, 0.1)
        self.transitions = self.add_weight(name="transitions", shape=(n, n), initializer=init)
        self.start_transitions = self.add_weight(name="start_transitions", shape=(n,),
                                                 initializer=init)
        self.end_transitions = self.add_weight(name="end_transitions", shape=(n,),
                                               initializer=init)
        self.built = True

    # ------------------------------------------------------------------ helpers
    def _prepare(self, emissions, mask):
        """Float32 emissions and a bool mask ``[B, T]`` (all ``True`` when ``mask`` is None)."""
        emissions = tf.cast(emissions, "float32")
        if emissions.shape.rank != 3:
            raise ValueError(
                f"LinearChainCRF expects emissions [batch, T, num_tags]; got rank "
                f"{emissions.shape.rank}.")
        if mask is None:
            mask = tf.ones(tf.shape(emissions)[:2], dtype=tf.bool)
        else:
            mask = tf.cast(mask, tf.bool)
        return emissions, mask

    def _weights(self):
        return (tf.cast(self.transitions, "float32"), tf.cast(self.start_transitions, "float32"),
                tf.cast(self.end_transitions, "float32"))

    # ------------------------------------------------------------------ objective
    def log_likelihood(self, emissions, tags, mask=None):
        """``log p(tags | emissions)`` per sequence, ``[batch]`` (float32).

        Args:
            emissions: float ``[batch, T, N]``.
            tags: int ``[batch, T]`` gold tags; values at padded positions are ignored.
            mask: optional bool ``[batch, T]``.
        """
        emissions, mask = self._prepare(emissions, mask)
        tags = tf.cast(tags, tf.int32)
        return self._sequence_score(emissions, tags, mask) - self._log_partition(emissions, mask)

    def _sequence_score(self, emissions, tags, mask):
        """Unnormalised score of the given tag paths, ``[B]``."""
        transitions, start, end = self._weights()
        maskf = tf.cast(mask, emissions.dtype)
        # Padded tags are replaced by 0 so the gathers stay in range; their terms are masked out.
        tags = tf.where(mask, tags, tf.zeros_like(tags))
        emitted = tf.gather(emissions, tags, axis=2, batch_dims=2)  # [B, T]
        score = tf.gather(start, tags[:, 0]) + tf.reduce_sum(emitted * maskf, axis=1)
        pair_index = tf.stack([tags[:, :-1], tags[:, 1:]], axis=-1)  # [B, T-1, 2]
        moved = tf.gather_nd(transitions, pair_index)  # [B, T-1]
        score += tf.reduce_sum(moved * maskf[:, 1:], axis=1)
        lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)
        last_tags = tf.gather(tags, lengths - 1, axis=1, batch_dims=1)
        return score + tf.gather(end, last_tags)

    def _log_partition(self, emissions, mask):
        """Forward algorithm in log space: ``log Z``, ``[B]``."""
        transitions, start, end = self._weights()
        alpha0 = start[None, :] + emissions[:, 0]  # [B, N]
        steps = (tf.transpose(emissions[:, 1:], [1, 0, 2]), tf.transpose(mask[:, 1:]))

        def forward(alpha, step):
            emission, real = step  # [B, N], [B]
            # alpha'[j] = logsumexp_i(alpha[i] + transitions[i, j]) + emission[j]
            candidate = tf.reduce_logsumexp(alpha[:, :, None] + transitions[None], axis=1)
            candidate += emission
            return tf.where(real[:, None], candidate, alpha)  # padded steps keep alpha

        alphas = tf.scan(forward, steps, initializer=alpha0)
        alpha = tf.concat([alpha0[None], alphas], axis=0)[-1]
        return tf.reduce_logsumexp(alpha + end[None], axis=1)

    # ------------------------------------------------------------------ decoding
    def decode(self, emissions, mask=None):
        """Viterbi decoding.

        Returns:
            ``(tags, scores)``: int32 ``[batch, T]`` best tag paths (0 at padded positions) and
            float32 ``[batch]`` their unnormalised scores.
        """
        emissions, mask = self._prepare(emissions, mask)
        transitions, start, end = self._weights()
        batch = tf.shape(emissions)[0]
        score0 = start[None, :] + emissions[:, 0]
        steps = (tf.transpose(emissions[:, 1:], [1, 0, 2]), tf.transpose(mask[:, 1:]))
        identity = tf.range(self.num_tags, dtype=tf.int32)

        def forward(carry, step):
            score, _ = carry
            emission, real = step
            candidate = score[:, :, None] + transitions[None]  # [B, from, to]
            best_previous = tf.argmax(candidate, axis=1, output_type=tf.int32)  # [B, N]
            new_score = tf.reduce_max(candidate, axis=1) + emission
            # Padded steps keep the score and point every tag at itself.
            new_score = tf.where(real[:, None], new_score, score)
            pointer = tf.where(real[:, None], best_previous,
                               tf.broadcast_to(identity[None], tf.shape(best_previous)))
            return new_score, pointer

        init = (score0, tf.zeros([batch, self.num_tags], tf.int32))
        scores, pointers = tf.scan(forward, steps, initializer=init)  # [T-1, B, N] each
        final = tf.concat([score0[None], scores], axis=0)[-1] + end[None]
        best_last = tf.argmax(final, axis=1, output_type=tf.int32)  # [B]
        best_score = tf.reduce_max(final, axis=1)

        def backward(tag, pointer):
            return tf.gather(pointer, tag, axis=1, batch_dims=1)

        # Tags at t = T-2 .. 0, from the pointers of steps T-1 .. 1.
        previous = tf.scan(backward, pointers, initializer=best_last, reverse=True)  # [T-1, B]
        path = tf.concat([tf.transpose(previous), best_last[:, None]], axis=1)  # [B, T]
        path = tf.where(mask, path, tf.zeros_like(path))
        return path, best_score

    def call(self, emissions, mask=None):
        return self.decode(emissions, mask)[0]

    def compute_mask(self, emissions, mask=None):
        return mask

    def compute_output_shape(self, emissions_shape):
        return tuple(emissions_shape[:2])

    def compute_output_spec(self, emissions, mask=None):
        return keras.KerasTensor(tuple(emissions.shape[:2]), dtype="int32")

    def get_config(self):
        config = super().get_config()
        config.update({"num_tags": self.num_tags})
        return config
