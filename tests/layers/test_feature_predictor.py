"""Tests of FeaturePredictor (Eq. 2) against a NumPy implementation, causality; the layer harness
(serialization, bfloat16, padding mask, XLA)."""

import numpy as np
import pytest
import tensorflow as tf

from glomo_tf import FeaturePredictor, GraphPredictor
from layer_harness import MaskCheck, run_layer_test

B, L, K, T, D = 2, 2, 2, 6, 8
C = D // K  # features per head


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def random_graphs(rng):
    """Row-stochastic causal / anti-causal graphs ``[B, 2, L, K, T, T]`` (first rows empty)."""
    g = rng.uniform(size=(B, 2, L, K, T, T))
    g[:, 0] *= np.tril(np.ones((T, T)), -1)
    g[:, 1] *= np.triu(np.ones((T, T)), 1)
    sums = g.sum(-1, keepdims=True)
    return np.where(sums > 0, g / np.where(sums > 0, sums, 1.0), 0.0).astype("float32")


def randomize(layer, rng):
    for w in layer.weights:
        w.assign(rng.normal(0, 0.4, w.shape).astype("float32"))


def np_feature_predictor(layer, features, graphs, padding_mask=None):
    """Eq. 2 written out: per direction and layer, head ``k`` of the message is
    ``sum_s G_k[t, s] F_s`` restricted to head ``k``'s feature columns; ``v`` is the GRU
    (reset applied after the recurrent matmul) or the residual linear map on ``[m * F ; m]``."""
    features = np.asarray(features, np.float64)
    if features.ndim == 3:
        features = np.stack([features, features], axis=1)
    weights = {w.name: w.numpy().astype(np.float64) for w in layer.weights}
    out = np.zeros((features.shape[0], 2, graphs.shape[2], features.shape[2], D))
    for b in range(features.shape[0]):
        for z in range(2):
            F = features[b, z]
            for layer_index in range(graphs.shape[2]):
                values = F @ weights["value_kernel"][z] if layer.composition == "projected" else F
                m = np.zeros_like(F)
                for k in range(K):
                    cols = slice(k * C, (k + 1) * C)
                    m[:, cols] = graphs[b, z, layer_index, k].astype(np.float64) @ values[:, cols]
                x = np.concatenate([m * F, m], axis=-1)
                if layer.composition == "projected":  # LayerNorm(F + W_o m + b)
                    y = F + m @ weights["output_kernel"][z] + weights["bias"][0, z, 0]
                    y = (y - y.mean(-1, keepdims=True)) / np.sqrt(y.var(-1, keepdims=True) + 1e-5)
                    F = y * weights["gamma"] + weights["beta"]
                elif layer.composition == "gru":
                    gx = x @ weights["input_kernel"][z] + weights["input_bias"][0, z, 0]
                    gh = F @ weights["recurrent_kernel"][z] + weights["recurrent_bias"][0, z, 0]
                    r = sigmoid(gx[:, :D] + gh[:, :D])
                    u = sigmoid(gx[:, D:2 * D] + gh[:, D:2 * D])
                    n = np.tanh(gx[:, 2 * D:] + r * gh[:, 2 * D:])
                    F = u * F + (1.0 - u) * n
                else:
                    F = F + x @ weights["kernel"][z] + weights["bias"][0, z, 0]
                if padding_mask is not None:
                    F = F * padding_mask[b][:, None]
                out[b, z, layer_index] = F
    return out


@pytest.mark.parametrize("composition", ["gru", "residual", "projected"])
@pytest.mark.parametrize("per_direction", [False, True])
def test_composition_matches_numpy(composition, per_direction, rng):
    layer = FeaturePredictor(D, K, composition=composition)
    shape = (B, 2, T, D) if per_direction else (B, T, D)
    features = rng.normal(size=shape).astype("float32")
    graphs = random_graphs(rng)
    layer(features, graphs)
    randomize(layer, rng)
    got = layer(features, graphs).numpy()
    assert got.shape == (B, 2, L, T, D)
    expected = np_feature_predictor(layer, features, graphs)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    # The two directions use their own cells and graphs.
    assert np.abs(expected[:, 0] - expected[:, 1]).max() > 1e-2
    # Compiled by XLA, the messages take their einsum form (outside it, batched products).
    compiled = tf.function(lambda f, g: layer(f, g), jit_compile=True)
    np.testing.assert_allclose(compiled(features, graphs).numpy(), expected, rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("composition", ["gru", "residual", "projected"])
def test_top_features_are_the_last_layer_at_each_directions_positions(composition, rng):
    """top_features composes the top layer at the given rows only: the NumPy Eq. 2's last layer
    at positions[z] of direction z (repeats, padded positions and unsorted rows included)."""
    layer = FeaturePredictor(D, K, composition=composition)
    features = rng.normal(size=(B, T, D)).astype("float32")
    graphs = random_graphs(rng)
    mask = np.ones((B, T), bool)
    mask[1, 4:] = False
    positions = np.array([[5, 0, 3, 3], [1, 4, 2, 5]], "int32")  # [2, S]
    layer(features, graphs)
    randomize(layer, rng)
    got = layer.top_features(features, graphs, positions, padding_mask=mask).numpy()
    assert got.shape == (B, 2, positions.shape[1], D)
    expected = np_feature_predictor(layer, features, graphs, mask.astype(np.float64))[:, :, -1]
    for z in range(2):
        np.testing.assert_allclose(got[:, z], expected[:, z, positions[z]], rtol=1e-4, atol=1e-5)
    assert np.all(got[1, 1, 1] == 0.0)  # position 4 of the padded example
    np.testing.assert_allclose(  # the same rows as the layer's call, to float round-off
        got[:, 0], layer(features, graphs, mask).numpy()[:, 0, -1][:, positions[0]], atol=1e-6)


@pytest.mark.parametrize("composition", ["gru", "residual", "projected"])
def test_padding_mask_zeroes_padded_positions(composition, rng):
    layer = FeaturePredictor(D, K, composition=composition)
    features = rng.normal(size=(B, T, D)).astype("float32")
    graphs = random_graphs(rng)
    mask = np.ones((B, T), bool)
    mask[1, 4:] = False
    mask[0, 2] = False
    layer(features, graphs)
    randomize(layer, rng)
    got = layer(features, graphs, padding_mask=mask).numpy()
    assert np.all(got[0, :, :, 2] == 0.0) and np.all(got[1, :, :, 4:] == 0.0)
    expected = np_feature_predictor(layer, features, graphs, mask.astype(np.float64))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    # Zeroing after each layer feeds the next layer: real positions differ from the unmasked run.
    unmasked = layer(features, graphs).numpy()
    assert np.abs(unmasked[0, 0, 1, 3:] - got[0, 0, 1, 3:]).max() > 1e-3


def test_heads_propagate_along_their_own_graph(rng):
    """Planted structure: head 0 copies the previous unit, head 1 the first unit."""
    layer = FeaturePredictor(D, K, composition="residual")
    features = rng.normal(size=(1, T, D)).astype("float32")
    graphs = np.zeros((1, 2, 1, K, T, T), "float32")
    for t in range(1, T):
        graphs[0, 0, 0, 0, t, t - 1] = 1.0
        graphs[0, 0, 0, 1, t, 0] = 1.0
    layer(features, graphs)
    # With kernel = [0 ; I] (the message itself) and no bias: F' = F + m.
    kernel = np.zeros((2, 2 * D, D), "float32")
    kernel[:, D:] = np.eye(D)
    layer.kernel.assign(kernel)
    got = layer(features, graphs).numpy()[0, 0, 0]
    f = features[0]
    expected = f.copy()
    expected[1:, :C] += f[:-1, :C]
    expected[1:, C:] += f[0, C:]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("composition", ["gru", "residual", "projected"])
@pytest.mark.parametrize("position", [2, 4])
def test_causality_through_features(composition, position, rng):
    """Forward features at t < t' (backward at t > t') never see unit t'."""
    predictor = GraphPredictor(30, D, num_layers=L, num_heads=K, conv_layers=1)
    layer = FeaturePredictor(D, K, composition=composition)
    ids = np.array([[5, 3, 9, 1, 7, 2]], np.int32)
    changed = ids.copy()
    changed[0, position] = 21

    def run(token_ids):
        out = predictor(token_ids)
        return layer(predictor.embed(token_ids), out["graphs"], out["padding_mask"]).numpy()

    run(ids)
    randomize(layer, rng)
    predictor.scorer.threshold_bias.assign(np.full((2, L), -0.5, "float32"))  # dense enough graphs
    a, b = run(ids), run(changed)
    np.testing.assert_allclose(a[:, 0, :, :position], b[:, 0, :, :position], rtol=0, atol=1e-6)
    np.testing.assert_allclose(a[:, 1, :, position + 1:], b[:, 1, :, position + 1:],
                               rtol=0, atol=1e-6)
    # Later forward features (and earlier backward ones) do see it: the test can fail.
    assert np.abs(a[:, 0, -1, position + 1:] - b[:, 0, -1, position + 1:]).max() > 1e-4
    assert np.abs(a[:, 1, -1, :position] - b[:, 1, -1, :position]).max() > 1e-4


# ---------------------------------------------------------------------------- harness
PADDING = np.ones((B, T), bool)
PADDING[0, 2] = PADDING[1, 4:] = False  # a hole, and trailing padding


def garbage_at_padding(args, kwargs):
    """New features at padded positions and new graph rows for padded receivers; the graphs'
    columns of padded sources stay zero (as GraphPredictor's are)."""
    features, graphs = args
    time_mask = PADDING[:, None, :, None] if features.ndim == 4 else PADDING[:, :, None]
    graphs = np.where(PADDING[:, None, None, None, :, None], graphs, 0.3).astype("float32")
    return (np.where(time_mask, features, 5.0).astype("float32"), graphs), kwargs


def without_padding_mask(args, kwargs):
    return args, {k: v for k, v in kwargs.items() if k != "padding_mask"}


@pytest.mark.parametrize("composition,per_direction", [("gru", False), ("residual", True),
                                                       ("projected", False)])
def test_layer_harness(composition, per_direction, tmp_path, rng):
    """Config and .keras round trips, mixed_bfloat16, the padding mask and XLA, per composer."""
    shape = (B, 2, T, D) if per_direction else (B, T, D)
    features = rng.normal(size=shape).astype("float32")
    graphs = random_graphs(rng) * PADDING[:, None, None, None, None, :]
    run_layer_test(
        FeaturePredictor, dict(hidden_dim=D, num_heads=K, composition=composition),
        (features, graphs), dict(padding_mask=PADDING), tmp_path=tmp_path,
        # The padding mask zeroes padded positions' features after every layer: the whole
        # output is unchanged, and without the mask the garbage shows.
        mask_check=MaskCheck(perturb=garbage_at_padding, real=lambda outputs: outputs,
                             unmasked=without_padding_mask))


def test_compute_output_shape():
    layer = FeaturePredictor(D, K)
    assert layer.compute_output_shape((B, T, D), (B, 2, 3, K, T, T)) == (B, 2, 3, T, D)


# ---------------------------------------------------------------------------- errors
def test_bad_arguments():
    with pytest.raises(ValueError, match="composition must be one of"):
        FeaturePredictor(D, K, composition="lstm")
    with pytest.raises(ValueError, match="divisible by num_heads"):
        FeaturePredictor(9, 2)
    layer = FeaturePredictor(D, K)
    with pytest.raises(ValueError, match="expects features"):
        layer(np.zeros((B, T, D), "float32"), np.zeros((B, 2, K, T, T), "float32"))
