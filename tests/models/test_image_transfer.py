"""build_image_classifier: the three variants train with fit on tiny digits; the glomo variant
reads the frozen predictor's graphs; the uniform one the uniform graphs; .keras round trip."""

import keras
import numpy as np
import pytest

from glomo_tf.data.images import load_digits_images
from glomo_tf.layers.graph_predictor_2d import GraphPredictor2D, image_units
from glomo_tf.models.image_classifier import build_image_classifier
from _paths import REPO


@pytest.fixture(scope="module")
def digits():
    images, labels, _ = load_digits_images()
    return images[:64], labels[:64]


def make_predictor():
    predictor = GraphPredictor2D(hidden_dim=8, num_layers=2, num_heads=2, conv_layers=1)
    predictor.build((None, 8, 8, 1))
    return predictor


def small(variant, predictor=None, **kwargs):
    keras.utils.set_random_seed(0)
    return build_image_classifier((8, 8, 1), 10, variant, predictor, width=4, blocks=(1, 1),
                                  **kwargs)


@pytest.mark.parametrize("variant", ["baseline", "glomo", "uniform"])
def test_every_variant_trains_with_fit(digits, variant):
    images, labels = digits
    predictor = make_predictor() if variant == "glomo" else None
    frozen = [w.numpy().copy() for w in predictor.weights] if predictor else []
    model = small(variant, predictor)
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(images, labels, batch_size=16, epochs=6, verbose=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert model.predict(images[:3], verbose=0).shape == (3, 10)
    has_transfer = any(layer.name == "glomo_transfer" for layer in model.layers)
    assert has_transfer == (variant != "baseline")
    if predictor is not None:  # frozen, batch-norm statistics too
        for before, after in zip(frozen, predictor.weights):
            np.testing.assert_array_equal(before, after.numpy())


def stem_transfer(model):
    """The model cut after the transfer: images -> [B, T, width + units]."""
    return keras.Model(model.input, model.get_layer("glomo_transfer").output)


def test_glomo_variant_fuses_the_predictors_graphs(digits):
    images, _ = digits
    predictor = make_predictor()
    model = small("glomo", predictor)
    cut = stem_transfer(model)
    transfer = model.get_layer("glomo_transfer")
    stem = keras.Model(model.input, model.get_layer("stem_relu").output)
    units = image_units(stem(images[:4])).numpy()
    graphs = predictor(images[:4], training=False)["graphs"]
    np.testing.assert_allclose(cut(images[:4]).numpy(), transfer([units, graphs]).numpy(),
                               rtol=1e-5, atol=1e-6)
    # Other graphs, other output: the graphs are read.
    for variable in predictor.weights:
        if "query_kernel" in variable.path:
            variable.assign(variable.numpy() + 0.5)
    assert np.abs(cut(images[:4]).numpy() - transfer([units, graphs]).numpy()).max() > 1e-4


def test_uniform_variant_mixes_uniform_graphs(digits):
    images, _ = digits
    model = small("uniform")
    transfer = model.get_layer("glomo_transfer")
    stem = keras.Model(model.input, model.get_layer("stem_relu").output)
    units = image_units(stem(images[:2])).numpy()
    length = units.shape[1]
    mixed = transfer.mixture(units, None, np.ones((2, length), bool)).numpy()  # [B, T, 2, 1, d]
    forward = np.cumsum(units, axis=1) - units  # sum over s < t
    counts = np.arange(length)[None, :, None]
    want = np.where(counts > 0, forward / np.maximum(counts, 1), 0.0)
    np.testing.assert_allclose(mixed[:, :, 0, 0], want, rtol=1e-5, atol=1e-6)


def test_keras_round_trip_with_the_predictor_inside(digits, tmp_path):
    images, _ = digits
    model = small("glomo", make_predictor(), num_mixtures=2)
    path = str(tmp_path / "resnet_glomo.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    np.testing.assert_allclose(restored.predict(images[:5], verbose=0),
                               model.predict(images[:5], verbose=0), rtol=1e-5, atol=1e-6)


def test_bad_settings_raise():
    with pytest.raises(ValueError, match="variant"):
        small("cn3")
    with pytest.raises(ValueError, match="GraphPredictor2D"):
        small("glomo")
    with pytest.raises(ValueError, match="input_shape"):
        build_image_classifier((None, 8, 1), 10, "uniform")
    with pytest.raises(ValueError, match="block"):
        build_image_classifier((8, 8, 1), 10, blocks=(2, 0))


@pytest.mark.slow
def test_the_images_example_runs_at_a_toy_size(tmp_path):
    """examples/glomo_images.py --quick: every part runs, the JSON and both figures are written
    and the recovery figures are shares consistent with their corpus."""
    import json
    import os
    import sys

    sys.path.insert(0, os.path.join(REPO, "examples"))
    import glomo_images

    result = glomo_images.main(["--quick", "--seeds", "2", "--output-dir", str(tmp_path)])
    with open(tmp_path / "glomo_images.json", encoding="utf-8") as handle:
        saved = json.load(handle)
    assert saved["digits"]["summary"] == json.loads(json.dumps(result["digits"]["summary"]))
    for name in ("glomo_images_planted_figure4.png", "glomo_images_digits_figure4.png"):
        assert (tmp_path / name).stat().st_size > 1000
    for direction in ("forward", "backward"):
        report = saved["planted"]["recovery"][direction]
        shares = np.array(report["share_per_layer_head"])
        assert shares.shape == (2, 4) and np.all((0 <= shares) & (shares <= 1))
        assert report["best_head"]["share"] == pytest.approx(shares.max(), abs=1e-4)
        assert 0 < report["chance"] < report["positional_baseline"]["share"] <= 1
    runs = saved["digits"]["runs"]
    assert sorted({(r["variant"], r["seed"]) for r in runs}) == sorted(
        (v, s) for v in ("baseline", "glomo", "uniform") for s in (0, 1))
    assert all(0 <= r["accuracy"] <= 1 for r in runs)
