"""Graph math shared by the layers: admissibility masks, Eq. 1 normalisation, chained products.

Conventions: a graph ``G[..., t, s]`` holds the weight that the receiving position ``t`` puts on
the source position ``s``, and each row is a distribution over the row's admissible sources (it
sums to 1), or all zero when the row has none (or, with the learned threshold, no source above
it). Direction 0 is forward (sources ``s < t``), direction 1 backward (sources ``s > t``), both in
the original time order; padded positions (token id 0) are never sources. All functions take and
return tensors of the TensorFlow backend and work under ``tf.function`` and XLA.
"""

import tensorflow as tf

from glomo_tf import hparams

FORWARD = 0
BACKWARD = 1
DIRECTIONS = hparams.DIRECTIONS
NORMALIZATIONS = hparams.NORMALIZATIONS


def padding_mask_from_ids(token_ids):
    """``[B, T]`` bool mask, True at real units (id != 0)."""
    return tf.not_equal(token_ids, 0)


def direction_masks(length, dtype=tf.bool):
    """``[2, T, T]``: forward admits ``s < t`` (strictly lower triangle), backward ``s > t``."""
    ones = tf.ones((length, length), dtype=tf.float32)
    forward = tf.linalg.band_part(ones, -1, 0) - tf.linalg.band_part(ones, 0, 0)
    backward = tf.linalg.band_part(ones, 0, -1) - tf.linalg.band_part(ones, 0, 0)
    return tf.cast(tf.stack([forward, backward]), dtype)


def admissible_sources(padding_mask, length=None):
    """``[B, 2, 1, 1, T, T]`` float mask of the sources each receiving unit may use.

    A source is admissible when it lies on the right side of the receiver for the direction and is
    not padding. Padded *receivers* keep their admissible real sources (like the reference code);
    downstream layers ignore padded receivers through the padding mask.
    """
    if length is None:
        length = tf.shape(padding_mask)[1]
    directional = direction_masks(length, tf.float32)  # [2, T, T]
    source_ok = tf.cast(padding_mask, tf.float32)[:, None, None, None, None, :]  # [B,1,1,1,1,T]
    return directional[None, :, None, None, :, :] * source_ok


def normalize_scores(scores, admissible, normalization="squared_relu", epsilon=1e-16,
                     threshold=None, entmax_alpha=1.5):
    """Eq. 1: turn raw scores into row-stochastic graphs over the admissible sources.

    Args:
        scores: ``[..., T, T]`` raw affinities ``q_t . k_s - b`` (any float dtype), or ``q_t . k_s``
            when ``threshold`` gives ``b``.
        admissible: float mask broadcastable to ``scores``; 1 where ``s`` may feed ``t``, 0 elsewhere.
        normalization: ``"squared_relu"`` (the paper: ``relu(x)^2 / sum relu(x')^2``),
            ``"softmax"`` (the ``-sparse`` ablation) or ``"entmax15"`` (:func:`entmax15`: the
            same squared-ReLU form with the threshold solved per row, so no row is ever empty;
            ``threshold``, a per-row shift, changes nothing then), or ``"entmax"``
            (:func:`entmax_bisect` with ``entmax_alpha``: sparsity between softmax and
            ``entmax15`` for an alpha in (1, 1.5), beyond it up to sparsemax at 2).
        epsilon: added to the row sum so rows with no positive admissible score become all zero.
        threshold: optional ``b``, broadcastable to ``scores``, subtracted from them. Passing it
            here (rather than subtracting it first) is faster when it is small, like the
            admissible mask: both are folded into one additive term of their broadcast shape.
        entmax_alpha: alpha of ``"entmax"``, in (1, 2]; ignored by the other normalisations.

    Returns:
        Graphs of the same shape and dtype as ``scores``; every row sums to 1 or is all zero.
        The arithmetic runs in float32 even under a bfloat16 policy.
    """
    out_dtype = scores.dtype
    scores = tf.cast(scores, tf.float32)
    admissible = tf.cast(admissible, tf.float32)
    if threshold is not None:
        threshold = tf.cast(threshold, tf.float32)
    if normalization == "squared_relu":
        # relu(x - b) * mask == relu(x + offset) with offset = -b where admissible, -inf elsewhere
        # (for finite x): the offset has the small broadcast shape of the mask and threshold, so
        # the full-size scores see one add, relu, square, sum and divide.
        offset = tf.where(admissible > 0, 0.0 if threshold is None else -threshold, float("-inf"))
        weights = tf.square(tf.nn.relu(scores + offset))
    elif normalization == "entmax15":
        return tf.cast(entmax15(scores, admissible), out_dtype)
    elif normalization == "entmax":
        return tf.cast(entmax_bisect(scores, admissible, entmax_alpha), out_dtype)
    elif normalization == "softmax":
        if threshold is not None:
            scores = scores - threshold
        return tf.cast(masked_softmax(scores, admissible, epsilon), out_dtype)
    else:
        raise ValueError(
            f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}.")
    # Times the rows' reciprocals: a broadcast division of the full-size weights costs a CPU
    # about twice the multiply.
    graphs = weights * tf.math.reciprocal(tf.reduce_sum(weights, axis=-1, keepdims=True) + epsilon)
    return tf.cast(graphs, out_dtype)


def fused_normalize_scores(scores, admissible, normalization="squared_relu", epsilon=1e-16,
                           threshold=None, entmax_alpha=1.5):
    """:func:`normalize_scores` as one XLA cluster, for a training step that is not compiled as
    a whole (the ``mixed_bfloat16`` step on a CPU, see :mod:`glomo_tf.precision`): its casts,
    shift, ReLU, square, row sums and division over the ``[..., T, T]`` scores become a few fused
    passes, forward and backward, instead of one pass per op. The same values as
    :func:`normalize_scores` up to float round-off; inside an XLA-compiled step it is inlined."""
    return _normalize_cluster(scores, admissible, normalization, epsilon, threshold,
                              entmax_alpha)


_normalize_cluster = tf.function(normalize_scores, jit_compile=True, reduce_retracing=True)


def masked_softmax(scores, admissible, epsilon=0.0):
    """Softmax over the last axis of ``scores``, restricted to the admissible entries.

    Args:
        scores: float ``[..., S]``, in any float dtype (the arithmetic stays in it).
        admissible: 0/1 float mask broadcastable to ``scores``.
        epsilon: added to every row sum that is not zero (:func:`normalize_scores`
            passes its ``epsilon``; 0 gives the exact softmax).

    Returns:
        Weights like ``scores``: each row sums to 1 over its admissible entries (to
        ``total / (total + epsilon)`` with ``epsilon``), zero elsewhere; a row without an
        admissible entry is all zero.
    """
    masked = tf.where(admissible > 0, scores, scores.dtype.min)
    row_max = tf.stop_gradient(tf.reduce_max(masked, axis=-1, keepdims=True))
    weights = tf.exp(masked - row_max) * admissible
    total = tf.reduce_sum(weights, axis=-1, keepdims=True)
    return weights / (tf.where(total > 0, total, 1.0) + epsilon)


def entmax15(scores, admissible):
    """1.5-entmax over the admissible entries of each row: ``relu(x / 2 - tau)^2``.

    ``tau`` is the row's threshold that makes the weights sum to 1 (Peters, Niculae & Martins,
    "Sparse Sequence-to-Sequence Models", ACL 2019, Eq. 10 with alpha = 1.5): GLoMo's normalised
    squared ReLU (Eq. 1) has this form with ``tau`` *learned*; here it is solved, so a row is
    never empty, its gradient never vanishes, and sources far below the row's best still get
    exactly zero weight (any score more than 2 below the row maximum).

    The support is found by sorting (without gradient); ``tau`` is then the closed form on that
    support, ``mean - sqrt((1 - k * var) / k)`` over the ``k`` supported ``x / 2``, differentiated
    as it stands, which is the exact Jacobian of the solved threshold.

    Args:
        scores: float32 ``[..., T, S]``.
        admissible: float mask broadcastable to ``scores``; rows without an admissible entry
            come out all zero.

    Returns:
        ``[..., T, S]`` float32 weights; rows sum to 1 (or 0).
    """
    admissible = tf.broadcast_to(admissible > 0, tf.shape(scores))
    half = scores / 2.0
    row_max = tf.reduce_max(tf.where(admissible, half, float("-inf")), axis=-1, keepdims=True)
    row_max = tf.where(tf.math.is_finite(row_max), row_max, 0.0)
    # Entries more than 1 below the row maximum are never supported (the maximum alone already
    # reaches weight 1 at tau = max - 1): clip them there, and place inadmissible ones below it.
    z = tf.where(admissible, tf.maximum(half - row_max, -2.0), -3.0)
    support = tf.stop_gradient(_entmax15_support(z))
    count = tf.maximum(tf.reduce_sum(support, axis=-1, keepdims=True), 1.0)
    mean = tf.reduce_sum(z * support, axis=-1, keepdims=True) / count
    mean_square = tf.reduce_sum(tf.square(z) * support, axis=-1, keepdims=True) / count
    delta = (1.0 - count * (mean_square - tf.square(mean))) / count
    tau = mean - tf.sqrt(tf.maximum(delta, 1e-12))
    weights = tf.square(tf.nn.relu(z - tau))
    return tf.where(admissible, weights, 0.0)


def entmax_bisect(scores, admissible, alpha=1.5, iterations=30):
    """alpha-entmax over the admissible entries of each row: ``relu((alpha - 1) x - tau)^(1 /
    (alpha - 1))``, with ``tau`` the row's threshold that makes the weights sum to 1.

    Alpha 1.5 is :func:`entmax15` (whose closed form is faster), alpha 2 sparsemax, and alpha
    towards 1 approaches softmax: in between, a row keeps more sources than entmax15 and still
    gives exactly zero to those far below its best (Peters, Niculae & Martins, ACL 2019; the
    bisection of Blondel, Martins & Niculae, AISTATS 2019). ``tau`` lies between ``m - 1`` (the
    best entry alone reaches 1) and ``m - n^(1 - alpha)`` (all ``n`` entries at the maximum
    ``m`` of ``(alpha - 1) x``); ``iterations`` halvings narrow it to ``2^-iterations``, and the
    weights are then divided by their sum. The gradient is the exact Jacobian of the solved
    weights, ``diag(s) - s s^T / sum(s)`` with ``s = p^(2 - alpha)`` on the support (a custom
    gradient: the bisection's comparisons have none).

    Args:
        scores: float32 ``[..., T, S]``.
        admissible: float mask broadcastable to ``scores``; rows without an admissible entry
            come out all zero.
        alpha: float in (1, 2].

    Returns:
        ``[..., T, S]`` float32 weights; rows sum to 1 (or 0).
    """
    alpha = hparams.check_entmax_alpha(alpha)
    power = 1.0 / (alpha - 1.0)
    mask = tf.broadcast_to(admissible > 0, tf.shape(scores))

    @tf.custom_gradient
    def solve(x):
        z = tf.where(mask, x * (alpha - 1.0), float("-inf"))
        row_max = tf.reduce_max(z, axis=-1, keepdims=True)
        row_max = tf.where(tf.math.is_finite(row_max), row_max, 0.0)
        count = tf.maximum(tf.reduce_sum(tf.cast(mask, z.dtype), axis=-1, keepdims=True), 1.0)
        low = row_max - 1.0
        high = row_max - tf.pow(count, 1.0 - alpha)
        for _ in range(iterations):
            middle = (low + high) / 2.0
            total = tf.reduce_sum(tf.pow(tf.nn.relu(z - middle), power), axis=-1, keepdims=True)
            # The sum falls as tau grows: keep low where the weights still reach 1.
            above = total >= 1.0
            low = tf.where(above, middle, low)
            high = tf.where(above, high, middle)
        weights = tf.pow(tf.nn.relu(z - low), power)
        weights = weights / tf.maximum(tf.reduce_sum(weights, axis=-1, keepdims=True), 1e-30)

        def gradient(upstream):
            support = tf.where(weights > 0, tf.pow(weights, 2.0 - alpha), 0.0)
            weighted = upstream * support
            shift = tf.reduce_sum(weighted, axis=-1, keepdims=True) / tf.maximum(
                tf.reduce_sum(support, axis=-1, keepdims=True), 1e-30)
            return weighted - shift * support

        return weights, gradient

    return solve(tf.convert_to_tensor(scores, tf.float32))


def _entmax15_support(z):
    """``[..., S]`` float 0/1: the entries of the 1.5-entmax support of each row of ``z``."""
    ordered = tf.sort(z, axis=-1, direction="DESCENDING")
    size = tf.shape(z)[-1]
    k = tf.cast(tf.range(1, size + 1), z.dtype)
    mean = tf.cumsum(ordered, axis=-1) / k
    mean_square = tf.cumsum(tf.square(ordered), axis=-1) / k
    delta = (1.0 - k * (mean_square - tf.square(mean))) / k
    tau = mean - tf.sqrt(tf.nn.relu(delta))
    # The support is the largest k whose threshold lies below its k-th largest entry.
    in_support = tf.cast(tau <= ordered, z.dtype)
    support_size = tf.reduce_sum(in_support, axis=-1, keepdims=True)
    kth = tf.reduce_min(tf.where(k <= support_size, ordered, float("inf")), axis=-1, keepdims=True)
    return tf.cast(z >= kth, z.dtype)


def live_rows(graphs, padding_mask):
    """Share of live rows per direction, layer and head: ``[2, L, K]`` floats in ``[0, 1]``.

    A row (receiving unit) counts when it is a real unit with at least one admissible source; it is
    live when its weights sum to about 1 rather than 0 (every score under the threshold). A graph
    whose share is 0 is dead: it gets no gradient and passes nothing downstream.

    Args:
        graphs: ``[B, 2, L, K, T, T]`` from :class:`~glomo_tf.layers.GraphPredictor`.
        padding_mask: bool ``[B, T]``.
    """
    admissible = admissible_sources(padding_mask)  # [B, 2, 1, 1, T, T]
    rows = tf.logical_and(tf.reduce_any(admissible > 0, axis=-1),
                          padding_mask[:, None, None, None, :])  # [B, 2, 1, 1, T]
    rows = tf.cast(rows, tf.float32)
    live = tf.cast(tf.reduce_sum(tf.cast(graphs, tf.float32), axis=-1) > 0.5, tf.float32)
    counted = tf.reduce_sum(rows, axis=[0, 4])  # [2, 1, 1]
    return tf.reduce_sum(live * rows, axis=[0, 4]) / tf.maximum(counted, 1.0)


def uniform_graphs(padding_mask, dtype=tf.float32):
    """``[B, 2, T, T]`` uniform graphs: each row spreads its weight evenly over admissible sources.

    The paper's ``uniform graph`` sanity baseline (Table 2).
    """
    admissible = admissible_sources(padding_mask)[:, :, 0, 0]  # [B, 2, T, T]
    return tf.cast(
        admissible / tf.maximum(tf.reduce_sum(admissible, axis=-1, keepdims=True), 1.0), dtype)


def propagate(graphs, features):
    """``graphs [B, 2, L, K, T, T]`` applied to ``features [B, T, d]`` as chains, per head.

    Returns ``(single, chained)``, both ``[B, 2, L, K, T, d]``: ``single[..., l, k] = G^l_k H`` and
    ``chained[..., l, k] = G^l_k (G^{l-1}_k (... G^1_k H))`` = ``Lambda^l_k H``, the hierarchical
    products of Section 2.2 computed right to left, ``O(L T^2 d)`` instead of forming ``T x T x T``
    matrix products.
    """
    features = tf.cast(features, graphs.dtype)
    num_layers = graphs.shape[2]
    single = tf.einsum("bzlkts,bsd->bzlktd", graphs, features)
    chained = [single[:, :, 0]]
    for layer in range(1, num_layers):
        chained.append(tf.einsum("bzkts,bzksd->bzktd", graphs[:, :, layer], chained[-1]))
    return single, tf.stack(chained, axis=2)


def hierarchical_products(graphs):
    """The hierarchical products of Section 2.2 as ``T x T`` matrices: ``[B, 2, L - 1, K, T, T]``
    with ``[..., l - 2, k, :, :] = Lambda^l_k = G^l_k Lambda^{l-1}_k`` for ``l = 2..L``
    (``Lambda^1 = G^1`` is the first layer's graphs and is not repeated). ``O(L T^3)`` per head:
    worth it where they are formed once and reused (a frozen predictor's graph cache)."""
    products = [graphs[:, :, 0]]
    for layer in range(1, graphs.shape[2]):
        products.append(tf.matmul(graphs[:, :, layer], products[-1]))
    if len(products) == 1:
        shape = tf.shape(graphs)
        return tf.zeros(tf.concat([shape[:2], [0], shape[3:]], 0), graphs.dtype)
    return tf.stack(products[1:], axis=2)


def sharpen_graphs(graphs, temperature):
    """Every row of ``graphs [..., T, S]`` raised to the power ``1 / temperature`` and
    renormalised: ``G_ts^(1/tau) / sum_s' G_ts'^(1/tau)`` over the row's sources.

    A transfer-time temperature for a frozen predictor's graphs: below 1 it sharpens the rows
    (towards their heaviest source), above 1 it flattens them (towards uniform weights over the
    sources the row already has); a source with weight 0 keeps 0, a row without sources stays 0,
    and the order of a row's sources (so :func:`top_k_sources`' choice) is unchanged. For graphs
    normalised by a softmax, ``G^(1/tau)`` renormalised is exactly ``softmax(s / tau)`` of the
    same scores; for the paper's squared ReLU it is ``relu(s)^(2/tau)`` normalised. Computed in
    float32 (the result in ``graphs.dtype``); finite gradients where a weight is 0.
    """
    graphs = tf.convert_to_tensor(graphs)
    temperature = hparams.check_graph_temperature(temperature, "temperature")
    if temperature is None:
        return graphs
    weights = tf.cast(graphs, tf.float32)
    present = weights > 0
    # Relative to the row's heaviest source, so a small temperature cannot underflow a whole row.
    logs = tf.math.log(tf.where(present, weights, 1.0))
    heaviest = tf.stop_gradient(tf.reduce_max(tf.where(present, logs, -1e30), axis=-1,
                                              keepdims=True))
    shifted = tf.where(present, logs - heaviest, 0.0)  # 0 where absent: no inf, no NaN gradient
    powered = tf.where(present, tf.exp(shifted / temperature), 0.0)
    total = tf.reduce_sum(powered, axis=-1, keepdims=True)
    sharpened = powered / tf.where(total > 0, total, 1.0)
    return tf.cast(sharpened, graphs.dtype)


def top_k_sources(graphs, k):
    """The ``k`` heaviest sources of every row of ``graphs [..., T, S]``: the compact form.

    Returns ``(indices, weights)``, int32 and ``graphs.dtype``, both ``[..., T, k]``: for each
    receiving unit the source positions in decreasing weight (ties: the lower position first) and
    their weights (slots with weight 0 hold source 0). The form is exact (``densify_top_k``
    gives ``graphs`` back) when ``k`` is at least the number of sources with weight in every
    row; the rows of GLoMo's graphs are sparse by construction (squared ReLU, 1.5-entmax), so a
    small ``k`` often is. When ``S < k`` the last ``k - S`` slots are such empty slots. Kept
    rows are not renormalised: a truncated row sums to less than 1. ``glomo extract``'s edge
    listing, :class:`~glomo_tf.GlomoTransfer` (``top_k``), :class:`~glomo_tf.GraphMixture` and
    :mod:`glomo_tf.data.graph_cache` read this form.
    """
    k = int(k)
    graphs = tf.convert_to_tensor(graphs)
    if k < 1:
        raise ValueError(f"top_k must be >= 1, got {k}; pass None to keep the dense graphs.")
    size = tf.shape(graphs)[-1]
    kept = tf.minimum(size, k)
    weights, indices = tf.math.top_k(graphs, k=kept, sorted=True)
    # Slots without weight point at source 0, so they stay inside any shorter padded batch.
    indices = tf.where(tf.not_equal(weights, 0), indices, 0)
    missing = k - kept
    pad = [[0, 0]] * (len(graphs.shape) - 1) + [[0, missing]]
    weights = tf.pad(weights, pad)
    indices = tf.pad(tf.cast(indices, tf.int32), pad)
    static = graphs.shape[:-1].as_list() + [k]
    weights.set_shape(static)
    indices.set_shape(static)
    return indices, weights


def densify_top_k(indices, weights, length=None):
    """The dense graphs ``[..., T, length]`` of a compact form ``(indices, weights)``.

    ``length`` (default ``T``, the rows' axis) is the number of source positions. Slots with
    weight 0 add nothing, so padding slots are harmless.
    """
    indices, weights = tf.convert_to_tensor(indices), tf.convert_to_tensor(weights)
    if length is None:
        length = tf.shape(indices)[-2]
    shape = tf.shape(indices)
    rows = tf.reduce_prod(shape[:-1])
    # One segment per (row, source): the slots' weights summed into their sources, O(rows k).
    segments = tf.range(rows)[:, None] * length + tf.reshape(tf.cast(indices, tf.int32),
                                                            [rows, -1])
    dense = tf.math.unsorted_segment_sum(tf.reshape(weights, [-1]), tf.reshape(segments, [-1]),
                                         rows * length)
    out = tf.reshape(dense, tf.concat([shape[:-1], [length]], axis=0))
    if isinstance(length, int):
        out.set_shape(indices.shape[:-1] + [length])
    else:
        out.set_shape(indices.shape[:-1] + [None])
    return out


def propagate_top_k(indices, weights, features):
    """:func:`propagate` on the compact form: ``(single, chained)``, both ``[B, 2, L, K, T, d]``.

    ``indices``/``weights`` are ``[B, 2, L, K, T, k]`` (:func:`top_k_sources`). Each candidate is
    applied by gathering its ``k`` sources' features and summing them weighted, ``O(T k d)``
    instead of ``O(T^2 d)``; the chains ``Lambda^l H`` are applied as chains, one sparse step per
    layer. Equals :func:`propagate` on :func:`densify_top_k` of the form.
    """
    weights = tf.cast(weights, features.dtype)
    shape = tf.shape(indices)
    batch, steps, k = shape[0], shape[4], shape[5]
    num_layers, num_heads = indices.shape[2], indices.shape[3]
    width = tf.shape(features)[-1]
    # single: every (direction, layer, head, row, slot) gathers from the sentence's features.
    flat = tf.reshape(indices, [batch, -1])
    gathered = tf.gather(features, flat, batch_dims=1)  # [B, 2 L K T k, d]
    gathered = tf.reshape(gathered, [batch, 2, num_layers, num_heads, steps, k, width])
    # Multiply and sum (not an einsum: that becomes a batch of tiny matmuls, twice as slow).
    single = tf.reduce_sum(weights[..., None] * gathered, axis=-2)
    chained = [single[:, :, 0]]
    for layer in range(1, num_layers):
        # [B, 2, K, T, d] gathered by [B, 2, K, T, k] along T -> [B, 2, K, T, k, d]
        previous = tf.gather(chained[-1], indices[:, :, layer], batch_dims=3)
        chained.append(tf.reduce_sum(weights[:, :, layer][..., None] * previous, axis=-2))
    return single, tf.stack(chained, axis=2)
