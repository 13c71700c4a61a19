"""The GLoMo graph predictor ``g``: masked key/query CNNs and multi-head squared-ReLU graphs."""

import numbers

import keras
import tensorflow as tf

from glomo_tf import hparams, ops
from glomo_tf.hparams import COMPOSITIONS, NORMALIZATIONS, THRESHOLDS
from glomo_tf.layers._common import compute_cast, direction_rows, time_slice
from glomo_tf.layers.feature_predictor import FeaturePredictor

# Added to the variance in the CNNs' batch norm (the reference code's, PyTorch's default).
BATCH_NORM_EPSILON = 1e-5

# Stacks of the decoupled predictor's convolution networks, run as one batched computation.
_FW_KEY, _FW_QUERY, _BW_KEY, _BW_QUERY = range(4)


def batch_norm_affine(mean, variance, gamma, beta):
    """Batch normalisation as the affine map ``x * scale + shift``; returns ``(scale, shift)``.

    ``(x - mean) / sqrt(variance + BATCH_NORM_EPSILON) * gamma + beta`` is ``x * scale + shift``
    with ``scale = gamma / sqrt(variance + BATCH_NORM_EPSILON)`` and ``shift = beta - mean *
    scale``. The arguments broadcast together and ``scale`` and ``shift`` have their dtype. In
    training, :class:`GraphPredictor` applies the map to a convolution's output, with the batch's
    statistics; in inference it folds the map into the convolution's kernel and bias, with the
    moving statistics.
    """
    scale = gamma * tf.math.rsqrt(variance + BATCH_NORM_EPSILON)
    return scale, beta - mean * scale


def masked_moments(x, mask):
    """Mean and (biased) variance of ``x [S, B, T, d]`` per stack and channel over the positions
    ``mask [1 or S, B, T, 1]`` keeps: ``[S, 1, 1, d]`` each, float32 whatever ``x``'s dtype."""
    x32 = tf.cast(x, tf.float32)
    m = tf.cast(mask, tf.float32)
    count = tf.maximum(tf.reduce_sum(m), 1.0)
    mean = tf.reduce_sum(x32 * m, axis=[1, 2], keepdims=True) / count
    variance = tf.reduce_sum(tf.square((x32 - mean) * m), axis=[1, 2], keepdims=True) / count
    return mean, variance


def batch_norm_relu(x, mask, gamma, beta):
    """A training-mode CNN layer's batch norm (the batch's statistics over the kept positions)
    and ReLU: ``(relu(x * scale + shift), mean, variance)``, the statistics float32 and the map in
    ``x``'s dtype. (As one XLA cluster inside a ``tf.function`` step it ran slower than as separate
    ops on a CPU: 22.6 against 18.2 ms forward and backward at ``[4, 16, 128, 256]`` in bfloat16.)"""
    mean, variance = masked_moments(x, mask)
    scale, shift = batch_norm_affine(tf.cast(mean, x.dtype), tf.cast(variance, x.dtype), gamma,
                                     beta)
    return tf.nn.relu(x * scale + shift), mean, variance


@keras.saving.register_keras_serializable(package="glomo_tf")
class GraphPredictor(keras.layers.Layer):
    """Predicts latent graphs over a token sequence, in both directions (GLoMo's ``g``).

    Token ids are embedded with the predictor's own table (id 0 is padding). For each direction a
    *key* CNN and a *query* CNN (stacks of causal 1-D convolutions, batch norm and ReLU, with padded
    positions zeroed before every convolution) produce ``k_s`` and ``q_t``. For graph layer ``l`` and
    head ``h``, Eq. 1 of the paper gives

        score[t, s] = (W_q^l q_t)_h . (W_k^l k_s)_h - b
        G[t, s]     = relu(score)^2 / sum_{s'} relu(score[t, s'])^2     over admissible s'

    where admissible means ``s < t`` for the forward direction, ``s > t`` for the backward direction,
    and never a padded position. Rows with no admissible source (or no positive score) are all zero.
    The backward direction is a separate network that reads the sequence in reverse time; it is
    computed directly in the original time order (anti-causal convolutions), so its graphs need no
    flipping. Both directions' convolutions and projections run as single batched matrix products.

    Args:
        vocabulary_size: int, number of token ids (id 0 is padding).
        hidden_dim: int, width ``d`` of the embeddings and convolution features.
        num_layers: int, graph layers ``L`` (1 expresses the ``-hierarchical`` ablation).
        num_heads: int, heads ``K`` per graph layer.
        head_dim: int, query/key width per head; defaults to ``hidden_dim // 2`` (reference code).
        conv_layers: int, convolution layers in each key and query CNN.
        kernel_size: int, width of the causal convolutions.
        threshold: ``"query"`` (``b = w . q_t + c`` per layer, the reference code's best) or
            ``"scalar"`` (one learned ``b`` per layer, the paper's Eq. 1).
        normalization: ``"squared_relu"`` (Eq. 1), ``"entmax15"`` or ``"softmax"`` (the
            ``-sparse`` ablation). ``"entmax15"`` is Eq. 1's normalised squared ReLU with the
            threshold *solved* per row instead of learned (1.5-entmax, see
            :func:`glomo_tf.ops.entmax15`): rows stay sparse but never die, and every source in
            a row's support gets a gradient. Trained with the planted edges as targets, the
            demo-sized predictor recovers them in every head with it, and at most 0.78 (best
            head) with the learned threshold, whose rows stop learning once a source falls
            below it (``examples/planted_diagnostics.py capacity``). The threshold weights and
            ``live_row_weight`` have no effect then. ``"entmax"`` solves the threshold of
            alpha-entmax with ``entmax_alpha`` (:func:`glomo_tf.ops.entmax_bisect`): alpha
            between 1 and 1.5 gives rows between softmax's and entmax15's sparsity.
        entmax_alpha: float in (1, 2], the alpha of ``normalization="entmax"`` (1.5 by
            default, entmax15's; ignored by the other normalisations).
        coupled: bool. False (default) decouples graphs from features as in the paper. True
            expresses the ``-decouple`` ablation: one CNN per direction gives ``F^0``, the graphs of
            layer ``l`` are computed from the features ``F^{l-1}`` and the predictor composes the
            features itself (returned under ``"features"``).
        composition: ``"gru"``, ``"residual"`` or ``"projected"``; the feature composition of a
            coupled predictor (see :class:`FeaturePredictor`).
        dropout: float, variational dropout rate on the CNN inputs (one mask per sequence).
        momentum: float, moving-average momentum of the batch-norm statistics.
        epsilon: float, added to graph row sums.
        embeddings_initializer: initializer of the embedding table.
        initial_threshold: float, initial value of the threshold bias ``c`` (``b`` for
            ``threshold="scalar"``). The default ``-1.0`` shifts every score up by one at the
            start, so the first graphs are dense and every row gets gradients (with ``0.0`` the
            planted-corpus demo's graphs came out empty). A row whose scores all fall below the
            threshold gets no gradient and stays empty: watch the graphs during pretraining
            (``glomo pretrain --probe``, ``glomo extract``), or keep rows alive with
            ``live_row_weight``.
        live_row_weight: float, weight of a training-only hinge that keeps graph rows alive
            (default ``0.0``, off). A squared-ReLU row whose scores all fall below its threshold is
            all zero and gets no gradient, so it never recovers (on WikiText-2, 15 of 16 graphs
            died this way). With a positive weight, every call with ``training=True`` adds
            ``live_row_weight * mean_rows relu(live_row_margin - max_s (q_t . k_s - b_t))`` over
            the rows that have an admissible source (all directions, layers and heads) through
            ``add_loss``: zero for a live row, a push up of its best score (and down of its
            threshold) for a dead one. Eq. 1 itself is unchanged; only the best source has to
            clear the threshold, so graphs can stay as sparse as they like.
        live_row_margin: float, how far above the threshold the best score of a row must be.

    Call arguments:
        token_ids: int tensor ``[batch, T]``; 0 marks padding.
        training: bool, batch statistics and dropout when True.

    Returns:
        A dict with ``"graphs"``: ``[batch, 2, num_layers, num_heads, T, T]`` (direction 0 forward,
        1 backward), row-stochastic; ``"padding_mask"``: bool ``[batch, T]``; and, for a coupled
        predictor, ``"features"``: ``[batch, 2, num_layers, T, hidden_dim]``.

    Example:

    >>> import numpy as np
    >>> predictor = GraphPredictor(vocabulary_size=100, hidden_dim=16, num_layers=2, num_heads=4)
    >>> ids = np.array([[5, 9, 2, 7, 0, 0]], dtype="int32")
    >>> out = predictor(ids)
    >>> tuple(out["graphs"].shape)
    (1, 2, 2, 4, 6, 6)

    References:
        Yang et al., "GLoMo: Unsupervisedly Learned Relational Graphs as Transferable
        Representations", NeurIPS 2018, Section 2.1 and Eq. 1.
    """

    def __init__(
        self,
        vocabulary_size,
        hidden_dim,
        num_layers=3,
        num_heads=8,
        head_dim=None,
        conv_layers=4,
        kernel_size=3,
        threshold="query",
        normalization="squared_relu",
        entmax_alpha=1.5,
        coupled=False,
        composition="gru",
        dropout=0.0,
        momentum=0.9,
        epsilon=1e-16,
        embeddings_initializer=None,
        initial_threshold=-1.0,
        live_row_weight=0.0,
        live_row_margin=0.1,
        **kwargs,
    ):
        super().__init__(**kwargs)
        _check_positive(vocabulary_size=vocabulary_size, hidden_dim=hidden_dim,
                        num_layers=num_layers, num_heads=num_heads, kernel_size=kernel_size)
        if head_dim is not None:
            _check_positive(head_dim=head_dim)
        if composition not in COMPOSITIONS:
            raise ValueError(f"composition must be one of {COMPOSITIONS}, got {composition!r}.")
        if conv_layers < 0:
            raise ValueError(f"conv_layers must be >= 0, got {conv_layers}.")
        if threshold not in THRESHOLDS:
            raise ValueError(f"threshold must be one of {THRESHOLDS}, got {threshold!r}.")
        if normalization not in NORMALIZATIONS:
            raise ValueError(
                f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}.")
        entmax_alpha = hparams.check_entmax_alpha(entmax_alpha)
        if coupled:
            hparams.check_heads_divide(hidden_dim, num_heads,
                                       what="a coupled predictor's feature composition")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}.")
        if live_row_weight < 0 or live_row_margin < 0:
            raise ValueError(
                f"live_row_weight and live_row_margin must be >= 0, got {live_row_weight} and "
                f"{live_row_margin}.")
        self.vocabulary_size = int(vocabulary_size)
        self.hidden_dim = int(hidden_dim)
        self.num_layers = int(num_layers)
        self.num_heads = int(num_heads)
        self.head_dim = int(head_dim or max(1, hidden_dim // 2))
        self.conv_layers = int(conv_layers)
        self.kernel_size = int(kernel_size)
        self.threshold = threshold
        self.normalization = normalization
        self.entmax_alpha = entmax_alpha
        self.coupled = bool(coupled)
        self.composition = composition
        self.dropout = float(dropout)
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self.initial_threshold = float(initial_threshold)
        self.live_row_weight = float(live_row_weight)
        self.live_row_margin = float(live_row_margin)
        # entmax solves each row's threshold: no threshold weights. Only squared-ReLU rows can
        # die, so only they get the live-row hinge.
        self._learned_threshold = normalization not in ("entmax15", "entmax")
        self._live_row_hinge = self.live_row_weight > 0 and normalization == "squared_relu"
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer or keras.initializers.RandomUniform(-0.1, 0.1))
        # Decoupled: key and query CNN per direction; coupled: one CNN per direction.
        self._num_stacks = 2 if self.coupled else 4
        self.composer = (
            FeaturePredictor(hidden_dim, num_heads, composition=composition, dtype=self.dtype_policy,
                             name="composer")
            if self.coupled else None)

    # ------------------------------------------------------------------ build
    def build(self, input_shape=None):
        d, S, L, K, h = (self.hidden_dim, self._num_stacks, self.num_layers, self.num_heads,
                         self.head_dim)
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.vocabulary_size, d),
            initializer=self.embeddings_initializer)
        self.conv_kernels, self.bn_gamma, self.bn_beta, self.bn_mean, self.bn_var = [], [], [], [], []
        for i in range(self.conv_layers):
            # autocast=False: read in float32 (batch-norm folding, moving-average updates); every
            # other use casts explicitly with self._w, so mixed precision keeps them float32.
            self.conv_kernels.append(self.add_weight(
                name=f"conv{i}_kernel", shape=(S, self.kernel_size * d, d),
                initializer=keras.initializers.VarianceScaling(1.0, "fan_in", "uniform"),
                autocast=False))
            self.bn_gamma.append(self.add_weight(name=f"conv{i}_bn_gamma", shape=(S, 1, 1, d),
                                                 initializer="ones", autocast=False))
            self.bn_beta.append(self.add_weight(name=f"conv{i}_bn_beta", shape=(S, 1, 1, d),
                                                initializer="zeros", autocast=False))
            self.bn_mean.append(self.add_weight(name=f"conv{i}_bn_moving_mean", shape=(S, 1, 1, d),
                                                initializer="zeros", trainable=False,
                                                autocast=False))
            self.bn_var.append(self.add_weight(name=f"conv{i}_bn_moving_variance",
                                               shape=(S, 1, 1, d), initializer="ones",
                                               trainable=False, autocast=False))
        proj_init = keras.initializers.VarianceScaling(1.0, "fan_in", "uniform")
        self.query_kernel = self.add_weight(name="query_kernel", shape=(2, d, L, K, h),
                                            initializer=proj_init)
        self.query_bias = self.add_weight(name="query_bias", shape=(1, 2, L, K, 1, h),
                                          initializer="zeros")
        self.key_kernel = self.add_weight(name="key_kernel", shape=(2, d, L, K, h),
                                          initializer=proj_init)
        self.key_bias = self.add_weight(name="key_bias", shape=(1, 2, L, K, 1, h),
                                        initializer="zeros")
        if self._learned_threshold and self.threshold == "query":
            # One linear map per direction and layer from a head's query to a scalar, shared by heads.
            self.threshold_kernel = self.add_weight(
                name="threshold_kernel", shape=(2, L, h),
                initializer=keras.initializers.VarianceScaling(1.0, "fan_in", "uniform"))
        if self._learned_threshold:
            self.threshold_bias = self.add_weight(
                name="threshold_bias", shape=(2, L),
                initializer=keras.initializers.Constant(self.initial_threshold))
        if self.composer is not None:
            self.composer.build((None, 2, None, d))
        self.built = True

    # ------------------------------------------------------------------ call
    def call(self, token_ids, training=False, fused_normalization=None):
        """``{"graphs": [B, 2, L, K, T, T], "padding_mask": [B, T]}`` (and ``"features"`` for a
        coupled predictor). ``fused_normalization``: normalise Eq. 1's scores in one XLA cluster
        (:func:`~glomo_tf.ops.fused_normalize_scores`: the same graphs up to float round-off, a
        few fused passes instead of one per op, compiled once per batch shape); default: in
        training only (``GlomoTransfer(fused_normalization=True)`` asks for it in inference)."""
        fused = bool(training) if fused_normalization is None else bool(fused_normalization)
        padding_mask, stacks = self._conv_stacks(token_ids, training)
        admissible = ops.admissible_sources(padding_mask)  # [B, 2, 1, 1, T, T]
        outputs = {"padding_mask": padding_mask}
        if self.coupled:
            features = tf.stack(stacks, axis=1)  # F^0: [B, 2, T, d]
            outputs["graphs"], outputs["features"] = self._coupled_graphs(features, admissible,
                                                                          training)
        else:
            queries, keys = self._queries_keys(stacks)
            outputs["graphs"] = self._graphs(queries, keys, admissible, training, fused=fused)
        return outputs

    @classmethod
    def from_preset(cls, preset, trainable=False, dtype=None):
        """The predictor of ``preset``: a built-in name (:func:`glomo_tf.list_presets`) or a
        directory written by :func:`glomo_tf.save_preset`; frozen unless ``trainable``, run in
        the dtype policy ``dtype`` (default float32). Its tokenizer:
        :meth:`glomo_tf.data.Tokenizer.from_preset`."""
        from glomo_tf.presets import load_preset_predictor
        return load_preset_predictor(preset, trainable=trainable, dtype=dtype)

    def save_to_preset(self, preset_dir, tokenizer=None, **kwargs):
        """Writes this predictor (and the ``tokenizer`` whose ids it reads) as a preset
        directory: :func:`glomo_tf.save_preset`, whose other arguments ``kwargs`` are."""
        from glomo_tf.presets import save_preset
        return save_preset(self, tokenizer, preset_dir, **kwargs)

    def graphs_with_top_rows(self, token_ids, rows, training=False):
        """Every layer's graphs but the last, and the last layer's rows at ``rows`` only.

        ``rows``: int ``[2, S]``, the receiving positions wanted in each direction. Returns a dict
        with ``graphs`` ``[B, 2, L - 1, K, T, T]`` (``call()``'s first ``L - 1`` layers),
        ``top_rows`` ``[B, 2, K, S, T]`` (``call()``'s last layer, direction ``z`` cut to the rows
        ``rows[z]``) and ``padding_mask``. Pretraining decodes from a few sampled positions
        (:meth:`FeaturePredictor.top_features`), so the last layer's other rows (their queries,
        scores and normalisation) would be computed for nothing. A decoupled predictor only; in
        training with the live-row hinge, which needs every row, the full graphs are computed
        and cut.
        """
        self._ready_decoupled("graphs_with_top_rows")
        rows = tf.cast(rows, tf.int32)
        if training and self._live_row_hinge:
            out = self(token_ids, training=training)
            graphs = out["graphs"]
            return {"graphs": graphs[:, :, :-1], "padding_mask": out["padding_mask"],
                    "top_rows": direction_rows(graphs[:, :, -1], rows, axis=3)}
        padding_mask, stacks = self._conv_stacks(token_ids, training)
        queries, keys = self._queries_keys(stacks)
        admissible = ops.admissible_sources(padding_mask)
        graphs, top_rows = self._graphs(queries, keys, admissible, training, top_rows=rows)
        return {"graphs": graphs, "top_rows": top_rows, "padding_mask": padding_mask}

    def _ready_decoupled(self, method):
        """Refuses a coupled predictor in ``method`` (one-line error); builds an unbuilt one."""
        if self.coupled:
            raise ValueError("A coupled GraphPredictor computes its graphs layer by layer from "
                             f"its own features; {method} needs coupled=False.")
        if not self.built:
            self.build((None, None))

    def _conv_stacks(self, token_ids, training):
        """The padding mask ``[B, T]`` and the CNNs' outputs, a list of ``[B, T, d]``."""
        token_ids = tf.convert_to_tensor(token_ids)
        if not token_ids.dtype.is_integer:
            raise TypeError(
                f"GraphPredictor expects integer token ids [batch, T], got dtype {token_ids.dtype}. "
                "Tokenize the text first (see glomo_tf.data) and pass the ids.")
        padding_mask = ops.padding_mask_from_ids(token_ids)
        embedded = tf.gather(self._w(self.embeddings), token_ids)  # [B, T, d]
        conv_mask = tf.cast(padding_mask, self.compute_dtype)[:, :, None]  # [B, T, 1]
        # The CNNs have two forms, one per mode: see _training_conv_stacks.
        if training:
            stacks = tf.tile(embedded[None], [self._num_stacks, 1, 1, 1])  # [S, B, T, d]
            if self.dropout > 0:
                stacks = self._locked_dropout(stacks)
            stacks = tf.unstack(self._training_conv_stacks(stacks, conv_mask[None]))
        else:
            stacks = self._inference_conv_stacks(embedded, conv_mask)
        return padding_mask, stacks

    @staticmethod
    def _queries_keys(stacks):
        """A decoupled predictor's queries and keys, each ``[B, 2, T, d]``."""
        keys = tf.stack([stacks[_FW_KEY], stacks[_BW_KEY]], axis=1)
        queries = tf.stack([stacks[_FW_QUERY], stacks[_BW_QUERY]], axis=1)
        return queries, keys

    def embed(self, token_ids):
        """The predictor's embeddings of ``token_ids`` (``[batch, T, hidden_dim]``)."""
        return tf.gather(self._w(self.embeddings), token_ids)

    # ------------------------------------------------------------------ pieces
    _w = compute_cast

    def _locked_dropout(self, stacks):
        """One dropout mask per stack and sequence, shared along time (reference LockedDropout)."""
        shape = tf.concat([tf.shape(stacks)[:2], [1, self.hidden_dim]], axis=0)
        keep = tf.cast(tf.random.uniform(shape) >= self.dropout, stacks.dtype)
        return stacks * keep / (1.0 - self.dropout)

    def _shifted_windows(self, x):
        """``[S, B, T, d] -> [S, B, T, k*d]``: each position's convolution window.

        Stacks of the forward direction (first half) see ``x_{t-k+1..t}``; stacks of the backward
        direction see ``x_{t+k-1..t}``, i.e. the causal convolution of the time-reversed sequence.
        """
        k, T = self.kernel_size, tf.shape(x)[2]
        fw, bw = tf.split(x, 2, axis=0)
        fw = tf.pad(fw, [[0, 0], [0, 0], [k - 1, 0], [0, 0]])
        bw = tf.pad(bw, [[0, 0], [0, 0], [0, k - 1], [0, 0]])
        fw_cols = [time_slice(fw, j, T, axis=2) for j in range(k)]
        bw_cols = [time_slice(bw, k - 1 - j, T, axis=2) for j in range(k)]
        return tf.concat([tf.concat(fw_cols, -1), tf.concat(bw_cols, -1)], axis=0)

    def _training_conv_stacks(self, x, conv_mask):
        """Training-mode CNN stacks, ``[S, B, T, d] -> [S, B, T, d]``, all at once.

        [zero padding -> causal conv -> batch norm -> ReLU] x ``conv_layers``: each layer is one
        batched matrix product of every stack's windows, then the batch norm with the statistics
        of the batch (see :func:`batch_norm_relu`).

        The CNNs have a second form, :meth:`_inference_conv_stacks`, the same network with the
        moving statistics. Both are kept because they round differently and merging them would
        change the outputs of one mode (by up to 2e-6 in float32 on small predictors, by bfloat16
        rounding under a mixed policy); ``tests/test_graph_predictor_forms.py`` checks that the two
        forms agree.
        """
        S, d = self._num_stacks, self.hidden_dim
        batch, T = tf.shape(x)[1], tf.shape(x)[2]
        for i in range(self.conv_layers):
            x = x * conv_mask  # padded positions never feed a convolution
            windows = tf.reshape(self._shifted_windows(x), [S, -1, self.kernel_size * d])
            x = tf.reshape(tf.matmul(windows, self._w(self.conv_kernels[i])), [S, batch, T, d])
            x, mean, variance = batch_norm_relu(x, conv_mask, self._w(self.bn_gamma[i]),
                                                self._w(self.bn_beta[i]))
            self._update_moving_statistics(i, mean, variance)
        return x

    def _inference_conv_stacks(self, embedded, conv_mask):
        """Inference-mode CNN stacks, a list of ``S`` tensors ``[B, T, d]``.

        Computes what :meth:`_training_conv_stacks` computes, with the moving statistics, faster:
        the batch norm is folded into each convolution's kernel and bias, and each stack is one
        ``conv1d`` (fused with its bias by oneDNN) over its own padded input, so nothing is tiled
        or windowed. Backward stacks pad on the right and read the kernel's taps in reverse order.
        """
        S, k, d = self._num_stacks, self.kernel_size, self.hidden_dim
        half = S // 2
        stacks = [embedded] * S
        for i in range(self.conv_layers):
            # Fold in the variables' dtype (float32), then cast: no extra rounding under bf16.
            scale, shift = batch_norm_affine(self.bn_mean[i], self.bn_var[i], self.bn_gamma[i],
                                             self.bn_beta[i])  # [S, 1, 1, d]
            shift = self._w(tf.reshape(shift, [S, d]))
            kernels = self._w(tf.reshape(self.conv_kernels[i] * scale[:, 0], [S, k, d, d]))
            outputs = []
            for s in range(S):
                x = stacks[s] * conv_mask  # padded positions never feed a convolution
                if s < half:  # x_{t-k+1..t}
                    x, kernel = tf.pad(x, [[0, 0], [k - 1, 0], [0, 0]]), kernels[s]
                else:  # x_{t+k-1..t}: tap j reads x_{t+k-1-j}
                    x, kernel = tf.pad(x, [[0, 0], [0, k - 1], [0, 0]]), tf.reverse(kernels[s], [0])
                # As conv2d over [B, 1, T, d]: oneDNN fuses the bias and the ReLU into it (after
                # conv1d's own reshape it fused the bias only).
                y = tf.nn.conv2d(x[:, None], kernel[None], strides=1, padding="VALID")
                outputs.append(tf.nn.relu(tf.nn.bias_add(y, shift[s]))[:, 0])
            stacks = outputs
        return stacks

    def _update_moving_statistics(self, i, mean, variance):
        """Conv layer ``i``'s moving averages, moved towards a batch's float32 statistics."""
        self.bn_mean[i].assign(self.momentum * self.bn_mean[i] + (1 - self.momentum) * mean)
        self.bn_var[i].assign(self.momentum * self.bn_var[i] + (1 - self.momentum) * variance)

    def graphs_from_features(self, queries, keys, padding_mask, training=False):
        """Eq. 1 on given query and key features ``[B, 2, T, d]`` (direction 0 forward):
        ``[B, 2, L, K, T, T]`` through this predictor's projections, threshold and normalisation,
        over the sources ``padding_mask [B, T]`` admits. What :meth:`call` does after its CNNs;
        :class:`~glomo_tf.GraphPredictor2D` feeds it masked convolutions of pixels."""
        self._ready_decoupled("graphs_from_features")
        queries = tf.cast(queries, self.compute_dtype)
        keys = tf.cast(keys, self.compute_dtype)
        return self._graphs(queries, keys, ops.admissible_sources(padding_mask), training)

    def _graphs(self, queries, keys, admissible, training=False, top_rows=None, fused=None):
        """Eq. 1 for every direction, layer and head at once: ``[B, 2, L, K, T, T]``.

        ``queries`` and ``keys`` are ``[B, 2, T, d]``. Each direction's projections are one
        ``[B T, d] @ [d, L K h]`` product, laid out ``[B, 2, L K, T, h]`` for the score products
        (:meth:`_project`). The query threshold
        ``b = w . q_t + c`` is folded into the keys, ``q_t . k_s - w . q_t - c = q_t . (k_s - w) - c``,
        and ``c`` into the masking of the normalisation.

        A coupled predictor computes Eq. 1 layer by layer instead (:meth:`_coupled_layer_graphs`),
        with ``b`` subtracted from the scores: a second form, kept because it rounds differently
        (merging the two would change a coupled predictor's outputs); the test of
        ``tests/test_graph_predictor_forms.py`` checks that the two agree.

        With ``top_rows`` (int ``[2, S]``), returns ``(graphs [B, 2, L - 1, K, T, T], top layer
        [B, 2, K, S, T])``: the last layer's queries, scores and normalisation at those rows only
        (:meth:`graphs_with_top_rows`).
        """
        L, K, h = self.num_layers, self.num_heads, self.head_dim
        batch, length = tf.shape(queries)[0], tf.shape(queries)[2]
        key_bias = self.key_bias  # [1, 2, L, K, 1, h]
        if self._learned_threshold and self.threshold == "query":
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

    def _normalize(self, scores, admissible, first_layer, training, fused=None):
        """Eq. 1's normalisation of ``scores [B, 2, L', K, R, T]``, graph layers ``first_layer``
        onwards, with their thresholds (and, in training, their live-row hinge). ``fused`` (by
        default in training) normalises in one XLA cluster
        (:func:`~glomo_tf.ops.fused_normalize_scores`)."""
        fused = training if fused is None else fused
        normalize = ops.fused_normalize_scores if fused else ops.normalize_scores
        if not self._learned_threshold:
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
        L' K h]`` gradient and added them up, slower by more than the transposes cost. The bias
        rides in the product as one more input row against a column of ones: a separate add and
        its gradient (a sum over ``B R`` rows) cost about 5% of a bfloat16 pretraining step, the
        extra row almost nothing."""
        shape = tf.shape(features)
        d, layers, heads, h = kernel.shape[1:]
        flat = tf.reshape(tf.transpose(features, [1, 0, 2, 3]), [2, -1, d])  # [2, B R, d]
        flat = tf.concat([flat, tf.ones_like(flat[:, :, :1])], axis=2)
        kernel = tf.concat([tf.reshape(kernel, [2, d, layers * heads * h]), bias], axis=1)
        out = tf.matmul(flat, kernel)
        out = tf.reshape(out, [2, shape[0], shape[2], layers * heads, h])
        return tf.transpose(out, [1, 0, 3, 2, 4])

    def _thresholds(self, q, layer):
        """Eq. 1's ``b`` for one graph layer, broadcastable to its scores ``[B, 2, 1, K, T, T]``."""
        if not self._learned_threshold:
            return tf.zeros([], q.dtype)
        bias = self._w(self.threshold_bias)[:, layer:layer + 1]
        if self.threshold == "scalar":
            return bias[None, :, :, None, None, None]
        kernel = self._w(self.threshold_kernel)[:, layer:layer + 1]
        return (tf.einsum("bzlkth,zlh->bzlkt", q, kernel)
                + bias[None, :, :, None, None])[..., None]

    def _add_live_row_loss(self, scores, admissible, threshold=None):
        """The ``live_row_weight`` hinge on the rows' best ``q_t . k_s - b_t``.

        ``scores`` ``[..., T, T]``; ``threshold``, when given, is a per-row ``b`` of shape
        ``[..., 1, 1]`` subtracted after the row maximum (one small op instead of a full-size one).
        """
        best = tf.reduce_max(tf.where(admissible > 0, tf.cast(scores, tf.float32), -1e9), axis=-1)
        if threshold is not None:
            best = best - tf.cast(threshold[..., 0], tf.float32)
        has_source = tf.broadcast_to(
            tf.cast(tf.reduce_any(admissible > 0, axis=-1), tf.float32), tf.shape(best))
        hinge = tf.nn.relu(self.live_row_margin - best) * has_source
        self.add_loss(self.live_row_weight * tf.reduce_sum(hinge)
                      / tf.maximum(tf.reduce_sum(has_source), 1.0))

    def _coupled_graphs(self, features, admissible, training=False):
        """``-decouple`` ablation: graphs of layer ``l`` from the features ``F^{l-1}``.

        ``features`` is ``F^0``, ``[B, 2, T, d]``.
        """
        graphs, all_features = [], []
        for layer in range(self.num_layers):
            graph = self._coupled_layer_graphs(features, layer, admissible, training)
            features = self.composer.compose(features, graph[:, :, 0])
            graphs.append(graph)
            all_features.append(features)
        return tf.concat(graphs, axis=2), tf.stack(all_features, axis=2)

    def _coupled_layer_graphs(self, features, layer, admissible, training=False):
        """Eq. 1 for one graph ``layer`` from ``features [B, 2, T, d]``: ``[B, 2, 1, K, T, T]``.

        What ``_graphs(features, features, ...)[:, :, layer:layer + 1]`` computes, in its second
        form (see :meth:`_graphs`).
        """
        q = tf.einsum("bztd,zdkh->bzkth", features, self._w(self.query_kernel[:, :, layer]))
        q = (q + self._w(self.query_bias[:, :, layer]))[:, :, None]  # [B, 2, 1, K, T, h]
        k = tf.einsum("bzsd,zdkh->bzksh", features, self._w(self.key_kernel[:, :, layer]))
        k = (k + self._w(self.key_bias[:, :, layer]))[:, :, None]
        scores = tf.einsum("bzlkth,bzlksh->bzlkts", q, k) - self._thresholds(q, layer)
        if training and self._live_row_hinge:
            self._add_live_row_loss(scores, admissible)
        return ops.normalize_scores(scores, admissible, self.normalization, self.epsilon,
                                    entmax_alpha=self.entmax_alpha)

    # ------------------------------------------------------------------ Keras plumbing
    def compute_output_shape(self, input_shape):
        batch, length = input_shape[0], input_shape[1]
        shapes = {
            "graphs": (batch, 2, self.num_layers, self.num_heads, length, length),
            "padding_mask": (batch, length),
        }
        if self.coupled:
            shapes["features"] = (batch, 2, self.num_layers, length, self.hidden_dim)
        return shapes

    def compute_output_spec(self, token_ids, training=False, fused_normalization=None):
        """Symbolic outputs with the dtypes the call returns: the padding mask is bool."""
        shapes = self.compute_output_shape(token_ids.shape)
        return {key: keras.KerasTensor(shape, dtype="bool" if key == "padding_mask"
                                       else self.compute_dtype)
                for key, shape in shapes.items()}

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "hidden_dim": self.hidden_dim,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "head_dim": self.head_dim,
            "conv_layers": self.conv_layers,
            "kernel_size": self.kernel_size,
            "threshold": self.threshold,
            "normalization": self.normalization,
            "entmax_alpha": self.entmax_alpha,
            "coupled": self.coupled,
            "composition": self.composition,
            "dropout": self.dropout,
            "momentum": self.momentum,
            "epsilon": self.epsilon,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            "initial_threshold": self.initial_threshold,
            "live_row_weight": self.live_row_weight,
            "live_row_margin": self.live_row_margin,
        })
        return config


def _check_positive(**values):
    for name, value in values.items():
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}.")
