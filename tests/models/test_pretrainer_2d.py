"""GlomoPretrainer2D: the window loss against NumPy, causality of the features, gradients into
the graph predictor, fit, the .keras round trip and bad input."""

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf

from glomo_tf import hparams
from glomo_tf.layers.graph_predictor_2d import GraphPredictor2D
from glomo_tf.models.pretrainer_2d import GlomoPretrainer2D, pixel_levels, window_offsets

H, W, C, LEVELS = 3, 4, 2, 5


def images(batch=2, height=H, width=W, channels=C, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, LEVELS, (batch, height, width, channels)) / (LEVELS - 1)).astype(
        "float32")


def make_model(**kwargs):
    predictor_args = dict(hidden_dim=8, num_layers=2, num_heads=2, head_dim=4, conv_layers=1)
    config = dict(window=2, levels=LEVELS, num_positions=None, feature_layers=2, seed=0)
    config.update(kwargs)
    model = GlomoPretrainer2D(GraphPredictor2D(**predictor_args), **config)
    model.build((None, None, None, C))
    return model


def randomize(model, seed=1):
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        if variable.dtype in ("float32", tf.float32):
            value = variable.numpy()
            variable.assign((value + rng.normal(0, 0.2, value.shape)).astype(value.dtype))


def numpy_window_loss(model, x, levels=None):
    """Eq. 3's window form written out: every pixel, every offset, every channel."""
    top = model(x)["features"].numpy()[:, :, -1]  # [B, 2, T, d]
    if levels is None:
        levels = np.rint(x * (LEVELS - 1)).astype(int)
    batch, height, width, channels = levels.shape
    losses = []
    for z, sign in enumerate((1, -1)):
        kernel, bias = [w.numpy() for w in model.heads[z].weights]
        total, count = 0.0, 0
        for b in range(batch):
            for r in range(height):
                for c in range(width):
                    logits = (top[b, z, r * width + c] @ kernel + bias).reshape(4, channels,
                                                                               LEVELS)
                    for o, (dr, dc) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
                        rr, cc = r + sign * dr, c + sign * dc
                        if not (0 <= rr < height and 0 <= cc < width):
                            continue
                        for ch in range(channels):
                            row = logits[o, ch].astype(np.float64)
                            log_z = np.log(np.exp(row - row.max()).sum()) + row.max()
                            total += log_z - row[levels[b, rr, cc, ch]]
                            count += 1
        losses.append(total / count)
    return 0.5 * (losses[0] + losses[1])


def test_defaults_are_hparams():
    params = inspect.signature(GlomoPretrainer2D.__init__).parameters
    assert {k: params[k].default for k in hparams.PRETRAINER_2D} == hparams.PRETRAINER_2D


def test_window_offsets_are_the_masked_quarter():
    assert window_offsets(2, "forward") == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert window_offsets(2, "backward") == [(0, 0), (0, -1), (-1, 0), (-1, -1)]
    assert len(window_offsets(3, "forward")) == 9


def test_pixel_levels_round_to_the_nearest_level():
    values = np.array([0.0, 0.1, 0.13, 0.5, 0.99, 1.0, 1.7, -0.2], "float32")
    np.testing.assert_array_equal(pixel_levels(values, 5).numpy(), [0, 0, 1, 2, 4, 4, 4, 0])


def test_loss_matches_numpy():
    model = make_model()
    x = images()
    randomize(model)
    loss, total_ce, total_values = model.context_loss(x)
    np.testing.assert_allclose(float(loss), numpy_window_loss(model, x), rtol=1e-5)
    # Values inside the image: forward windows at (r, c) keep (H - r) x (W - c) clipped to 2x2.
    inside = sum(min(2, H - r) * min(2, W - c) for r in range(H) for c in range(W))
    assert float(total_values) == 2 * 2 * inside * C  # batch 2, both directions mirror
    assert float(total_ce) > 0


def test_explicit_targets_of_one_hot_images():
    """One-hot images in, their level ids out: target_channels=1, loss against NumPy, fit on
    (images, targets)."""
    rng = np.random.default_rng(7)
    ids = rng.integers(0, LEVELS, (4, H, W, 1))
    one_hot = np.eye(LEVELS, dtype="float32")[ids[..., 0]]  # [B, H, W, LEVELS]
    predictor = GraphPredictor2D(hidden_dim=8, num_layers=2, num_heads=2, conv_layers=1)
    model = GlomoPretrainer2D(predictor, levels=LEVELS, num_positions=None, target_channels=1)
    model.build((None, None, None, LEVELS))
    randomize(model)
    loss, _, values = model.context_loss(one_hot, targets=ids)
    np.testing.assert_allclose(float(loss), numpy_window_loss(model, one_hot, ids), rtol=1e-5)
    inside = sum(min(2, H - r) * min(2, W - c) for r in range(H) for c in range(W))
    assert float(values) == 4 * 2 * inside
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    history = model.fit(one_hot, ids.astype("int32"), batch_size=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    with pytest.raises(ValueError, match="pass targets"):
        model.context_loss(one_hot)
    with pytest.raises(ValueError, match="targets must be"):
        model.context_loss(one_hot, targets=np.zeros((4, H, W, 2), "int32"))


def test_sampled_positions_are_a_subset_of_the_full_loss():
    model = make_model(num_positions=7)
    positions = model.sample_positions(H * W).numpy()
    assert positions.shape == (7,) and positions.min() >= 0 and positions.max() < H * W
    loss, _, values = model.context_loss(images())
    assert np.isfinite(float(loss)) and 0 < float(values) <= 2 * 7 * 4 * C * 2


def test_features_never_see_the_pixels_they_predict():
    """Changing pixel t' leaves forward graphs and features at t <= t' unchanged (and backward
    at t >= t'): the window a direction predicts from t starts at t itself."""
    model = make_model()
    randomize(model)
    x = images(batch=1, height=4, width=4, seed=3)
    base = model(x)
    for r, c in [(1, 1), (2, 3), (0, 2)]:
        t_prime = r * 4 + c
        changed = x.copy()
        changed[0, r, c, :] = 1.0 - changed[0, r, c, :] + 0.3
        out = model(changed)
        features = np.abs(out["features"].numpy() - base["features"].numpy())[0]  # [2, L, T, d]
        moved = features.max(axis=(1, 3))  # [2, T]
        assert moved[0, :t_prime + 1].max() == 0.0 and moved[1, t_prime:].max() == 0.0
        assert moved[0, t_prime + 1:].max() > 1e-5 and moved[1, :t_prime].max() > 1e-5


def test_gradients_reach_the_graph_predictor_in_both_directions():
    model = make_model()
    randomize(model)
    x = images(batch=4, seed=4)
    with tf.GradientTape() as tape:
        loss, _, _ = model.context_loss(x, training=True)
    variables = model.graph_predictor.trainable_variables
    grads = tape.gradient(loss, variables)
    named = {v.path: g for v, g in zip(variables, grads)}
    for part in ("forward_key_conv0", "forward_query_conv0", "backward_key_conv0",
                 "backward_query_conv0", "query_kernel", "key_kernel"):
        norms = [float(tf.norm(g)) for path, g in named.items() if part in path]
        assert norms and all(n > 0 for n in norms), part


def test_fit_lowers_the_loss_on_a_learnable_image_set():
    # Every image is the same vertical gradient: each pixel is predictable from the one above.
    column = np.linspace(0, 1, H)[None, :, None, None]
    x = np.broadcast_to(column, (16, H, W, C)).astype("float32")
    x = np.round(x * (LEVELS - 1)) / (LEVELS - 1)
    model = make_model()
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    history = model.fit(x, batch_size=8, epochs=15, verbose=0)
    losses = history.history["loss"]
    assert sorted(history.history) == ["loss", "perplexity"]
    assert losses[-1] < 0.5 * losses[0]
    # train_on_batch and evaluate take images alone, or with labels that are not targets.
    logs = model.train_on_batch(x[:8], return_dict=True)
    assert np.isfinite(logs["loss"])
    evaluated = model.evaluate(x, np.zeros(len(x), "int32"), batch_size=8, verbose=0,
                               return_dict=True)
    assert evaluated["loss"] < losses[0]


def test_keras_round_trip(tmp_path):
    model = make_model(window=3, composition="residual")
    randomize(model)
    x = images(seed=5)
    path = str(tmp_path / "pretrainer_2d.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored, GlomoPretrainer2D)
    assert restored.window == 3 and restored.composition == "residual"
    np.testing.assert_allclose(restored(x)["graphs"].numpy(), model(x)["graphs"].numpy(),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(float(restored.context_loss(x)[0]),
                               float(model.context_loss(x)[0]), rtol=1e-6)


def test_from_sizes_splits_the_arguments():
    model = GlomoPretrainer2D.from_sizes(hidden_dim=8, num_heads=2, num_layers=1,
                                         conv_layers=1, levels=3, window=1, num_positions=4)
    assert model.graph_predictor.num_layers == 1 and model.levels == 3 and model.window == 1
    loss, _, _ = model.context_loss(np.random.rand(2, 3, 3, 1).astype("float32"))
    assert np.isfinite(float(loss))


def test_bad_settings_and_input_raise():
    predictor = GraphPredictor2D(hidden_dim=8, num_heads=2, num_layers=1, conv_layers=1)
    with pytest.raises(ValueError, match="levels"):
        GlomoPretrainer2D(predictor, levels=1)
    with pytest.raises(ValueError, match="window"):
        GlomoPretrainer2D(predictor, window=0)
    with pytest.raises(ValueError, match="num_positions"):
        GlomoPretrainer2D(predictor, num_positions=0)
    with pytest.raises(ValueError, match="target_channels"):
        GlomoPretrainer2D(predictor, target_channels=0)
    with pytest.raises(ValueError, match="divisible"):
        GlomoPretrainer2D(GraphPredictor2D(hidden_dim=6, num_heads=4, conv_layers=1))
    with pytest.raises(TypeError, match="GraphPredictor2D"):
        GlomoPretrainer2D(object())
    with pytest.raises(ValueError, match="images"):
        GlomoPretrainer2D(predictor).context_loss(np.zeros((2, 9, 1), "float32"))


def test_docstring_example_runs():
    import doctest

    from glomo_tf.models import pretrainer_2d

    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [t for t in doctest.DocTestFinder().find(pretrainer_2d) if t.examples]
    assert tests
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
