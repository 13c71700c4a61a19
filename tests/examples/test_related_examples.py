"""Tests of the examples built on the related-work layers: examples/cn3_tagging.py (CN3 + CRF on a
generated tagging task with non-local tags) and examples/pixel_mnist.py (SharedPrivateRNN on
pixel-by-pixel MNIST, tfds mocked so nothing downloads)."""

import importlib.util
import json
import os

import numpy as np
import pytest
from _paths import REPO

EXAMPLES = os.path.join(REPO, "examples")


def load_example(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}",
                                                  os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cn3_tagging():
    return load_example("cn3_tagging")


@pytest.fixture(scope="module")
def pixel_mnist():
    return load_example("pixel_mnist")


# ---------------------------------------------------------------------------------- cn3_tagging
def expected_tags(tokens):
    """The planted rule from the token strings alone: a pronoun ``p<k>`` takes ``P<c>`` from the
    marker ``m<k>_<c>`` before it; a name ``n*`` is ``B`` unless a name precedes it (``I``);
    everything else is ``O``."""
    classes = {}
    tags = []
    for t, token in enumerate(tokens):
        if token.startswith("m"):
            key, cls = token[1:].split("_")
            classes[key] = cls
            tags.append("O")
        elif token.startswith("p"):
            tags.append("P" + classes[token[1:]])
        elif token.startswith("n"):
            tags.append("I" if t > 0 and tokens[t - 1].startswith("n") else "B")
        else:
            tags.append("O")
    return tags


@pytest.mark.parametrize("num_keys", [1, 3])
def test_generator_plants_the_documented_structure(cn3_tagging, num_keys):
    data = cn3_tagging.generate_tagging_data(200, seed=3, num_keys=num_keys, num_classes=4,
                                             min_gap=6)
    pronouns = 0
    for n in range(len(data.token_ids)):
        tokens = data.tokens(n)
        length = len(tokens)
        assert 16 <= length <= 28
        assert np.all(data.token_ids[n, length:] == 0) and np.all(data.tags[n, length:] == 0)
        got = [data.tag_names[i] for i in data.tags[n, :length]]
        assert got == expected_tags(tokens)
        is_pronoun = np.array([token.startswith("p") for token in tokens])
        np.testing.assert_array_equal(data.nonlocal_mask[n, :length], is_pronoun)
        markers = [t for t, token in enumerate(tokens) if token.startswith("m")]
        assert sorted(tokens[t][1:].split("_")[0] for t in markers) == [
            str(k) for k in range(num_keys)]  # one marker per key
        for t in np.flatnonzero(is_pronoun):
            source = data.antecedents[n, t]
            assert tokens[source].startswith(f"m{tokens[t][1:]}_")
            assert t - max(markers) > 6  # at least min_gap tokens in between
        assert np.all(data.antecedents[n][~data.nonlocal_mask[n]] == -1)
        pronouns += int(is_pronoun.sum())
        # Name spans: 1 to 3 names, never two spans side by side.
        spans = "".join("B" if g == "B" else "I" if g == "I" else "." for g in got)
        assert "III" not in spans and "BB" not in spans
    assert pronouns >= 200
    again = cn3_tagging.generate_tagging_data(200, seed=3, num_keys=num_keys, num_classes=4)
    np.testing.assert_array_equal(again.token_ids, data.token_ids)
    other = cn3_tagging.generate_tagging_data(200, seed=4, num_keys=num_keys, num_classes=4)
    assert not np.array_equal(other.token_ids, data.token_ids)
    # Every class occurs on the pronouns (the non-local tags are not constant).
    assert set(data.tags[data.nonlocal_mask].tolist()) == {3, 4, 5, 6}


def test_cn3_tagging_tiny_run_reports_sane_metrics(cn3_tagging, capsys):
    results = cn3_tagging.main([
        "--models", "bilstm_crf,cn3_softmax", "--train-size", "64", "--test-size", "16",
        "--num-keys", "2", "--num-classes", "3", "--epochs", "1", "--batch-size", "16",
        "--embedding-dim", "8", "--units", "8", "--cn3-layers", "2", "--cn3-context", "lstm",
        "--learning-rate", "0.01", "--seed", "1", "--verbose", "0"])
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(results))
    assert set(results["models"]) == {"bilstm_crf", "cn3_softmax"}
    assert results["nonlocal_chance"] == pytest.approx(1 / 3)
    assert results["test_nonlocal_tokens"] > 0 and results["test_tokens"] >= 16 * 16
    for name, scores in results["models"].items():
        for key in ("token_accuracy", "nonlocal_accuracy", "local_accuracy"):
            assert 0.0 <= scores[key] <= 1.0, (name, key)
        assert np.isfinite(scores["final_train_loss"]) and scores["parameters"] > 0
    assert 0.0 <= results["models"]["cn3_softmax"]["antecedent_attention"] <= 1.0
    assert "antecedent_attention" not in results["models"]["bilstm_crf"]
    with pytest.raises(SystemExit):
        cn3_tagging.main(["--models", "transformer"])


@pytest.mark.slow
def test_cn3_crf_learns_the_nonlocal_tags(cn3_tagging, tmp_path):
    """A learning test: CN3 + CRF must tag the pronouns with their distant marker's class far
    above chance (0.25), and its graph must point the pronouns at their markers."""
    png = tmp_path / "graph.png"
    results = cn3_tagging.main([
        "--models", "cn3_crf", "--train-size", "800", "--test-size", "100", "--epochs", "5",
        "--graph-png", str(png), "--verbose", "0"])
    scores = results["models"]["cn3_crf"]
    assert scores["nonlocal_accuracy"] > 0.8, scores
    assert scores["local_accuracy"] > 0.95, scores
    assert scores["antecedent_attention"] > 0.3, scores  # uniform would be about 1/22
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert results["graph_png"] == str(png) and results["graph_model"] == "cn3_crf"


# ---------------------------------------------------------------------------------- pixel_mnist
def test_pixel_quantisation_and_downsampling(pixel_mnist):
    images = np.arange(2 * 4 * 4, dtype="float32").reshape(2, 4, 4) / 31.0
    pixels = pixel_mnist.pixel_sequences(images, downsample=2)
    assert pixels.shape == (2, 4, 1)
    np.testing.assert_allclose(pixels[0, 0, 0], images[0, :2, :2].mean(), rtol=1e-6)
    np.testing.assert_allclose(pixels[1, 3, 0], images[1, 2:, 2:].mean(), rtol=1e-6)
    assert pixel_mnist.pixel_sequences(images).shape == (2, 16, 1)
    ids = pixel_mnist.quantise(np.array([[[0.0], [0.124], [0.126], [0.999], [1.0]]]), 8)
    np.testing.assert_array_equal(ids, [[1, 1, 2, 8, 8]])
    with pytest.raises(ValueError, match="does not divide"):
        pixel_mnist.pixel_sequences(images, downsample=3)


def run_pixel_mnist(pixel_mnist, tmp_path, aux_weight):
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=24):
        return pixel_mnist.main([
            "--data-dir", str(tmp_path), "--limit", "20", "--downsample", "4", "--epochs", "1",
            "--batch-size", "20", "--units", "8", "--shared-fraction", "0.5",
            "--aux-weight", str(aux_weight), "--levels", "4", "--anchors", "2",
            "--reconstruct-length", "3", "--predict-length", "3", "--learning-rate", "0.001",
            "--seed", "0", "--verbose", "0"])


def test_pixel_mnist_on_mock_data_includes_the_auxiliary_loss(pixel_mnist, tmp_path, capsys):
    with_aux = run_pixel_mnist(pixel_mnist, tmp_path, aux_weight=2.0)
    printed = json.loads(capsys.readouterr().out)
    assert printed["test_accuracy"] == with_aux["test_accuracy"]
    assert 0.0 <= with_aux["test_accuracy"] <= 1.0
    assert (with_aux["train_examples"], with_aux["test_examples"]) == (20, 20)
    assert with_aux["sequence_length"] == 49  # 7 x 7 after 4 x 4 averaging
    without = run_pixel_mnist(pixel_mnist, tmp_path, aux_weight=0.0)
    # One batch: the fit loss is the first batch's. The auxiliary cross-entropy over 5 ids starts
    # near log 5 (times the weight 2) and is part of the loss; with weight 0 it vanishes.
    aux = with_aux["aux_loss"][0]
    assert 2.0 * np.log(5) * 0.7 < aux < 2.0 * np.log(5) * 1.3
    assert without["aux_loss"] == [0.0]
    main_with = with_aux["train_loss"][0] - aux
    assert main_with == pytest.approx(without["train_loss"][0], abs=0.05)  # same seed and batch
    assert with_aux["train_loss"][0] > without["train_loss"][0] + 2.0
