"""The related models in the classifier harness: the ``cn3`` and ``shared_private`` variants
(build, learn a planted task, save/load, padding), the auxiliary loss inside ``model.fit``'s loss,
``glomo transfer`` with all three of baseline / cn3 / shared_private, and the IMDB example."""

import importlib.util
import json
import os

import keras
import numpy as np
import pytest

from glomo_tf import ContextualizedNonLocal, SharedPrivateRNN, cli
from glomo_tf.models.classifier import (CN3_LAYERS, PREDICTOR_VARIANTS, SHARED_FRACTION,
                                        VARIANTS, MaskedMeanPooling, build_classifier)
from _paths import REPO

RELATED = ("cn3", "shared_private")
VOCAB, PLANTED = 30, 7
SMALL = dict(embedding_dim=16, rnn_units=8, dropout=0.1)
EXAMPLE = os.path.join(REPO, "examples",
                       "shared_private_imdb.py")


def planted_ids(rng, count, min_length=5, max_length=12):
    """Token ids padded with 0; label 1 iff token 7 appears (exactly half of the rows)."""
    ids = np.zeros((count, max_length), "int32")
    labels = (np.arange(count) % 2).astype("int32")
    for row in range(count):
        length = int(rng.integers(min_length, max_length + 1))
        tokens = rng.choice([t for t in range(2, VOCAB) if t != PLANTED], size=length)
        if labels[row]:
            tokens[rng.integers(0, length)] = PLANTED
        ids[row, :length] = tokens
    order = rng.permutation(count)
    return ids[order], labels[order]


def compiled(model, learning_rate=0.01):
    model.compile(keras.optimizers.Adam(learning_rate), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model


def test_the_related_variants_need_no_predictor():
    assert set(RELATED) <= set(VARIANTS) and not set(RELATED) & set(PREDICTOR_VARIANTS)


@pytest.mark.parametrize("variant", RELATED)
def test_variant_builds_with_the_baselines_width_and_fits(variant, rng):
    model = build_classifier(VOCAB, 3, variant, **SMALL)
    ids, _ = planted_ids(rng, 12)
    labels = np.arange(12) % 3
    probabilities = np.asarray(model(ids, training=False))
    assert probabilities.shape == (12, 3)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    if variant == "cn3":
        layer = model.get_layer("cn3")
        assert isinstance(layer, ContextualizedNonLocal)
        assert (layer.units, layer.num_layers, layer.context) == (16, CN3_LAYERS, "lstm")
        assert isinstance(model.get_layer("mean_pooling"), MaskedMeanPooling)
        assert model.get_layer("mean_pooling").output.shape[-1] == 2 * SMALL["rnn_units"]
    else:
        layer = model.get_layer("shared_private_rnn")
        assert isinstance(layer, SharedPrivateRNN)
        assert (layer.units, layer.shared_units, layer.vocabulary_size) == (16, 8, VOCAB)
        assert layer.shared_fraction == SHARED_FRACTION and not layer.return_sequences
        assert (layer.num_anchors, layer.reconstruct_length, layer.predict_length,
                layer.aux_weight) == (2, 4, 4, 0.5)
        assert model.get_layer("output_dropout").output.shape[-1] == 2 * SMALL["rnn_units"]
    before = [np.array(w) for w in model.trainable_weights]
    history = compiled(model).fit(ids, labels, batch_size=12, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    unchanged = [w.path for old, w in zip(before, model.trainable_weights)
                 if np.array_equal(old, np.array(w))]
    assert not unchanged, f"weights without a gradient: {unchanged}"


@pytest.mark.slow
@pytest.mark.parametrize("variant", RELATED)
def test_variant_learns_whether_a_planted_token_appears(variant):
    rng = np.random.default_rng(1)
    ids, labels = planted_ids(rng, 600)
    train, test = slice(0, 480), slice(480, None)
    model = compiled(build_classifier(VOCAB, 2, variant, **SMALL))
    model.fit(ids[train], labels[train], batch_size=32, epochs=6, verbose=0)
    predicted = model.predict(ids[test], verbose=0).argmax(-1)
    accuracy = float(np.mean(predicted == labels[test]))
    assert accuracy > 0.9, f"{variant}: test accuracy {accuracy:.3f} on the planted task"


@pytest.mark.parametrize("variant", RELATED)
def test_save_and_load_round_trip(variant, rng, tmp_path):
    model = build_classifier(VOCAB, 2, variant, **SMALL)
    ids, labels = planted_ids(rng, 8)
    compiled(model).fit(ids, labels, batch_size=8, epochs=1, verbose=0)
    path = str(tmp_path / f"{variant}.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded.predict(ids, verbose=0), model.predict(ids, verbose=0),
                               atol=1e-6)
    if variant == "shared_private":  # the token ids still reach the auxiliary decoders
        loaded(ids, training=True)
        assert len(loaded.losses) == 1 and float(loaded.losses[0]) > 0
        assert loaded.get_layer("shared_private_rnn").get_config() == \
            model.get_layer("shared_private_rnn").get_config()


@pytest.mark.parametrize("variant", RELATED)
def test_trailing_padding_does_not_change_the_prediction(variant, rng):
    model = build_classifier(VOCAB, 2, variant, **SMALL)
    ids, _ = planted_ids(rng, 6)
    padded = np.concatenate([ids, np.zeros((6, 5), "int32")], axis=1)
    np.testing.assert_allclose(np.asarray(model(ids, training=False)),
                               np.asarray(model(padded, training=False)), atol=1e-5)


def test_the_auxiliary_loss_is_part_of_the_fit_loss(rng):
    """With dropout off and a zero learning rate, fit's loss on one batch is the task
    cross-entropy plus the layer's auxiliary term, and exactly the task loss with aux_weight=0."""
    ids, labels = planted_ids(rng, 16)
    options = dict(SMALL, dropout=0.0)

    def fit_loss(model):
        model.compile(keras.optimizers.SGD(0.0), "sparse_categorical_crossentropy")
        history = model.fit(ids, labels, batch_size=len(ids), epochs=1, shuffle=False, verbose=0)
        return history.history["loss"][0]

    model = build_classifier(VOCAB, 2, "shared_private", aux_weight=0.5, **options)
    silent = build_classifier(VOCAB, 2, "shared_private", aux_weight=0.0, **options)
    silent.set_weights(model.get_weights())
    layer = model.get_layer("shared_private_rnn")
    seed_state = np.array(layer.seed_generator.state)
    with_aux, without_aux = fit_loss(model), fit_loss(silent)

    layer.seed_generator.state.assign(seed_state)  # the anchors fit drew
    probabilities = model(ids, training=True)
    aux, = [float(loss) for loss in model.losses]
    task = float(np.mean(keras.losses.sparse_categorical_crossentropy(labels, probabilities)))
    assert aux > 0.1
    assert without_aux == pytest.approx(task, rel=1e-5)
    assert with_aux == pytest.approx(task + aux, rel=1e-5)
    assert with_aux - without_aux == pytest.approx(aux, rel=1e-4)
    model(ids, training=False)
    assert not model.losses, "no auxiliary loss outside training"
    np.testing.assert_allclose(model.evaluate(ids, labels, verbose=0), task, rtol=1e-5)


# ---------------------------------------------------------------------------------- glomo transfer
@pytest.mark.slow
def test_transfer_puts_baseline_cn3_and_shared_private_in_one_table(tmp_path, capsys):
    rng = np.random.default_rng(2)
    filler = "the a film movie story plot scene was is and of it this very".split()
    rows = []
    for i in range(99):  # 80 / 9 / 10 examples: no partial batch (each one costs a retrace)
        label = ("neg", "pos")[i % 2]
        words = list(rng.choice(filler, size=int(rng.integers(3, 8))))
        words.insert(int(rng.integers(0, len(words) + 1)), {"neg": "awful", "pos": "great"}[label])
        rows.append(f"{' '.join(words)}\t{label}\n")
    data = tmp_path / "tiny.tsv"
    data.write_text("text\tlabel\n" + "".join(rows), encoding="utf-8")
    out = tmp_path / "out"
    assert cli.main(["transfer", "--dataset", "file", "--file", str(data),
                     "--variants", "baseline", "cn3", "shared_private", "--seeds", "0", "1",
                     "--epochs", "1", "--max-length", "12", "--embedding-dim", "8",
                     "--rnn-units", "4", "--attention-heads", "2", "--batch-size", "16",
                     "--verbose", "0", "--output-dir", str(out)]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    runs = results["runs"]
    assert [(r["variant"], r["seed"]) for r in runs] == [
        (v, s) for s in (0, 1) for v in ("baseline", "cn3", "shared_private")]
    for seed in (0, 1):  # same seed, same split for every variant
        sizes = {(r["train_examples"], r["validation_examples"], r["test_examples"])
                 for r in runs if r["seed"] == seed}
        assert sizes == {(80, 9, 10)}
    assert set(results["summary"]["variants"]) == {"baseline", "cn3", "shared_private"}
    assert set(results["summary"]["paired"]) == {"cn3", "shared_private"}
    assert all(p["seeds"] == 2 for p in results["summary"]["paired"].values())
    markdown = (out / "results.md").read_text(encoding="utf-8")
    table_rows = [line.split("|")[1].strip() for line in markdown.splitlines()
                  if line.startswith("| ")]
    assert table_rows == ["variant", "baseline", "cn3", "shared_private", "variant - baseline",
                          "cn3", "shared_private"]
    assert "| cn3 | 2 |" in capsys.readouterr().out


def test_transfer_help_names_the_related_variants(capsys):
    with pytest.raises(SystemExit):
        cli.main(["transfer", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "cn3 shared_private" in help_text


# ---------------------------------------------------------------------------------- the example
@pytest.mark.slow
def test_imdb_example_on_mock_tfds_data(monkeypatch, capsys):
    tfds = pytest.importorskip("tensorflow_datasets")
    spec = importlib.util.spec_from_file_location("shared_private_imdb", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    requested = []

    def recording_loader(name, split, **kwargs):
        requested.append((name, split, kwargs.get("data_dir")))
        return load_tfds_text(name, split, **kwargs)

    load_tfds_text = example.load_tfds_text
    monkeypatch.setattr(example, "load_tfds_text", recording_loader)
    with tfds.testing.mock_data(num_examples=20):  # nothing is downloaded
        result = example.main(["--data-dir", "/nonexistent/tfds", "--limit", "15",
                               "--max-length", "30", "--epochs", "1", "--embedding-dim", "8",
                               "--rnn-units", "4", "--anchors", "2", "--aux-length", "3",
                               "--batch-size", "8", "--verbose", "0"])
    # mock_data serves num_examples per split whatever the slice; the slice is still asked for.
    assert requested == [("imdb_reviews", "train[:15]", "/nonexistent/tfds"),
                         ("imdb_reviews", "test[:15]", "/nonexistent/tfds")]
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed == result
    assert 0.0 <= result["test_accuracy"] <= 1.0 and result["epochs_run"] == 1
    assert (result["train_examples"], result["validation_examples"],
            result["test_examples"]) == (18, 2, 20)
    assert result["max_length"] == 30
