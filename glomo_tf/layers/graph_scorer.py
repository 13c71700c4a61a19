"""Eq. 1 of GLoMo: query/key projections, a threshold and a normalisation into graphs."""

import keras
import tensorflow as tf

from glomo_tf import hparams, ops
from glomo_tf.hparams import NORMALIZATIONS, THRESHOLDS
from glomo_tf.layers._common import (compute_cast, direction_rows, fresh_initializer,
                                      loaded_by_parent, serialize_initializer, transpose_rows,
                                      with_bias_row, with_ones_column)


@keras.saving.register_keras_serializable(package="glomo_tf")
class LiveRowHinge(keras.regularizers.Regularizer):
    """Keeps squared-ReLU graph rows alive: ``weight * mean_rows relu(margin - x)``.

    ``x`` holds each graph row's best ``q_t . k_s - b_t`` over its admissible sources, ``+inf``
    for a row with none (left out of the mean). A squared-ReLU row whose scores all fall below
    its threshold is all zero and gets no gradient, so it never recovers (on WikiText-2, 15 of 16
    graphs died this way); the hinge is zero for a live row and pushes a dead row's best score up
    (and its threshold down). Eq. 1 itself is unchanged: only the best source has to clear the
    threshold, so graphs can stay as sparse as they like. :class:`GraphScorer` applies it in
    training, to squared-ReLU rows only (the other normalisations never leave a row empty).

    Args:
        weight: float, the loss weight.
        margin: float, how far above the threshold a row's best score must be.

    Example:

    >>> import numpy as np
    >>> hinge = LiveRowHinge(weight=1.0, margin=0.1)
    >>> round(float(hinge(np.array([0.5, -0.1, np.inf], "float32"))), 4)  # live, dead, no source
    0.1
    """

    def __init__(self, weight=1.0, margin=0.1):
        if weight < 0 or margin < 0:
            raise ValueError(f"the live-row weight and margin must be >= 0, got {weight} and "
                             f"{margin}.")
        self.weight = float(weight)
        self.margin = float(margin)

    def __call__(self, x):
        has_source = tf.cast(tf.math.is_finite(x), tf.float32)
        hinge = tf.nn.relu(self.margin - tf.where(has_source > 0, x, self.margin)) * has_source
        return self.weight * tf.reduce_sum(hinge) / tf.maximum(tf.reduce_sum(has_source), 1.0)

    def get_config(self):
        return {"weight": self.weight, "margin": self.margin}


class ScorerSettings:
    """Eq. 1's settings of a layer that scores its graphs with a :class:`GraphScorer`
    (``self.scorer``), read from it; :meth:`make_scorer` makes that scorer."""

    num_layers = property(lambda self: self.scorer.num_layers)
    num_heads = property(lambda self: self.scorer.num_heads)
    head_dim = property(lambda self: self.scorer.head_dim)
    threshold = property(lambda self: self.scorer.threshold)
    normalization = property(lambda self: self.scorer.normalization)
    entmax_alpha = property(lambda self: self.scorer.entmax_alpha)

    def make_scorer(self, hidden_dim, num_layers, num_heads, head_dim, threshold, normalization,
                    entmax_alpha, **weights_options):
        """The layer's ``scorer`` over features of ``hidden_dim`` (``head_dim`` defaults to half
        of it, the reference code's), in its dtype policy and trainability; ``weights_options``
        are the initializer and regularizer arguments."""
        return GraphScorer(num_layers, num_heads, int(head_dim or max(1, hidden_dim // 2)),
                           threshold, normalization, entmax_alpha, dtype=self.dtype_policy,
                           trainable=self.trainable, name="scorer", **weights_options)

    def scorer_config(self):
        """The scorer's settings as the layer's config holds them (``epsilon`` only where it
        differs from its default)."""
        config = self.scorer.get_config()
        keys = ("num_layers", "num_heads", "head_dim", "threshold", "normalization",
                "entmax_alpha", "kernel_initializer", "threshold_initializer",
                "kernel_regularizer", "live_row_regularizer")
        return {key: config[key] for key in keys + (("epsilon",) if self.scorer.epsilon != 1e-16
                                                     else ())}

    @staticmethod
    def deserialized(config):
        """``config`` with its initializers, regularizers and dtype policy as objects."""
        config = dict(config)
        for key, module in (("initializer", keras.initializers),
                            ("regularizer", keras.regularizers)):
            for name in [k for k in config if k.endswith("_" + key)]:
                if isinstance(config[name], dict):
                    config[name] = module.deserialize(config[name])
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return config


@keras.saving.register_keras_serializable(package="glomo_tf")
class GraphScorer(keras.layers.Layer):
    """Graphs from query and key features by Eq. 1, for both directions, every layer and head.

    For graph layer ``l`` and head ``h``,

        score[t, s] = (W_q^l q_t + c_q)_h . (W_k^l k_s + c_k)_h - b
        G[t, s]     = relu(score)^2 / sum_{s'} relu(score[t, s'])^2     over admissible s'

    with the threshold ``b = w^l . (W_q^l q_t + c_q)_h + c^l`` (``threshold="query"``, the
    reference code's best) or one learned ``b^l`` (``"scalar"``, the paper's Eq. 1). Admissible
    sources are given by the caller (``s < t`` forward, ``s > t`` backward, never padding; see
    :func:`glomo_tf.ops.admissible_sources`); rows without an admissible source or a positive
    score are all zero.

    Each direction's projections are one ``[B T, d] @ [d, L K h]`` product; the query threshold is
    folded into the keys, ``q_t . k_s - w . q_t - c = q_t . (k_s - w) - c``, and ``c`` into the
    masking of the normalisation. :meth:`layer_graphs` computes one layer with ``b`` subtracted
    from the scores instead (the coupled ablation's form, which rounds differently; the two agree,
    ``tests/layers/test_graph_predictor_forms.py``).

    Args:
        num_layers: int, graph layers ``L``.
        num_heads: int, heads ``K`` per layer.
        head_dim: int, query/key width ``h`` per head.
        threshold: ``"query"`` or ``"scalar"`` (see above).
        normalization: ``"squared_relu"`` (Eq. 1), ``"entmax15"`` (Eq. 1's normalised squared
            ReLU with the threshold *solved* per row, :func:`glomo_tf.ops.entmax15`: rows stay
            sparse but never die; the threshold weights are not created), ``"entmax"``
            (alpha-entmax with ``entmax_alpha``) or ``"softmax"`` (the ``-sparse`` ablation).
        entmax_alpha: float in (1, 2], the alpha of ``normalization="entmax"``.
        epsilon: float, added to graph row sums.
        kernel_initializer: initializer of the query, key and threshold kernels (default:
            uniform variance scaling over the fan-in, the reference code's). The query and key
            kernels start from one draw.
        threshold_initializer: float or initializer of the threshold bias ``c`` (``b`` for
            ``"scalar"``). The default ``-1.0`` shifts every score up by one at the start, so the
            first graphs are dense and every row gets gradients (with ``0.0`` the planted-corpus
            demo's graphs came out empty).
        kernel_regularizer: regularizer of the query, key and threshold kernels.
        live_row_regularizer: a :class:`LiveRowHinge` (or None): the training-only loss that
            keeps squared-ReLU rows alive.

    Call arguments:
        queries, keys: float ``[batch, 2, T, d]`` (direction 0 forward).
        admissible: float ``[batch, 2, 1, 1, T, T]``, 1 where source ``s`` may feed ``t``.
        training: bool; adds the live-row loss when True.
        top_rows: optional int ``[2, S]``: compute the last layer at these receiving rows only.
        fused: normalise in one XLA cluster (:func:`glomo_tf.ops.fused_normalize_scores`);
            default: in training.

    Returns:
        Graphs ``[batch, 2, L, K, T, T]``, row-stochastic; with ``top_rows``, the first ``L - 1``
        layers' graphs and the last layer's rows ``[batch, 2, K, S, T]``.

    Example:

    >>> import numpy as np
    >>> from glomo_tf import ops
    >>> scorer = GraphScorer(num_layers=2, num_heads=2, head_dim=4)
    >>> features = np.random.rand(1, 2, 5, 8).astype("float32")
    >>> admissible = ops.admissible_sources(np.ones((1, 5), bool))
    >>> tuple(scorer(features, features, admissible).shape)
    (1, 2, 2, 2, 5, 5)
    """

    def __init__(self, num_layers, num_heads, head_dim, threshold="query",
                 normalization="squared_relu", entmax_alpha=1.5, epsilon=1e-16,
                 kernel_initializer=None, threshold_initializer=-1.0, kernel_regularizer=None,
                 live_row_regularizer=None, **kwargs):
        super().__init__(**kwargs)
        hparams.check_choice("threshold", threshold, THRESHOLDS)
        hparams.check_choice("normalization", normalization, NORMALIZATIONS)
        self.num_layers = int(num_layers)
        self.num_heads = int(num_heads)
        self.head_dim = int(head_dim)
        self.threshold = threshold
        self.normalization = normalization
        self.entmax_alpha = hparams.check_entmax_alpha(entmax_alpha)
        self.epsilon = float(epsilon)
        self.kernel_initializer = (None if kernel_initializer is None
                                   else keras.initializers.get(kernel_initializer))
        if isinstance(threshold_initializer, (int, float)):
            threshold_initializer = keras.initializers.Constant(float(threshold_initializer))
        self.threshold_initializer = keras.initializers.get(threshold_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.live_row_regularizer = keras.regularizers.get(live_row_regularizer)
        # entmax solves each row's threshold: no threshold weights. Only squared-ReLU rows can
        # die, so only they get the live-row hinge.
        self.learned_threshold = normalization not in ("entmax15", "entmax")
        self._live_row_hinge = (self.live_row_regularizer is not None
                                and normalization == "squared_relu")

    def build(self, queries_shape, keys_shape=None, admissible_shape=None):
        d, L, K, h = queries_shape[-1], self.num_layers, self.num_heads, self.head_dim
        projection = fresh_initializer(self.kernel_initializer)
        self.query_kernel = self.add_weight(name="query_kernel", shape=(2, d, L, K, h),
                                            initializer=projection,
                                            regularizer=self.kernel_regularizer)
        self.query_bias = self.add_weight(name="query_bias", shape=(1, 2, L, K, 1, h),
                                          initializer="zeros")
        self.key_kernel = self.add_weight(name="key_kernel", shape=(2, d, L, K, h),
                                          initializer=projection,
                                          regularizer=self.kernel_regularizer)
        self.key_bias = self.add_weight(name="key_bias", shape=(1, 2, L, K, 1, h),
                                        initializer="zeros")
        if self.learned_threshold and self.threshold == "query":
            # One linear map per direction and layer from a head's query to a scalar, shared by heads.
            self.threshold_kernel = self.add_weight(
                name="threshold_kernel", shape=(2, L, h),
                initializer=fresh_initializer(self.kernel_initializer),
                regularizer=self.kernel_regularizer)
        if self.learned_threshold:
            self.threshold_bias = self.add_weight(name="threshold_bias", shape=(2, L),
                                                  initializer=self.threshold_initializer)
        self.built = True

    _w = compute_cast

    def call(self, queries, keys, admissible, training=False, top_rows=None, fused=None):
        L, K, h = self.num_layers, self.num_heads, self.head_dim
        queries = tf.cast(queries, self.compute_dtype)
        keys = tf.cast(keys, self.compute_dtype)
        batch, length = tf.shape(queries)[0], tf.shape(queries)[2]
        key_bias = self.key_bias  # [1, 2, L, K, 1, h]
        if self.learned_threshold and self.threshold == "query":
            key_bias = key_bias - self.threshold_kernel[None, :, :, None, None, :]
        query_kernel = self._w(self.query_kernel)  # [2, d, L, K, h]
        query_bias = self._w(tf.reshape(self.query_bias, [2, 1, L * K * h]))
        k = self._project(keys, self._w(self.key_kernel),
                          self._w(tf.reshape(key_bias, [2, 1, L * K * h])))
        if top_rows is None:
            q = self._project(queries, query_kernel, query_bias)
            scores = tf.reshape(tf.matmul(q, k, transpose_b=True),
                                [batch, 2, L, K, length, length])
            return self._normalize(scores, admissible, 0, training, fused)
        below = (L - 1) * K  # the heads of every layer but the last
        # Cut with tf.split, whose gradient is a concat: a strided slice's gradient with a dynamic
        # shape costs about ten times more on CPU outside XLA.
        k_below, k_top = tf.split(k, [below, K], axis=2)
        query_kernel_below, query_kernel_top = tf.split(query_kernel, [L - 1, 1], axis=2)
        query_bias_below, query_bias_top = tf.split(query_bias, [below * h, K * h], axis=2)
        if L > 1:
            q = self._project(queries, query_kernel_below, query_bias_below)
            scores = tf.reshape(tf.matmul(q, k_below, transpose_b=True),
                                [batch, 2, L - 1, K, length, length])
            graphs = self._normalize(scores, admissible, 0, training, fused)
        else:
            graphs = tf.zeros([batch, 2, 0, K, length, length], self.compute_dtype)
        q = self._project(direction_rows(queries, top_rows, axis=2),
                          query_kernel_top, query_bias_top)  # [B, 2, K, S, h]
        scores = tf.matmul(q, k_top, transpose_b=True)[:, :, None]  # [B, 2, 1, K, S, T]
        admissible = direction_rows(admissible[:, :, 0, 0], top_rows, axis=2)[:, :, None, None]
        return graphs, self._normalize(scores, admissible, L - 1, training, fused)[:, :, 0]

    def layer_graphs(self, features, layer, admissible, training=False):
        """Eq. 1 for one graph ``layer`` from ``features [B, 2, T, d]``: ``[B, 2, 1, K, T, T]``,
        ``call(features, features, ...)[:, :, layer:layer + 1]`` in the second form (see the
        class docstring)."""
        q = tf.einsum("bztd,zdkh->bzkth", features, self._w(self.query_kernel[:, :, layer]))
        q = (q + self._w(self.query_bias[:, :, layer]))[:, :, None]  # [B, 2, 1, K, T, h]
        k = tf.einsum("bzsd,zdkh->bzksh", features, self._w(self.key_kernel[:, :, layer]))
        k = (k + self._w(self.key_bias[:, :, layer]))[:, :, None]
        scores = tf.einsum("bzlkth,bzlksh->bzlkts", q, k) - self._thresholds(q, layer)
        if training and self._live_row_hinge:
            self._add_live_row_loss(scores, admissible)
        return ops.normalize_scores(scores, admissible, self.normalization, self.epsilon,
                                    entmax_alpha=self.entmax_alpha)

    def _normalize(self, scores, admissible, first_layer, training, fused=None):
        """Eq. 1's normalisation of ``scores [B, 2, L', K, R, T]``, graph layers ``first_layer``
        onwards, with their thresholds (and, in training, the live-row loss). ``fused`` (by
        default in training) normalises in one XLA cluster."""
        fused = training if fused is None else fused
        normalize = ops.fused_normalize_scores if fused else ops.normalize_scores
        if not self.learned_threshold:
            return normalize(scores, admissible, self.normalization, self.epsilon,
                             entmax_alpha=self.entmax_alpha)
        layers = scores.shape[2]
        threshold = self._w(self.threshold_bias)[None, :, first_layer:first_layer + layers,
                                                 None, None, None]
        if training and self._live_row_hinge:
            self._add_live_row_loss(scores, admissible, threshold)
        return normalize(scores, admissible, self.normalization, self.epsilon,
                         threshold=threshold)

    @staticmethod
    def _project(features, kernel, bias):
        """``features [B, 2, R, d]`` through the heads of ``kernel [2, d, L', K, h]`` plus ``bias
        [2, 1, L' K h]``: ``[B, 2, L' K, R, h]``, by one ``[B R, d] @ [d, L' K h]`` product per
        direction. The kernel's gradient is then one product over all ``B R`` rows; as ``[B, 2, 1,
        R, d] @ [1, 2, L' K, d, h]`` (no transpose of the output) XLA wrote every example's ``[d,
        L' K h]`` gradient and added them up, slower by more than the transposes cost (which move
        rows in 8-byte words, :func:`transpose_rows`). The bias rides in the product as one more
        input row (:func:`with_ones_column`)."""
        shape = tf.shape(features)
        d, layers, heads, h = kernel.shape[1:]
        flat = tf.reshape(transpose_rows(features, [1, 0, 2, 3]), [2, -1, d])  # [2, B R, d]
        out = tf.matmul(with_ones_column(flat),
                        with_bias_row(tf.reshape(kernel, [2, d, layers * heads * h]), bias))
        out = tf.reshape(out, [2, shape[0], shape[2], layers * heads, h])
        return transpose_rows(out, [1, 0, 3, 2, 4])

    def _thresholds(self, q, layer):
        """Eq. 1's ``b`` for one graph layer, broadcastable to its scores ``[B, 2, 1, K, T, T]``."""
        if not self.learned_threshold:
            return tf.zeros([], q.dtype)
        bias = self._w(self.threshold_bias)[:, layer:layer + 1]
        if self.threshold == "scalar":
            return bias[None, :, :, None, None, None]
        kernel = self._w(self.threshold_kernel)[:, layer:layer + 1]
        return (tf.einsum("bzlkth,zlh->bzlkt", q, kernel)
                + bias[None, :, :, None, None])[..., None]

    def _add_live_row_loss(self, scores, admissible, threshold=None):
        """The live-row loss on the rows' best ``q_t . k_s - b_t``. ``scores`` ``[..., T, T]``;
        ``threshold``, when given, is a per-row ``b`` of shape ``[..., 1, 1]`` subtracted after the
        row maximum (one small op instead of a full-size one)."""
        best = tf.reduce_max(tf.where(admissible > 0, tf.cast(scores, tf.float32), -1e9), axis=-1)
        if threshold is not None:
            best = best - tf.cast(threshold[..., 0], tf.float32)
        has_source = tf.broadcast_to(tf.reduce_any(admissible > 0, axis=-1), tf.shape(best))
        self.add_loss(self.live_row_regularizer(tf.where(has_source, best, float("inf"))))

    def load_own_variables(self, store):
        """Loads this layer's weights. Files of earlier versions stored them elsewhere: in the
        :class:`~glomo_tf.GraphPredictor` that owned every weight (it loads them), or, for a
        :class:`~glomo_tf.GraphPredictor2D`, in a scorer that also held an unused one-row
        embedding table first (skipped here)."""
        own = len(self._trainable_variables + self._non_trainable_variables)
        if loaded_by_parent(self, store):
            return
        if len(store.keys()) != own + 1:
            return super().load_own_variables(store)
        for i, variable in enumerate(self._trainable_variables):
            variable.assign(store[f"{i + 1}"])

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "head_dim": self.head_dim,
            "threshold": self.threshold,
            "normalization": self.normalization,
            "entmax_alpha": self.entmax_alpha,
            "epsilon": self.epsilon,
            "kernel_initializer": serialize_initializer(self.kernel_initializer),
            "threshold_initializer": keras.initializers.serialize(self.threshold_initializer),
            "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            "live_row_regularizer": keras.regularizers.serialize(self.live_row_regularizer),
        })
        return config
