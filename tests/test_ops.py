"""Tests of glomo_tf.ops against NumPy implementations written from the equations."""

import numpy as np
import pytest
import tensorflow as tf

from _references import np_entmax, np_entmax15
from glomo_tf import ops


# ---------------------------------------------------------------------------- NumPy references
def np_direction_mask(length, direction):
    """Forward admits s < t, backward s > t (loops, no triangle helpers)."""
    mask = np.zeros((length, length), np.float32)
    for t in range(length):
        for s in range(length):
            if (direction == 0 and s < t) or (direction == 1 and s > t):
                mask[t, s] = 1.0
    return mask


def np_normalize(scores, admissible, normalization):
    """Row-wise Eq. 1 over the admissible sources; rows with nothing to normalise are zero."""
    scores = np.asarray(scores, np.float64)
    admissible = np.broadcast_to(admissible, scores.shape)
    out = np.zeros_like(scores)
    for idx in np.ndindex(scores.shape[:-1]):
        row, ok = scores[idx], admissible[idx] > 0
        if not ok.any():
            continue
        if normalization == "squared_relu":
            w = np.where(ok, np.maximum(row, 0.0) ** 2, 0.0)
        elif normalization == "entmax15":
            w = np.where(ok, np_entmax15(np.where(ok, row, -np.inf)), 0.0)
        else:
            m = row[ok].max()
            w = np.where(ok, np.exp(row - m), 0.0)
        total = w.sum()
        if total > 0:
            out[idx] = w / total
    return out


# ---------------------------------------------------------------------------- masks
@pytest.mark.parametrize("length", [1, 2, 5])
def test_direction_masks_match_definition(length):
    masks = ops.direction_masks(length).numpy()
    assert masks.dtype == bool and masks.shape == (2, length, length)
    np.testing.assert_array_equal(masks[0], np_direction_mask(length, 0) > 0)
    np.testing.assert_array_equal(masks[1], np_direction_mask(length, 1) > 0)
    floats = ops.direction_masks(length, tf.float32).numpy()
    assert floats.dtype == np.float32
    np.testing.assert_array_equal(floats[0], np_direction_mask(length, 0))


def test_padding_mask_from_ids():
    ids = np.array([[3, 0, 5, 0], [0, 0, 0, 0]], np.int32)
    np.testing.assert_array_equal(ops.padding_mask_from_ids(ids).numpy(), ids != 0)


def test_admissible_sources_combines_direction_and_padding():
    pad = np.array([[True, True, False, True, False], [True, True, True, True, True]])
    adm = ops.admissible_sources(tf.constant(pad)).numpy()
    assert adm.shape == (2, 2, 1, 1, 5, 5)
    for b in range(2):
        for z in range(2):
            expected = np_direction_mask(5, z) * pad[b][None, :].astype(np.float32)
            np.testing.assert_array_equal(adm[b, z, 0, 0], expected)
    # Padded receivers keep their real admissible sources (t=4 is padding, s=0,1,3 are real).
    np.testing.assert_array_equal(adm[0, 0, 0, 0, 4], [1, 1, 0, 1, 0])
    # A padded source is never admissible, for any receiver.
    assert adm[0, :, :, :, :, 2].sum() == 0


def test_admissible_sources_explicit_length():
    pad = tf.constant([[True, False, True]])
    adm = ops.admissible_sources(pad, length=3).numpy()
    np.testing.assert_array_equal(adm[0, 1, 0, 0], [[0, 0, 1], [0, 0, 1], [0, 0, 0]])


# ---------------------------------------------------------------------------- Eq. 1
@pytest.mark.parametrize("normalization", ["squared_relu", "softmax", "entmax15"])
def test_normalize_scores_matches_numpy(normalization, rng):
    T = 6
    scores = rng.normal(size=(2, 2, 3, T, T)).astype(np.float32)
    pad = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], np.float32)
    admissible = np.stack([np_direction_mask(T, 0), np_direction_mask(T, 1)])  # [2, T, T]
    admissible = admissible[None, :, None] * pad[:, None, None, None, :]  # [B, 2, 1, T, T]
    got = ops.normalize_scores(tf.constant(scores), tf.constant(admissible), normalization).numpy()
    expected = np_normalize(scores, admissible, normalization)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # The comparison is not vacuous: plenty of rows carry weight.
    assert (expected.sum(-1) > 0.5).sum() > 10
    # The XLA cluster of training steps computes the same graphs, and the same gradients.
    fused = ops.fused_normalize_scores(tf.constant(scores), tf.constant(admissible),
                                       normalization).numpy()
    np.testing.assert_allclose(fused, expected, rtol=1e-5, atol=1e-6)
    weights = tf.constant(rng.normal(size=scores.shape).astype(np.float32))
    gradients = []
    for normalize in (ops.normalize_scores, ops.fused_normalize_scores):
        x = tf.constant(scores)
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(normalize(x, tf.constant(admissible), normalization) * weights)
        gradients.append(tape.gradient(loss, x).numpy())
    assert np.abs(gradients[0]).max() > 0.01
    np.testing.assert_allclose(gradients[1], gradients[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("normalization", ["squared_relu", "softmax", "entmax15"])
def test_rows_without_admissible_source_are_zero(normalization):
    scores = tf.constant([[5.0, 2.0, 1.0], [3.0, -1.0, 4.0], [1.0, 1.0, 1.0]])
    admissible = tf.constant([[0.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    got = ops.normalize_scores(scores, admissible, normalization).numpy()
    np.testing.assert_array_equal(got[0], 0.0)
    np.testing.assert_array_equal(got[2], 0.0)
    assert np.all(np.isfinite(got))
    if normalization == "squared_relu":
        np.testing.assert_allclose(got[1], [1.0, 0.0, 0.0], atol=1e-7)  # relu(-1) = 0
    elif normalization == "entmax15":  # 3 - (-1) = 4 > 2: the lower score is out of the support
        np.testing.assert_allclose(got[1], [1.0, 0.0, 0.0], atol=1e-7)
    else:
        np.testing.assert_allclose(got[1], [np.exp(4) / (np.exp(4) + 1), 1 / (np.exp(4) + 1), 0],
                                   rtol=1e-6)


def test_squared_relu_row_with_no_positive_score_is_zero_and_sparse():
    scores = tf.constant([[-1.0, -2.0, -0.5, 3.0], [2.0, -1.0, 1.0, 0.0]])
    admissible = tf.constant([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    got = ops.normalize_scores(scores, admissible, "squared_relu").numpy()
    np.testing.assert_array_equal(got[0], 0.0)  # only the inadmissible source is positive
    np.testing.assert_allclose(got[1], [4 / 5, 0, 1 / 5, 0], rtol=1e-6)  # analytic: 2^2, 1^2


def test_entmax15_keeps_rows_alive_and_sparse_where_squared_relu_dies():
    # Every score below the learned threshold: Eq. 1 gives an empty row, entmax solves tau instead.
    scores = tf.constant([[-5.0, -5.5, -9.0, -4.0]])
    admissible = tf.constant([[1.0, 1.0, 1.0, 0.0]])
    assert ops.normalize_scores(scores, admissible, "squared_relu").numpy().sum() == 0.0
    got = ops.normalize_scores(scores, admissible, "entmax15").numpy()[0]
    np.testing.assert_allclose(got.sum(), 1.0, rtol=1e-6)
    assert got[2] == 0.0 and got[3] == 0.0  # 4 below the best: outside the support; inadmissible
    # Analytic two-entry support: (a - tau)^2 + (b - tau)^2 = 1 with a = -2.5, b = -2.75.
    a, b = -2.5, -2.75
    tau = ((a + b) - np.sqrt(2 - (a - b) ** 2)) / 2
    np.testing.assert_allclose(got[:2], [(a - tau) ** 2, (b - tau) ** 2], rtol=1e-5)
    # Shift invariance: a per-row threshold changes nothing.
    shifted = ops.normalize_scores(scores, admissible, "entmax15", threshold=tf.constant([[3.0]]))
    np.testing.assert_allclose(shifted.numpy()[0], got, atol=1e-7)


def test_entmax15_gradient_is_the_solved_thresholds_jacobian(rng):
    """d p / d x of 1.5-entmax: with s = sqrt(p), grad_x = s * g - s * (s . g) / sum(s)."""
    scores = rng.normal(scale=2.0, size=(4, 7)).astype(np.float32)
    admissible = np.ones((4, 7), np.float32)
    admissible[1, 5:] = 0.0
    upstream = rng.normal(size=(4, 7)).astype(np.float32)
    x = tf.constant(scores)
    with tf.GradientTape() as tape:
        tape.watch(x)
        p = ops.normalize_scores(x, tf.constant(admissible), "entmax15")
        loss = tf.reduce_sum(p * upstream)
    got = tape.gradient(loss, x).numpy()
    expected = np.zeros_like(scores, np.float64)
    for i in range(4):
        ok = admissible[i] > 0
        s = np.sqrt(np_entmax15(np.where(ok, scores[i], -np.inf)))
        expected[i] = s * upstream[i] - s * (s @ upstream[i]) / s.sum()
    np.testing.assert_allclose(got, expected, atol=2e-5)
    assert np.abs(expected).max() > 0.05  # not vacuous


@pytest.mark.parametrize("alpha", [1.1, 1.25, 1.5, 1.75, 2.0])
def test_entmax_bisect_matches_a_root_finder(alpha, rng):
    scores = rng.normal(scale=3.0, size=(2, 3, 9)).astype(np.float32)
    admissible = (rng.random((2, 3, 9)) < 0.7).astype(np.float32)
    admissible[0, 1] = 0.0  # a row without sources
    got = ops.normalize_scores(tf.constant(scores), tf.constant(admissible), "entmax",
                               entmax_alpha=alpha).numpy()
    for idx in np.ndindex(scores.shape[:-1]):
        ok = admissible[idx] > 0
        if not ok.any():
            np.testing.assert_array_equal(got[idx], 0.0)
            continue
        expected = np_entmax(np.where(ok, scores[idx], -np.inf), alpha)
        np.testing.assert_allclose(got[idx], expected, atol=2e-5)
        assert np.all(got[idx][~ok] == 0.0)
        np.testing.assert_allclose(got[idx].sum(), 1.0, rtol=1e-5)


def test_entmax_alpha_orders_sparsity_between_softmax_and_sparsemax(rng):
    """alpha 1.5 is the closed-form entmax15; alpha 2 is sparsemax (the Euclidean projection onto
    the simplex, from its sort formula); sources kept fall as alpha grows, softmax keeping all."""
    scores = rng.normal(scale=2.0, size=(6, 12)).astype(np.float32)
    ones = tf.ones((6, 12))
    x = tf.constant(scores)
    np.testing.assert_allclose(ops.normalize_scores(x, ones, "entmax", entmax_alpha=1.5),
                               ops.normalize_scores(x, ones, "entmax15"), atol=2e-6)
    ordered = -np.sort(-scores, axis=-1)
    k = np.arange(1, 13)
    support = (1 + k * ordered > np.cumsum(ordered, axis=-1)).sum(axis=-1, keepdims=True)
    tau = (np.take_along_axis(np.cumsum(ordered, axis=-1), support - 1, -1) - 1) / support
    sparsemax = np.maximum(scores - tau, 0.0)
    np.testing.assert_allclose(ops.normalize_scores(x, ones, "entmax", entmax_alpha=2.0),
                               sparsemax, atol=2e-6)
    kept = [np.count_nonzero(ops.normalize_scores(x, ones, "entmax", entmax_alpha=a).numpy())
            for a in (1.05, 1.25, 1.5, 2.0)]
    assert kept[0] > kept[1] > kept[2] > kept[3]


def test_entmax_bisect_gradient_is_the_solved_weights_jacobian(rng):
    """d p / d x of alpha-entmax: with s = p^(2 - alpha), grad_x = s * g - s * (s . g) / sum(s);
    checked against the root finder's weights and central finite differences of them."""
    alpha = 1.25
    scores = rng.normal(scale=2.0, size=(3, 6)).astype(np.float64)
    admissible = np.ones((3, 6), np.float32)
    admissible[2, :2] = 0.0
    upstream = rng.normal(size=(3, 6))
    x = tf.constant(scores, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        p = ops.fused_normalize_scores(x, tf.constant(admissible), "entmax", entmax_alpha=alpha)
        loss = tf.reduce_sum(p * tf.constant(upstream, tf.float32))
    got = tape.gradient(loss, x).numpy()
    expected = np.zeros_like(scores)
    step = 1e-5
    for i in range(3):
        ok = admissible[i] > 0
        row = np.where(ok, scores[i], -np.inf)
        for j in np.flatnonzero(ok):
            plus, minus = row.copy(), row.copy()
            plus[j] += step
            minus[j] -= step
            expected[i, j] = (np_entmax(plus, alpha) - np_entmax(minus, alpha)) @ upstream[i] / (
                2 * step)
    np.testing.assert_allclose(got, expected, atol=1e-3)
    assert np.abs(expected).max() > 0.05  # not vacuous


def test_entmax_alpha_out_of_range_is_refused():
    with pytest.raises(ValueError, match=r"entmax_alpha must be in \(1, 2\], got 1"):
        ops.normalize_scores(tf.ones((1, 2)), tf.ones((1, 2)), "entmax", entmax_alpha=1.0)
    with pytest.raises(ValueError, match="entmax_alpha must be in"):
        ops.entmax_bisect(tf.ones((1, 2)), tf.ones((1, 2)), alpha=2.5)


def test_softmax_is_stable_for_large_scores():
    scores = tf.constant([[1000.0, 999.0, -1000.0]])
    got = ops.normalize_scores(scores, tf.ones((1, 3)), "softmax").numpy()
    np.testing.assert_allclose(got[0], [1 / (1 + np.exp(-1)), np.exp(-1) / (1 + np.exp(-1)), 0],
                               rtol=1e-6, atol=1e-30)


def test_normalize_scores_keeps_dtype_and_rejects_unknown_normalization():
    scores = tf.constant([[1.0, 2.0]], tf.bfloat16)
    got = ops.normalize_scores(scores, tf.ones((1, 2)))
    assert got.dtype == tf.bfloat16
    np.testing.assert_allclose(got.numpy().astype(np.float32), [[0.2, 0.8]], atol=1e-2)
    with pytest.raises(ValueError, match="normalization must be one of"):
        ops.normalize_scores(scores, tf.ones((1, 2)), "sparsemax")


# ---------------------------------------------------------------------------- uniform graphs
def test_uniform_graphs_match_numpy():
    pad = np.array([[1, 1, 0, 1, 1], [1, 1, 1, 0, 0]], bool)
    got = ops.uniform_graphs(tf.constant(pad)).numpy()
    assert got.shape == (2, 2, 5, 5)
    for b in range(2):
        for z in range(2):
            for t in range(5):
                sources = [s for s in range(5)
                           if pad[b, s] and ((z == 0 and s < t) or (z == 1 and s > t))]
                expected = np.zeros(5)
                expected[sources] = 1.0 / len(sources) if sources else 0.0
                np.testing.assert_allclose(got[b, z, t], expected, rtol=1e-6)
    assert ops.uniform_graphs(tf.constant(pad), tf.float16).dtype == tf.float16


# ---------------------------------------------------------------------------- propagate
def test_propagate_matches_explicit_matrix_products(rng):
    B, L, K, T, d = 2, 3, 2, 5, 4
    graphs = rng.uniform(size=(B, 2, L, K, T, T)).astype(np.float32)
    features = rng.normal(size=(B, T, d)).astype(np.float32)
    single, chained = ops.propagate(tf.constant(graphs), tf.constant(features))
    single, chained = single.numpy(), chained.numpy()
    assert single.shape == chained.shape == (B, 2, L, K, T, d)
    g64, h64 = graphs.astype(np.float64), features.astype(np.float64)
    for b in range(B):
        for z in range(2):
            for k in range(K):
                lam = np.eye(T)
                for layer in range(L):
                    gl = g64[b, z, layer, k]
                    np.testing.assert_allclose(single[b, z, layer, k], gl @ h64[b], rtol=1e-5)
                    lam = gl @ lam  # Lambda^l = G^l Lambda^{l-1}, formed explicitly here
                    np.testing.assert_allclose(chained[b, z, layer, k], lam @ h64[b], rtol=1e-4)
    # With more than one layer, the chain differs from the single-layer propagation.
    assert not np.allclose(single[:, :, 1], chained[:, :, 1])


def test_propagate_casts_features_to_graph_dtype():
    graphs = tf.eye(3, batch_shape=(1, 2, 1, 1))
    features = tf.constant(np.arange(6, dtype=np.float64).reshape(1, 3, 2))
    single, chained = ops.propagate(graphs, features)
    assert single.dtype == tf.float32
    np.testing.assert_allclose(chained.numpy()[0, 1, 0, 0], features.numpy()[0])


# ---------------------------------------------------------------------------- top-k (sparse)
def np_top_k(graphs, k):
    """Per row: the ``k`` largest weights, largest first, ties to the lower position (a stable
    sort of the negated row); slots past the row's length or without weight hold (0, 0)."""
    shape = graphs.shape[:-1] + (k,)
    indices, weights = np.zeros(shape, np.int64), np.zeros(shape, np.float32)
    for idx in np.ndindex(graphs.shape[:-1]):
        row = graphs[idx]
        order = sorted(range(len(row)), key=lambda s: (-row[s], s))[:k]
        for slot, s in enumerate(order):
            if row[s] != 0:
                indices[idx + (slot,)], weights[idx + (slot,)] = s, row[s]
    return indices, weights


def np_truncate(graphs, k):
    """The dense graphs keeping each row's ``k`` largest weights (loops over rows)."""
    out = np.zeros_like(graphs)
    indices, weights = np_top_k(graphs, k)
    for idx in np.ndindex(graphs.shape[:-1]):
        for slot in range(k):
            out[idx + (indices[idx + (slot,)],)] += weights[idx + (slot,)]
    return out


def sparse_graphs(rng, shape, keep=0.4):
    """Random non-negative graphs with about ``keep`` of the entries non-zero, and some ties."""
    g = rng.uniform(size=shape).astype(np.float32)
    g = np.where(rng.random(shape) < keep, g, 0.0).astype(np.float32)
    g[..., 0, :2] = 0.25  # a tie at the first two sources of the first row
    return g


@pytest.mark.parametrize("k", [1, 3, 7])
def test_top_k_sources_matches_numpy(rng, k):
    graphs = sparse_graphs(rng, (2, 2, 2, 3, 5, 5))
    indices, weights = ops.top_k_sources(tf.constant(graphs), k)
    assert indices.dtype == tf.int32 and indices.shape == weights.shape == (2, 2, 2, 3, 5, k)
    expected_indices, expected_weights = np_top_k(graphs, k)
    np.testing.assert_array_equal(weights.numpy(), expected_weights)
    np.testing.assert_array_equal(indices.numpy(), expected_indices)
    dense = ops.densify_top_k(indices, weights).numpy()
    np.testing.assert_allclose(dense, np_truncate(graphs, k), rtol=1e-6)
    if k >= 5:  # every row fits: the compact form is exact
        np.testing.assert_array_equal(dense, graphs)


def test_top_k_sources_rejects_k_below_one():
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        ops.top_k_sources(tf.zeros((1, 3, 3)), 0)


@pytest.mark.parametrize("k", [2, 5])
def test_propagate_top_k_matches_numpy_chains_on_the_kept_sources(rng, k):
    B, L, K, T, d = 2, 3, 2, 5, 4
    graphs = sparse_graphs(rng, (B, 2, L, K, T, T), keep=0.6)
    features = rng.normal(size=(B, T, d)).astype(np.float32)
    indices, weights = ops.top_k_sources(tf.constant(graphs), k)
    single, chained = (x.numpy() for x in ops.propagate_top_k(indices, weights, features))
    assert single.shape == chained.shape == (B, 2, L, K, T, d)
    kept = np_truncate(graphs, k).astype(np.float64)  # == graphs when k >= T
    if k >= T:
        np.testing.assert_array_equal(kept, graphs)
    for b, z, kk in np.ndindex(B, 2, K):
        lam = np.eye(T)
        for layer in range(L):
            gl = kept[b, z, layer, kk]
            np.testing.assert_allclose(single[b, z, layer, kk], gl @ features[b], rtol=1e-5,
                                       atol=1e-6)
            lam = gl @ lam
            np.testing.assert_allclose(chained[b, z, layer, kk], lam @ features[b], rtol=1e-4,
                                       atol=1e-6)


def test_propagate_top_k_under_xla_with_run_time_shapes(rng):
    graphs = sparse_graphs(rng, (2, 2, 2, 2, 6, 6))
    features = rng.normal(size=(2, 6, 3)).astype(np.float32)
    run = tf.function(lambda g, h: ops.propagate_top_k(*ops.top_k_sources(g, 3), h)[1],
                      jit_compile=True,
                      input_signature=[tf.TensorSpec([None, 2, 2, 2, None, None]),
                                       tf.TensorSpec([None, None, 3])])
    expected = np.einsum("bzkts,bzksd->bzktd", np_truncate(graphs, 3)[:, :, 1],
                         np.einsum("bzkts,bsd->bzktd", np_truncate(graphs, 3)[:, :, 0],
                                   features))
    np.testing.assert_allclose(run(graphs, features).numpy()[:, :, 1], expected, rtol=1e-4,
                               atol=1e-6)


# ---------------------------------------------------------------------- sharpen_graphs
def np_sharpen(graphs, temperature):
    """Each row's weights to the power 1/temperature over the row's sources, renormalised;
    rows without sources stay 0 (float64)."""
    graphs = np.asarray(graphs, np.float64)
    powered = np.where(graphs > 0, np.abs(graphs) ** (1.0 / temperature), 0.0)
    total = powered.sum(-1, keepdims=True)
    return np.where(total > 0, powered / np.where(total > 0, total, 1.0), 0.0)


@pytest.mark.parametrize("temperature", [0.3, 1.0, 2.5])
def test_sharpen_graphs_matches_numpy(rng, temperature):
    graphs = rng.uniform(0.0, 1.0, (2, 3, 6, 6)) * (rng.uniform(size=(2, 3, 6, 6)) < 0.5)
    graphs[0, 0, 2] = 0.0  # a row without sources
    graphs /= np.maximum(graphs.sum(-1, keepdims=True), 1e-12)
    got = ops.sharpen_graphs(tf.constant(graphs, tf.float32), temperature).numpy()
    np.testing.assert_allclose(got, np_sharpen(graphs, temperature), rtol=1e-5, atol=1e-7)
    assert not got[0, 0, 2].any()
    np.testing.assert_array_equal(got > 0, graphs > 0)  # no source gained or lost
    np.testing.assert_array_equal(ops.sharpen_graphs(tf.constant(graphs), None).numpy(), graphs)


def test_sharpen_graphs_of_a_softmax_is_a_softmax_temperature(rng):
    scores = rng.normal(0.0, 2.0, (4, 7))
    weights = np.exp(scores) / np.exp(scores).sum(-1, keepdims=True)
    for temperature in (0.25, 3.0):
        expected = np.exp(scores / temperature) / np.exp(scores / temperature).sum(-1,
                                                                                   keepdims=True)
        got = ops.sharpen_graphs(tf.constant(weights, tf.float32), temperature).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-7)


def test_sharpen_graphs_small_temperature_keeps_rows_whole_and_gradients_finite():
    """A temperature of 0.01 raises 0.002 to the power 100 (below float32's range): the rows
    still sum to 1, their heaviest source ahead; gradients are finite where weights are 0."""
    graphs = tf.constant([[0.001, 0.002, 0.0], [0.0, 0.0, 0.0]], tf.float32)
    got = ops.sharpen_graphs(graphs, 0.01).numpy()
    np.testing.assert_allclose(got[0], [0.5 ** 100, 1.0, 0.0], rtol=1e-4, atol=1e-35)
    assert not got[1].any()
    for temperature in (0.01, 0.5, 4.0):
        with tf.GradientTape() as tape:
            tape.watch(graphs)
            loss = tf.reduce_sum(ops.sharpen_graphs(graphs, temperature) * [[1.0, -2.0, 3.0]])
        assert np.isfinite(tape.gradient(loss, graphs).numpy()).all()


@pytest.mark.parametrize("temperature", [0, -1.0, float("inf"), "warm"])
def test_sharpen_graphs_rejects_a_temperature_not_above_zero(temperature):
    with pytest.raises(ValueError, match="temperature must be"):
        ops.sharpen_graphs(np.ones((2, 2), np.float32), temperature)
