"""Tests of GraphPredictor: Eq. 1 against NumPy, masks, causality, padding; the layer harness
(serialization, bfloat16, XLA)."""

import keras
import numpy as np
import pytest

from _references import np_entmax15
from glomo_tf import CoupledGraphPredictor, GraphPredictor
from glomo_tf.layers import LiveRowHinge, graph_predictor
from layer_harness import MaskCheck, run_layer_test

VOCAB, D, L, K, H, T = 30, 8, 2, 2, 4, 7
EPS_BN = 1e-5

IDS = np.array([[5, 3, 9, 1, 7, 2, 4],
                [8, 2, 6, 11, 0, 0, 0],  # trailing padding
                [4, 0, 12, 7, 3, 0, 0]],  # a hole in the middle, then padding
               np.int32)


def make_predictor(**kwargs):
    config = dict(vocabulary_size=VOCAB, hidden_dim=D, num_layers=L, num_heads=K, head_dim=H,
                  conv_layers=2, kernel_size=3)
    config.update(kwargs)
    return graph_predictor(**config)


def randomize(layer, rng):
    """Non-trivial values for every weight, BN moving statistics and biases included."""
    layer.embeddings.assign(rng.normal(size=layer.embeddings.shape).astype("float32"))
    for i in range(layer.conv_layers):
        shape = layer.encoder.moving_means[i].shape
        layer.encoder.gammas[i].assign(rng.uniform(0.5, 1.5, shape).astype("float32"))
        layer.encoder.betas[i].assign(rng.normal(0, 0.3, shape).astype("float32"))
        layer.encoder.moving_means[i].assign(rng.normal(0, 0.3, shape).astype("float32"))
        layer.encoder.moving_variances[i].assign(rng.uniform(0.5, 2.0, shape).astype("float32"))
    layer.scorer.query_bias.assign(rng.normal(0, 0.3, layer.scorer.query_bias.shape).astype("float32"))
    layer.scorer.key_bias.assign(rng.normal(0, 0.3, layer.scorer.key_bias.shape).astype("float32"))
    if layer.normalization in ("entmax15", "entmax"):
        return  # no threshold weights: entmax solves each row's threshold
    layer.scorer.threshold_bias.assign(rng.normal(0, 0.3, layer.scorer.threshold_bias.shape).astype("float32"))
    if layer.threshold == "query":
        layer.scorer.threshold_kernel.assign(
            rng.normal(0, 0.3, layer.scorer.threshold_kernel.shape).astype("float32"))


def built_predictor(rng, **kwargs):
    layer = make_predictor(**kwargs)
    layer(IDS)
    randomize(layer, rng)
    return layer


# ---------------------------------------------------------------------------- NumPy reference
def np_causal_cnn(x, mask, kernels, bn, training, k):
    """An ordinary causal CNN over ``x [B, T, d]``: [zero padding -> conv -> BN -> ReLU] x layers.

    Window index ``j`` at time ``t`` reads ``x_{t-k+1+j}``; ``bn`` holds per-layer
    ``(gamma, beta, moving_mean, moving_var)``. In training mode the statistics are the mean and
    (biased) variance over the real positions of the batch.
    """
    B, T_, d = x.shape
    for i, W in enumerate(kernels):
        x = x * mask[:, :, None]
        padded = np.concatenate([np.zeros((B, k - 1, d)), x], axis=1)
        windows = np.zeros((B, T_, k * d))
        for t in range(T_):
            for j in range(k):
                windows[:, t, j * d:(j + 1) * d] = padded[:, t + j]  # x_{t-k+1+j}
        y = windows @ W
        gamma, beta, mean, var = bn[i]
        if training:
            real = y[mask > 0]
            mean, var = real.mean(0), real.var(0)
        x = np.maximum((y - mean) / np.sqrt(var + EPS_BN) * gamma + beta, 0.0)
    return x


def np_causal_graphs(queries, keys, mask, wq, bq, wk, bk, thr_kernel, thr_bias, normalization,
                     best=None):
    """Eq. 1 with admissible sources ``s < t`` and ``mask[s]``: ``[B, L, K, T, T]``.

    ``best``, when given, is a ``[B, L, K, T]`` array (NaN-filled) that receives each row's best
    thresholded score ``max_s q_t . k_s - b_t`` over its admissible sources.
    """
    B, T_, _ = queries.shape
    out = np.zeros((B, L, K, T_, T_))
    for b in range(B):
        for layer in range(L):
            for head in range(K):
                q = queries[b] @ wq[:, layer, head] + bq[layer, head]  # [T, h]
                kk = keys[b] @ wk[:, layer, head] + bk[layer, head]
                if thr_kernel is None:
                    thr = np.full(T_, thr_bias[layer])
                else:
                    thr = q @ thr_kernel[layer] + thr_bias[layer]
                for t in range(T_):
                    ok = np.array([s < t and mask[b, s] > 0 for s in range(T_)])
                    if not ok.any():
                        continue
                    score = kk @ q[t] - thr[t]
                    if best is not None:
                        best[b, layer, head, t] = score[ok].max()
                    if normalization == "squared_relu":
                        w = np.where(ok, np.maximum(score, 0.0) ** 2, 0.0)
                    elif normalization == "entmax15":  # the threshold is solved, not learned
                        w = np_entmax15(np.where(ok, kk @ q[t], -np.inf))
                    else:
                        w = np.where(ok, np.exp(score - score[ok].max()), 0.0)
                    if w.sum() > 0:
                        out[b, layer, head, t] = w / w.sum()
    return out


def np_predictor(layer, ids, training=False, best=None):
    """The whole predictor in NumPy; the backward direction reads the reversed sequence with an
    ordinary causal network and its graphs are flipped back on both time axes (paper/reference).
    ``best``: an empty list that receives each direction's ``[B, L, K, T]`` best row scores."""
    E = layer.embeddings.numpy().astype(np.float64)
    kernels = [w.numpy().astype(np.float64) for w in layer.encoder.kernels]
    bn = [[w.numpy().astype(np.float64)[:, 0, 0] for w in ws]
          for ws in zip(layer.encoder.gammas, layer.encoder.betas, layer.encoder.moving_means, layer.encoder.moving_variances)]
    wq, bq = layer.scorer.query_kernel.numpy(), layer.scorer.query_bias.numpy()[0, :, :, :, 0]
    wk, bk = layer.scorer.key_kernel.numpy(), layer.scorer.key_bias.numpy()[0, :, :, :, 0]
    learned = layer.normalization != "entmax15"
    thr_kernel = layer.scorer.threshold_kernel.numpy() if learned and layer.threshold == "query" else None
    thr_bias = layer.scorer.threshold_bias.numpy() if learned else np.zeros((2, L))
    graphs = []
    for z, (key_stack, query_stack) in enumerate([(0, 1), (2, 3)]):
        seq = ids if z == 0 else ids[:, ::-1]  # backward: reverse the sequence (and the mask)
        mask = (seq != 0).astype(np.float64)
        x = E[seq]

        def cnn(stack):
            return np_causal_cnn(x, mask, [W[stack] for W in kernels],
                                 [[p[stack] for p in params] for params in bn], training,
                                 layer.kernel_size)

        row_best = np.full((len(ids), L, K, ids.shape[1]), np.nan)
        g = np_causal_graphs(cnn(query_stack), cnn(key_stack), mask, wq[z], bq[z], wk[z], bk[z],
                             None if thr_kernel is None else thr_kernel[z], thr_bias[z],
                             layer.normalization, best=row_best)
        if best is not None:
            best.append(row_best if z == 0 else row_best[..., ::-1])
        graphs.append(g if z == 0 else g[..., ::-1, ::-1])  # flip back on both T axes
    return np.stack(graphs, axis=1)


# ---------------------------------------------------------------------------- Eq. 1
@pytest.mark.parametrize("threshold,normalization,conv_layers", [
    ("query", "squared_relu", 2),
    ("scalar", "squared_relu", 1),
    ("query", "softmax", 2),
    ("scalar", "softmax", 0),
    ("query", "entmax15", 2),
])
def test_eq1_matches_numpy_reference(threshold, normalization, conv_layers, rng):
    layer = built_predictor(rng, threshold=threshold, normalization=normalization,
                            conv_layers=conv_layers)
    out = layer(IDS, training=False)
    got = out["graphs"].numpy()
    assert got.shape == (3, 2, L, K, T, T)
    np.testing.assert_array_equal(out["padding_mask"].numpy(), IDS != 0)
    expected = np_predictor(layer, IDS)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    # Not vacuous: both directions have rows that carry weight and are not one-hot.
    for z in range(2):
        sums = expected[:, z].sum(-1)
        assert (sums > 0.5).sum() >= 10
        assert ((expected[:, z] > 0.01) & (expected[:, z] < 0.99)).any()


def test_eq1_matches_numpy_reference_in_training_mode(rng):
    """Training mode uses the masked batch statistics (and updates the moving averages)."""
    layer = built_predictor(rng, conv_layers=1)
    before_mean = layer.encoder.moving_means[0].numpy().copy()
    before_var = layer.encoder.moving_variances[0].numpy().copy()
    expected = np_predictor(layer, IDS, training=True)
    got = layer(IDS, training=True)["graphs"].numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    # Moving statistics: momentum * old + (1 - momentum) * masked batch statistic.
    E = layer.embeddings.numpy().astype(np.float64)
    W = layer.encoder.kernels[0].numpy().astype(np.float64)
    for stack in range(4):
        seq = IDS if stack < 2 else IDS[:, ::-1]
        mask = (seq != 0).astype(np.float64)
        x = E[seq] * mask[:, :, None]
        padded = np.concatenate([np.zeros((3, 2, D)), x], axis=1)
        windows = np.concatenate([padded[:, j:j + T] for j in range(3)], axis=-1)
        real = (windows @ W[stack])[mask > 0]
        m = layer.encoder.momentum
        np.testing.assert_allclose(layer.encoder.moving_means[0].numpy()[stack, 0, 0],
                                   m * before_mean[stack, 0, 0] + (1 - m) * real.mean(0),
                                   rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(layer.encoder.moving_variances[0].numpy()[stack, 0, 0],
                                   m * before_var[stack, 0, 0] + (1 - m) * real.var(0),
                                   rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------- structure
@pytest.mark.parametrize("normalization", ["squared_relu", "softmax", "entmax15"])
@pytest.mark.parametrize("coupled", [False, True])
def test_graph_structure(normalization, coupled, rng):
    layer = built_predictor(rng, normalization=normalization, coupled=coupled)
    g = layer(IDS)["graphs"].numpy()
    assert np.all(g >= 0)
    sums = g.sum(-1)
    assert np.all(np.isclose(sums, 1.0, atol=1e-5) | (sums == 0.0))
    assert (np.isclose(sums, 1.0, atol=1e-5)).sum() > 20
    upper = np.triu(np.ones((T, T), bool))  # s >= t
    lower = np.tril(np.ones((T, T), bool))  # s <= t
    assert np.all(g[:, 0][..., upper] == 0.0)
    assert np.all(g[:, 1][..., lower] == 0.0)
    pad = IDS == 0
    for b in range(len(IDS)):
        assert np.all(g[b][..., pad[b]] == 0.0)
    # The first forward row and last backward row have no admissible source.
    assert np.all(g[:, 0, ..., 0, :] == 0.0) and np.all(g[:, 1, ..., -1, :] == 0.0)
    if normalization in ("softmax", "entmax15"):
        # Rows with any admissible source always sum to one.
        np.testing.assert_allclose(g[0, 0, ..., 1:, :].sum(-1), 1.0, atol=1e-5)


# ---------------------------------------------------------------------------- causality
def perturbed(ids, position):
    changed = ids.copy()
    changed[:, position] = np.where(ids[:, position] == 0, 0, (ids[:, position] % (VOCAB - 1)) + 1)
    changed[0, position] = 17 if ids[0, position] != 17 else 18
    return changed


@pytest.mark.parametrize("coupled", [False, True])
@pytest.mark.parametrize("position", [2, 4])
def test_causality_by_perturbation(coupled, position, rng):
    layer = built_predictor(rng, coupled=coupled)
    ids = IDS[:1].copy()
    changed = perturbed(ids, position)
    assert not np.array_equal(ids, changed)
    a, b = layer(ids), layer(changed)
    ga, gb = a["graphs"].numpy(), b["graphs"].numpy()
    # Forward rows t < t' and backward rows t > t' never see unit t'.
    np.testing.assert_allclose(ga[:, 0, ..., :position, :], gb[:, 0, ..., :position, :],
                               rtol=0, atol=1e-7)
    np.testing.assert_allclose(ga[:, 1, ..., position + 1:, :], gb[:, 1, ..., position + 1:, :],
                               rtol=0, atol=1e-7)
    # ... but rows on the other side do (so this test can fail).
    assert np.abs(ga[:, 0, ..., position + 1:, :] - gb[:, 0, ..., position + 1:, :]).max() > 1e-4
    assert np.abs(ga[:, 1, ..., :position, :] - gb[:, 1, ..., :position, :]).max() > 1e-4
    if coupled:
        fa, fb = a["features"].numpy(), b["features"].numpy()
        assert fa.shape == (1, 2, L, T, D)
        np.testing.assert_allclose(fa[:, 0, :, :position], fb[:, 0, :, :position],
                                   rtol=0, atol=1e-6)
        np.testing.assert_allclose(fa[:, 1, :, position + 1:], fb[:, 1, :, position + 1:],
                                   rtol=0, atol=1e-6)
        assert np.abs(fa[:, 0, :, position:] - fb[:, 0, :, position:]).max() > 1e-4


# ---------------------------------------------------------------------------- padding
@pytest.mark.parametrize("coupled", [False, True])
@pytest.mark.parametrize("training", [False, True])
def test_extra_trailing_padding_changes_nothing(coupled, training, rng):
    layer = built_predictor(rng, coupled=coupled, dropout=0.0)
    longer = np.concatenate([IDS, np.zeros((len(IDS), 3), np.int32)], axis=1)
    short = layer(IDS, training=training)
    long = layer(longer, training=training)
    gs, gl = short["graphs"].numpy(), long["graphs"].numpy()
    assert gl.shape[-1] == T + 3
    real = IDS != 0
    for b in range(len(IDS)):
        rows = np.flatnonzero(real[b])
        np.testing.assert_allclose(gl[b][..., rows, :T][..., real[b]],
                                   gs[b][..., rows, :][..., real[b]], rtol=1e-5, atol=1e-6)
        # The added columns are padding, hence zero.
        assert np.all(gl[b][..., T:] == 0.0)
    if coupled:
        fs, fl = short["features"].numpy(), long["features"].numpy()
        for b in range(len(IDS)):
            np.testing.assert_allclose(fl[b, :, :, :T][:, :, real[b]], fs[b][:, :, real[b]],
                                       rtol=1e-5, atol=1e-5)


def test_training_mode_statistics_differ_from_moving_statistics(rng):
    """Guards the training-mode padding test: training mode really uses other statistics."""
    layer = built_predictor(rng)
    a = layer(IDS, training=False)["graphs"].numpy()
    b = layer(IDS, training=True)["graphs"].numpy()
    assert np.abs(a - b).max() > 1e-3


def test_dropout_only_in_training(rng):
    layer = built_predictor(rng, dropout=0.5)
    a = layer(IDS, training=False)["graphs"].numpy()
    np.testing.assert_allclose(a, np_predictor(layer, IDS), rtol=1e-4, atol=1e-5)
    b = layer(IDS, training=True)["graphs"].numpy()
    c = layer(IDS, training=True)["graphs"].numpy()
    assert np.abs(b - c).max() > 1e-4  # fresh dropout masks


# ---------------------------------------------------------------------------- harness
def with_trailing_padding(args, kwargs):
    """The masking contract: three more padding ids at the end change nothing."""
    (ids,) = args
    return (np.concatenate([ids, np.zeros((len(ids), 3), ids.dtype)], axis=1),), kwargs


def at_real_positions(outputs):
    """Graph rows and columns, and features, of IDS's real units (the first T steps)."""
    real = IDS != 0
    pairs = real[:, None, None, None, :, None] & real[:, None, None, None, None, :]
    kept = {"graphs": outputs["graphs"][..., :T, :T] * pairs,
            "padding_mask": outputs["padding_mask"][:, :T]}
    if "features" in outputs:
        kept["features"] = outputs["features"][:, :, :, :T] * real[:, None, None, :, None]
    return kept


HARNESS_CONFIGS = {
    "decoupled": dict(),
    "decoupled_scalar_softmax": dict(threshold="scalar", normalization="softmax", dropout=0.25,
                                     kernel_initializer=keras.initializers.GlorotUniform(),
                                     kernel_regularizer=keras.regularizers.L2(1e-3),
                                     embeddings_regularizer=keras.regularizers.L1(1e-3)),
    "coupled_scalar_softmax_residual": dict(coupled=True, threshold="scalar",
                                            normalization="softmax", composition="residual",
                                            dropout=0.25),
    "coupled_projected": dict(coupled=True, composition="projected"),
    "entmax15": dict(normalization="entmax15", live_row_regularizer=LiveRowHinge(1.0)),
    "squared_relu_live_rows": dict(live_row_regularizer=LiveRowHinge(0.5, 0.2),
                                   threshold_initializer=keras.initializers.Constant(-0.5)),
    "coupled_entmax15_gru": dict(normalization="entmax15", coupled=True,
                                 live_row_regularizer=LiveRowHinge(1.0)),
}


@pytest.mark.parametrize("name", list(HARNESS_CONFIGS))
def test_layer_harness(name, tmp_path):
    """Config and .keras round trips, mixed_bfloat16, padding and XLA for each kind of predictor
    (threshold weights or none, decoupled or coupled with each composer and its sub-layers)."""
    kwargs = dict(HARNESS_CONFIGS[name])
    coupled = kwargs.pop("coupled", False)
    outputs = ["features", "graphs", "padding_mask"] if coupled else ["graphs", "padding_mask"]
    run_layer_test(
        CoupledGraphPredictor if coupled else GraphPredictor,
        dict(vocabulary_size=VOCAB, hidden_dim=D, num_layers=L, num_heads=K, head_dim=H,
             conv_layers=2, kernel_size=3, **kwargs),
        (IDS,), tmp_path=tmp_path,
        input_shapes=[(None,)],  # token ids of any length, as in a downstream model
        # Graphs are computed in float32 and cast back; the padding mask stays bool.
        bfloat16_dtypes={key: "bool" if key == "padding_mask" else "bfloat16" for key in outputs},
        mask_check=MaskCheck(perturb=with_trailing_padding, real=at_real_positions))


def test_compute_output_shape():
    layer = make_predictor(coupled=True)
    shapes = layer.compute_output_shape((4, 9))
    assert shapes["graphs"] == (4, 2, L, K, 9, 9)
    assert shapes["padding_mask"] == (4, 9)
    assert shapes["features"] == (4, 2, L, 9, D)
    out = layer(np.ones((4, 9), np.int32))
    assert tuple(out["graphs"].shape) == shapes["graphs"]
    assert tuple(out["features"].shape) == shapes["features"]


# ---------------------------------------------------------------------------- errors
def test_float_ids_raise_type_error():
    layer = make_predictor()
    with pytest.raises(TypeError, match="integer token ids"):
        layer(IDS.astype("float32"))


@pytest.mark.parametrize("kwargs,message", [
    (dict(threshold="vector"), "threshold must be one of"),
    (dict(normalization="sparsemax"), "normalization must be one of"),
    (dict(composition="lstm"), "composition must be one of"),
    (dict(hidden_dim=0), "hidden_dim must be a positive integer"),
    (dict(vocabulary_size=-3), "vocabulary_size must be a positive integer"),
    (dict(num_layers=0), "num_layers must be a positive integer"),
    (dict(num_heads=0), "num_heads must be a positive integer"),
    (dict(kernel_size=0), "kernel_size must be a positive integer"),
    (dict(head_dim=-2), "head_dim must be a positive integer"),
    (dict(hidden_dim=2.5), "hidden_dim must be a positive integer"),
    (dict(conv_layers=-1), "conv_layers must be >= 0"),
    (dict(dropout=1.0), "dropout must be in"),
    (dict(coupled=True, hidden_dim=9, num_heads=2), "divisible by num_heads"),
])
def test_bad_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_predictor(**kwargs)


def test_numpy_integer_sizes_are_accepted():
    layer = make_predictor(hidden_dim=np.int64(D), num_heads=np.int32(K))
    assert layer.get_config()["hidden_dim"] == D and isinstance(layer.hidden_dim, int)
    assert layer(IDS)["graphs"].shape == (3, 2, L, K, T, T)


def test_fresh_predictor_starts_with_dense_graphs():
    """The threshold bias starts at -1, so every row with an admissible source has weight at the
    start (no direction begins dead); with initial_threshold=0 about half the scores are cut."""
    ids = np.random.default_rng(3).integers(1, 30, (4, 12)).astype("int32")
    ids[1, 9:] = 0
    layer = GraphPredictor(30, 16, num_layers=2, num_heads=2, conv_layers=1)
    graphs = layer(ids, training=True)["graphs"].numpy()
    np.testing.assert_array_equal(layer.scorer.threshold_bias.numpy(), -1.0)
    real = ids != 0
    for z in range(2):
        for b in range(4):
            for t in range(12):
                side = np.arange(12) < t if z == 0 else np.arange(12) > t
                if real[b, t] and (side & real[b]).any():
                    assert np.all(graphs[b, z, :, :, t].sum(-1) > 0.999)
    zero = graph_predictor(30, 16, num_layers=2, num_heads=2, conv_layers=1, initial_threshold=0.0)
    zero.build((None, None))
    assert zero.get_config()["threshold_initializer"]["config"]["value"] == 0.0
    np.testing.assert_array_equal(zero.scorer.threshold_bias.numpy(), 0.0)


# ---------------------------------------------------------------------------- live rows
@pytest.mark.parametrize("threshold,coupled", [("query", False), ("scalar", False),
                                               ("query", True)])
def test_live_row_loss_matches_numpy_hinge(threshold, coupled, rng):
    """training=True adds weight * mean over rows with a source of relu(margin - best score)."""
    weight, margin = 0.7, 0.4
    layer = built_predictor(rng, threshold=threshold, coupled=coupled, live_row_weight=weight,
                            live_row_margin=margin)
    layer(IDS, training=True)
    assert len(layer.losses) == (L if coupled else 1)  # one term per graph computation
    got = sum(float(v) for v in layer.losses)
    if coupled:
        # Layer l's graphs read the composed features: check positivity and the sign of the
        # terms only; the decoupled cases check the value against NumPy.
        assert got >= 0
        return
    best = []
    np_predictor(layer, IDS, training=True, best=best)
    best = np.stack(best, axis=1)  # [B, 2, L, K, T]
    has = ~np.isnan(best)
    hinge = np.maximum(margin - np.where(has, best, 0.0), 0.0)[has]
    assert 0 < (hinge > 0).mean() < 1  # this draw has dead-ish and live rows both
    np.testing.assert_allclose(got, weight * hinge.mean(), rtol=1e-4, atol=1e-6)


def test_no_live_row_loss_at_inference_or_with_zero_weight(rng):
    layer = built_predictor(rng, live_row_weight=1.0)
    layer(IDS, training=False)
    assert layer.losses == []
    off = built_predictor(rng)
    off(IDS, training=True)
    assert off.losses == [] and off.get_config()["live_row_regularizer"] is None
    with pytest.raises(ValueError, match="live_row_weight and live_row_margin must be >= 0"):
        make_predictor(live_row_weight=-1.0)


@pytest.mark.parametrize("coupled", [False, True])
def test_entmax15_predictor_solves_thresholds(coupled, rng):
    """No threshold weights and no live-row hinge (rows never die); sparse rows that sum to one.
    (XLA and the round trips of entmax15 predictors: test_layer_harness.)"""
    layer = built_predictor(rng, normalization="entmax15", coupled=coupled, live_row_weight=1.0)
    names = [w.name for w in layer.weights]
    assert not [n for n in names if "threshold" in n], names
    graphs = layer(IDS, training=True)["graphs"].numpy()
    assert layer.losses == []
    sums = graphs.sum(-1)
    has_source = np.isclose(sums, 1.0, atol=1e-5)
    assert np.all(has_source | (sums == 0.0)) and has_source.sum() > 20
    assert (graphs == 0.0).sum() > graphs.size // 2  # sparse, beyond the masks


def test_entmax_alpha_predictor_sits_between_softmax_and_entmax15(rng):
    """normalization="entmax" with alpha 1.25: no threshold weights, rows sum to one, more
    sources per row than entmax15's and fewer than softmax's on the same weights; the alpha
    survives get_config, and an alpha outside (1, 2] is refused when the layer is made."""
    def sources(normalization, **kwargs):
        layer = built_predictor(np.random.default_rng(7), normalization=normalization, **kwargs)
        for kernel in (layer.scorer.query_kernel, layer.scorer.key_kernel):  # scores wide enough to cut sources
            kernel.assign(kernel * 20.0)
        graphs = layer(IDS, training=False)["graphs"].numpy()
        return layer, graphs, np.count_nonzero(graphs)

    layer, graphs, kept = sources("entmax", entmax_alpha=1.25)
    assert not [w.name for w in layer.weights if "threshold" in w.name]
    sums = graphs.sum(-1)
    assert np.all(np.isclose(sums, 1.0, atol=1e-5) | (sums == 0.0))
    assert sources("entmax15")[2] < kept < sources("softmax")[2]
    config = layer.get_config()
    assert config["normalization"] == "entmax" and config["entmax_alpha"] == 1.25
    with pytest.raises(ValueError, match=r"entmax_alpha must be in \(1, 2\]"):
        make_predictor(normalization="entmax", entmax_alpha=0.5)


def test_live_row_loss_revives_graphs_that_a_high_threshold_killed(rng):
    """Every score under the threshold: the graphs are all zero and no loss on them has a gradient.
    The live-row hinge alone brings the rows back."""
    import tensorflow as tf

    from glomo_tf import ops
    layer = built_predictor(rng, threshold="scalar", live_row_weight=1.0, live_row_margin=0.1)
    layer.scorer.threshold_bias.assign(np.full(layer.scorer.threshold_bias.shape, 50.0, "float32"))
    outputs = layer(IDS, training=False)
    np.testing.assert_array_equal(outputs["graphs"].numpy(), 0.0)
    np.testing.assert_array_equal(ops.live_rows(outputs["graphs"], outputs["padding_mask"]), 0.0)
    with tf.GradientTape() as tape:
        dead = tf.reduce_sum(layer(IDS, training=True)["graphs"] * rng.normal(size=(1, 2, L, K, T, T)))
    grads = tape.gradient(dead, layer.trainable_variables)
    assert all(g is None or not np.any(tf.convert_to_tensor(g).numpy()) for g in grads)

    optimizer = keras.optimizers.SGD(0.5)
    optimizer.build(layer.trainable_variables)

    @tf.function  # the same 200 SGD steps as eagerly, in a second instead of about twelve
    def step():
        with tf.GradientTape() as tape:
            layer(IDS, training=True)
            loss = tf.add_n(layer.losses)
        optimizer.apply(tape.gradient(loss, layer.trainable_variables), layer.trainable_variables)

    for _ in range(200):
        step()
    outputs = layer(IDS, training=False)
    live = ops.live_rows(outputs["graphs"], outputs["padding_mask"]).numpy()
    assert live.min() > 0.9, live


def test_live_rows_counts_rows_with_weight():
    """ops.live_rows on hand-made graphs: which rows count (real receivers with a source) and which
    are live (sum ~1)."""
    from glomo_tf import ops
    T_ = 4
    mask = np.array([[True, True, True, False]])
    graphs = np.zeros((1, 2, 1, 2, T_, T_), "float32")
    graphs[0, 0, 0, 0, 1, 0] = 1.0  # forward head 0: rows 1 live, 2 dead (rows 0, 3 do not count)
    graphs[0, 0, 0, 1, 1, 0] = graphs[0, 0, 0, 1, 2, 1] = 1.0  # head 1: both live
    graphs[0, 0, 0, 1, 3, 2] = 1.0  # a padded receiver: ignored
    graphs[0, 1, 0, 0, 0, 1] = 0.5  # backward head 0: row 0 half-weighted (dead), row 1 dead
    live = ops.live_rows(graphs, mask).numpy()
    np.testing.assert_allclose(live, [[[0.5, 1.0]], [[0.0, 0.0]]])


def test_graphs_from_features_is_what_call_computes_after_its_cnns():
    """The public Eq. 1 on given features: the predictor's own key/query stacks in give its
    call's graphs; a coupled predictor refuses."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(3)
    predictor = GraphPredictor(vocabulary_size=20, hidden_dim=8, num_layers=2, num_heads=2,
                               conv_layers=1)
    ids = np.array([[3, 4, 5, 6, 0], [7, 8, 9, 0, 0]], "int32")
    expected = predictor(ids)["graphs"].numpy()
    padding = ids != 0
    stacks = predictor.encoder(predictor.embed(ids), padding)
    keys = tf.stack([stacks[0], stacks[2]], axis=1)
    queries = tf.stack([stacks[1], stacks[3]], axis=1)
    got = predictor.graphs_from_features(queries, keys, padding).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-6)
    coupled = graph_predictor(vocabulary_size=20, hidden_dim=8, num_layers=1, num_heads=2,
                             coupled=True)
    with pytest.raises(ValueError, match="graphs_from_features needs a GraphPredictor"):
        coupled.graphs_from_features(queries, keys, padding)


@pytest.mark.parametrize("normalization", ["squared_relu", "entmax15"])
def test_fused_normalization_in_inference_gives_the_same_graphs(normalization):
    """``fused_normalization=True`` (GlomoTransfer's online path) normalises in one XLA cluster:
    the graphs of the op-by-op path up to float round-off, rows still summing to 1 or 0."""
    predictor = GraphPredictor(vocabulary_size=30, hidden_dim=8, num_layers=2, num_heads=2,
                               conv_layers=1, normalization=normalization)
    ids = np.array([[3, 4, 5, 6, 7, 0, 0], [8, 9, 10, 11, 12, 13, 14]], "int32")
    plain = predictor(ids)["graphs"].numpy()
    fused = predictor(ids, fused_normalization=True)["graphs"].numpy()
    np.testing.assert_allclose(fused, plain, atol=1e-6)
    sums = fused.sum(-1)
    assert np.all((np.abs(sums - 1) < 1e-5) | (sums == 0))
