"""MaskedConv2D and GraphPredictor2D: the masks against NumPy, causality in raster order by
perturbation, the graphs' row contract, the pixel-unit helpers and the layer harness."""

import inspect

import numpy as np
import pytest
import tensorflow as tf

from glomo_tf import hparams
from glomo_tf.layers.graph_predictor_2d import GraphPredictor2D, image_units, units_image
from glomo_tf.layers.masked_conv_2d import MaskedConv2D, causal_kernel_mask
from layer_harness import run_layer_test

H, W, C = 3, 4, 2
T = H * W


def images(batch=2, height=H, width=W, channels=C, seed=0):
    return np.random.default_rng(seed).uniform(0, 1, (batch, height, width, channels)).astype(
        "float32")


def numpy_masked_conv(x, kernel, bias, mask):
    """The masked convolution written out: zero padding, one output pixel at a time."""
    batch, height, width, _ = x.shape
    k = kernel.shape[0]
    half = k // 2
    padded = np.pad(x, [(0, 0), (half, half), (half, half), (0, 0)])
    masked = kernel * mask[:, :, None, None]
    out = np.zeros((batch, height, width, kernel.shape[-1]), np.float64)
    for r in range(height):
        for c in range(width):
            window = padded[:, r:r + k, c:c + k, :]  # rows r-half..r+half of the image
            out[:, r, c] = np.einsum("bijc,ijcf->bf", window, masked) + bias
    return out


# ---------------------------------------------------------------------------- the masks
def test_kernel_masks_are_pixelcnns_a_and_b_and_their_mirror():
    forward_a = [[1, 1, 1], [1, 0, 0], [0, 0, 0]]
    forward_b = [[1, 1, 1], [1, 1, 0], [0, 0, 0]]
    backward_a = [[0, 0, 0], [0, 0, 1], [1, 1, 1]]
    backward_b = [[0, 0, 0], [0, 1, 1], [1, 1, 1]]
    np.testing.assert_array_equal(causal_kernel_mask(3, "A", "forward"), forward_a)
    np.testing.assert_array_equal(causal_kernel_mask(3, "B", "forward"), forward_b)
    np.testing.assert_array_equal(causal_kernel_mask(3, "A", "backward"), backward_a)
    np.testing.assert_array_equal(causal_kernel_mask(3, "B", "backward"), backward_b)
    # 5x5, mask A: the two rows above (10 taps) and two taps left of the centre.
    assert causal_kernel_mask(5, "A").sum() == 12


@pytest.mark.parametrize("mask_type", ["A", "B"])
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_masked_conv_matches_numpy(mask_type, direction):
    conv = MaskedConv2D(3, 3, mask_type, direction)
    x = images()
    conv.build(x.shape)
    rng = np.random.default_rng(1)
    kernel = rng.normal(size=conv.kernel.shape).astype("float32")
    bias = rng.normal(size=conv.bias.shape).astype("float32")
    conv.set_weights([kernel, bias])
    got = conv(x).numpy()
    want = numpy_masked_conv(x, kernel, bias, causal_kernel_mask(3, mask_type, direction))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def raster_index(r, c, width=W):
    return r * width + c


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_a_masked_stack_is_strictly_causal_in_raster_order(direction):
    layers = [MaskedConv2D(4, 3, "A", direction)] + [MaskedConv2D(4, 3, "B", direction)
                                                      for _ in range(2)]

    def stack(x):
        for layer in layers:
            x = tf.nn.relu(layer(x)) + 0.1 * layer(x)  # leaky: every tap passes a change
        return image_units(x).numpy()

    x = images(batch=1, height=5, width=5, seed=2)
    base = stack(x)
    for r, c in [(0, 0), (2, 2), (4, 1), (1, 4)]:
        changed = x.copy()
        changed[0, r, c] += 3.0
        moved = np.abs(stack(changed) - base).max(axis=-1)[0]  # [T]
        t_prime = raster_index(r, c, 5)
        order = np.arange(25)
        unseen = order <= t_prime if direction == "forward" else order >= t_prime
        assert moved[unseen].max() == 0.0, (r, c)  # the pixel itself included (mask A)
        if (direction == "forward" and t_prime < 24) or (direction == "backward" and t_prime > 0):
            assert moved[~unseen].max() > 1e-3, (r, c)  # and it does reach later pixels


def test_masked_conv_rejects_what_it_cannot_do():
    with pytest.raises(ValueError, match="odd"):
        MaskedConv2D(4, 4)
    with pytest.raises(ValueError, match="mask_type"):
        MaskedConv2D(4, 3, mask_type="C")
    with pytest.raises(ValueError, match="direction"):
        MaskedConv2D(4, 3, direction="sideways")
    with pytest.raises(ValueError, match="filters"):
        MaskedConv2D(0)
    with pytest.raises(ValueError, match="rank"):
        MaskedConv2D(4)(np.zeros((2, 5, 3), "float32"))


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_masked_conv_harness(tmp_path, direction):
    run_layer_test(MaskedConv2D, dict(filters=3, kernel_size=3, mask_type="B",
                                      direction=direction),
                   (images(),), tmp_path=tmp_path,
                   input_shapes=[(None, None, C)],  # images of any size
                   mask_check=None)  # images have no padding


# ---------------------------------------------------------------------------- units
def test_image_units_are_raster_order_and_invert():
    x = images(batch=2, height=3, width=4, channels=2)
    units = image_units(x).numpy()
    assert units.shape == (2, 12, 2)
    for r in range(3):
        for c in range(4):
            np.testing.assert_array_equal(units[:, raster_index(r, c, 4)], x[:, r, c])
    np.testing.assert_array_equal(units_image(units, 3, 4).numpy(), x)
    with pytest.raises(ValueError, match=r"\[batch, H, W, C\]"):
        image_units(units)


# ---------------------------------------------------------------------------- the predictor
def make_predictor(**kwargs):
    config = dict(hidden_dim=8, num_layers=2, num_heads=2, head_dim=4, conv_layers=2)
    config.update(kwargs)
    return GraphPredictor2D(**config)


def randomize(predictor, seed=3):
    rng = np.random.default_rng(seed)
    for variable in predictor.weights:
        value = variable.numpy()
        variable.assign((value + rng.normal(0, 0.3, value.shape)).astype(value.dtype))


def test_defaults_are_hparams():
    """The flat settings: the layer's arguments, the threshold initializer's value and the
    live-row hinge's weight (0: none) and margin."""
    from glomo_tf.layers import LiveRowHinge

    params = inspect.signature(GraphPredictor2D.__init__).parameters
    flat = dict(hparams.GRAPH_PREDICTOR_2D)
    assert params["threshold_initializer"].default == flat.pop("initial_threshold")
    assert params["live_row_regularizer"].default is None and flat.pop("live_row_weight") == 0
    assert inspect.signature(LiveRowHinge).parameters["margin"].default == flat.pop(
        "live_row_margin")
    assert {k: params[k].default for k in flat} == flat


@pytest.mark.parametrize("normalization", ["squared_relu", "softmax"])
def test_rows_sum_to_one_or_zero_over_admissible_sources_only(normalization):
    predictor = make_predictor(normalization=normalization)
    x = images(batch=3, seed=4)
    predictor(x)
    randomize(predictor)
    out = predictor(x)
    graphs = out["graphs"].numpy()
    assert graphs.shape == (3, 2, 2, 2, T, T)
    assert out["padding_mask"].numpy().all()
    sums = graphs.sum(-1)
    assert np.all(np.isclose(sums, 1.0, atol=1e-5) | np.isclose(sums, 0.0, atol=1e-7))
    upper = np.triu(np.ones((T, T), bool))  # s >= t: never a forward source
    lower = np.tril(np.ones((T, T), bool))
    assert np.all(graphs[:, 0][..., upper] == 0)
    assert np.all(graphs[:, 1][..., lower] == 0)
    # The first pixel has no forward source, the last none backward; the others do.
    assert np.all(graphs[:, 0, ..., 0, :] == 0) and np.all(graphs[:, 1, ..., T - 1, :] == 0)
    if normalization == "softmax":
        np.testing.assert_allclose(sums[:, 0, ..., 1:], 1.0, atol=1e-5)
    assert (sums > 0.5).mean() > 0.5  # most rows live: the check above is not vacuous


def test_graphs_are_causal_in_raster_order():
    """Changing pixel t' never changes a forward row t <= t' (queries and keys of s < t see only
    pixels before them) nor a backward row t >= t'; it does change rows on the other side."""
    predictor = make_predictor(conv_layers=2, kernel_size=3)
    x = images(batch=1, height=4, width=4, seed=5)
    predictor(x)
    randomize(predictor)
    base = predictor(x)["graphs"].numpy()[0]
    length = 16
    for r, c in [(0, 1), (1, 2), (2, 0), (3, 3)]:
        t_prime = raster_index(r, c, 4)
        changed = x.copy()
        changed[0, r, c] += 2.0
        moved = np.abs(predictor(changed)["graphs"].numpy()[0] - base)  # [2, L, K, T, T]
        rows = moved.max(axis=(1, 2, 4))  # [2, T]: how much each receiving row changed
        assert rows[0, :t_prime + 1].max() == 0.0, (r, c)
        assert rows[1, t_prime:].max() == 0.0, (r, c)
        if t_prime < length - 1:
            assert rows[0, t_prime + 1:].max() > 1e-6, (r, c)
        if t_prime > 0:
            assert rows[1, :t_prime].max() > 1e-6, (r, c)


def test_graphs_feed_graph_mixture_and_glomo_transfer_on_pixel_features():
    from glomo_tf import GlomoTransfer, GraphMixture

    predictor = make_predictor()
    x = images(batch=2, seed=6)
    graphs = predictor(x)["graphs"]
    features = image_units(tf.random.normal((2, H, W, 6), seed=1))
    # One free mixture over the candidates of a direction: M = sum_c softmax(w)_c G_c; at the
    # initial weights (all equal) M is the mean of the L * K graphs, times the initial scale.
    mixture = GraphMixture(num_mixtures=1, conditioned=False, include_products=False)
    got = mixture(features, graphs).numpy()  # [B, T, 2, 1, d]
    scale = np.asarray(mixture.scale.numpy()).reshape(-1)[0]
    mean_graph = graphs.numpy().mean(axis=(2, 3))  # [B, 2, T, T]
    want = np.einsum("bzts,bsd->btzd", mean_graph, features.numpy()) * scale
    np.testing.assert_allclose(got[:, :, :, 0], want, rtol=1e-4, atol=1e-5)
    assert got.shape == (2, T, 2, 1, 6)
    fused = GlomoTransfer(None, num_mixtures=2)([features, graphs])
    assert tuple(fused.shape) == (2, T, 6 + 6)


def test_bad_input_and_settings_raise_value_errors():
    with pytest.raises(ValueError, match="odd"):
        make_predictor(kernel_size=2)
    with pytest.raises(ValueError, match="conv_layers"):
        make_predictor(conv_layers=0)
    with pytest.raises(ValueError, match="threshold"):
        make_predictor(threshold="row")
    with pytest.raises(ValueError, match="normalization"):
        make_predictor(normalization="sparsemax")
    with pytest.raises(ValueError, match="images"):
        make_predictor()(np.zeros((2, 16, 3), "float32"))


def test_the_unused_scorer_table_is_not_trained():
    predictor = make_predictor()
    predictor(images())
    names = [w.path for w in predictor.trainable_weights]
    assert not any("embeddings" in name for name in names)
    # key and query networks (4 x conv_layers kernels, BN scale and offset) and Eq. 1's weights
    assert sum("conv" in name for name in names) == 4 * 2
    assert any("query_kernel" in name for name in names)


@pytest.mark.parametrize("kwargs", [{}, {"threshold": "scalar", "normalization": "entmax15"}])
def test_harness(tmp_path, kwargs):
    run_layer_test(
        GraphPredictor2D,
        dict(hidden_dim=8, num_layers=2, num_heads=2, head_dim=4, conv_layers=2, **kwargs),
        (images(),), tmp_path=tmp_path,
        input_shapes=[(None, None, C)],  # images of any size
        bfloat16_dtypes={"graphs": "bfloat16", "padding_mask": "bool"},
        mask_check=None)  # images have no padding: every pixel is a unit


@pytest.mark.parametrize("module", ["glomo_tf.layers.masked_conv_2d",
                                    "glomo_tf.layers.graph_predictor_2d"])
def test_docstring_examples_run(module):
    import doctest
    import importlib

    module = importlib.import_module(module)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [t for t in doctest.DocTestFinder().find(module) if t.examples]
    assert tests
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
