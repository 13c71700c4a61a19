"""KerasTuner support: the D-comparable objective, the hypermodel, resumable tuners, `glomo tune`."""

import functools
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

keras_tuner = pytest.importorskip("keras_tuner")

from glomo_tf import GlomoPretrainer, cli  # noqa: E402
from glomo_tf.data import planted  # noqa: E402
from glomo_tf.tuning import (OBJECTIVE_NAME, GlomoHyperModel, first_unit_loss,  # noqa: E402
                             make_tuner, results_table)

TINY = dict(hidden_dim=8, num_layers=1, num_heads=2, conv_layers=1, decoder_layers=1)
TINY_FIXED = dict(conv_layers=1, decoder_layers=1, num_positions=4)
CORPUS = dict(seq_len=16, deps_per_sequence=2, num_slots=3, num_pairs=4, num_fillers=8, max_gap=6)


def tiny_ids(n=6, length=10, vocabulary=20, seed=0):
    return np.random.default_rng(seed).integers(1, vocabulary, size=(n, length)).astype("int32")


def manual_first_unit_loss(model, ids):
    """Numpy cross-entropy of logits[:, :, 0] taken from the decoders, all positions."""
    out = model(ids)
    top = out["features"][:, :, -1]
    length = ids.shape[1]
    per_direction = []
    for z, decoder in enumerate(model.decoders):
        dec = decoder(top[:, z], tf.range(length), ids, model.graph_predictor.embeddings)
        logits = dec["logits"].numpy()[:, :, 0].astype(np.float64)  # [B, T, V]
        log_probs = logits - logits.max(-1, keepdims=True)
        log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
        ce, count = 0.0, 0
        for b in range(ids.shape[0]):
            for t in range(length):
                target = t + 1 if z == 0 else t - 1
                if 0 <= target < length and ids[b, t] and ids[b, target]:
                    ce -= log_probs[b, t, ids[b, target]]
                    count += 1
        per_direction.append(ce / count)
    return 0.5 * sum(per_direction)


# ------------------------------------------------------------------------------ objective
def test_first_unit_loss_equals_context_loss_when_d_is_one():
    model = GlomoPretrainer.from_sizes(20, context_length=1, num_positions=None, **TINY)
    ids = tiny_ids()
    expected = float(model.context_loss(ids)[0])
    assert first_unit_loss(model, ids, batch_size=len(ids)) == pytest.approx(expected, rel=1e-5)


def test_first_unit_loss_ignores_units_beyond_the_first():
    model = GlomoPretrainer.from_sizes(20, context_length=3, num_positions=4, **TINY)
    ids = tiny_ids()
    ids[1, 7:] = 0  # padding: neither a start nor a target
    expected = manual_first_unit_loss(model, ids)
    # Batches of 4 (the last one smaller) and a dataset give the same value.
    assert first_unit_loss(model, ids, batch_size=4) == pytest.approx(expected, rel=1e-5)
    dataset = tf.data.Dataset.from_tensor_slices(ids).batch(5)
    assert first_unit_loss(model, dataset) == pytest.approx(expected, rel=1e-5)


def test_first_unit_loss_of_d3_equals_d1_loss_with_the_same_weights():
    """The decoders' weights do not depend on D: a D=1 copy of a D=3 model scores the same first
    units, and its pretraining loss (all positions) is exactly that first-unit loss."""
    ids = tiny_ids(seed=1)
    model3 = GlomoPretrainer.from_sizes(20, context_length=3, num_positions=4, **TINY)
    model3.compile(optimizer=keras.optimizers.Adam(1e-2))
    model3.fit(ids, batch_size=3, epochs=1, verbose=0)  # weights away from their init
    model1 = GlomoPretrainer.from_sizes(20, context_length=1, num_positions=None, **TINY)
    model1.build()
    model1.set_weights(model3.get_weights())
    expected = float(model1.context_loss(ids)[0])
    assert first_unit_loss(model3, ids, batch_size=len(ids)) == pytest.approx(expected, rel=1e-5)
    assert float(model3.context_loss(ids)[0]) != pytest.approx(expected, rel=1e-4)


def test_first_unit_loss_rejects_sentence_models():
    model = GlomoPretrainer.from_sizes(20, objective="sentence", **TINY)
    with pytest.raises(ValueError, match="unit-level"):
        first_unit_loss(model, tiny_ids())


# ------------------------------------------------------------------------------ hypermodel
def test_hypermodel_builds_every_combination():
    hypermodel = GlomoHyperModel(20, context_lengths=(1, 3), num_heads=(1, 2), num_layers=(1,),
                                 thresholds=("query", "scalar"), hidden_dim=8,
                                 learning_rates=(1e-3,), fixed=TINY_FIXED)
    built = set()
    for d in (1, 3):
        for heads in (1, 2):
            for threshold in ("query", "scalar"):
                hp = keras_tuner.HyperParameters()
                hp.values.update(context_length=d, num_heads=heads, threshold=threshold)
                model = hypermodel.build(hp)
                assert model.built and model.optimizer is not None
                assert model.optimizer.global_clipnorm == 1.0
                assert all(dec.context_length == d for dec in model.decoders)
                predictor = model.graph_predictor
                built.add((model.context_length, predictor.num_heads, predictor.threshold))
    assert len(built) == 8
    with pytest.raises(ValueError, match="divisible"):
        GlomoHyperModel(20, num_heads=(3,), hidden_dim=8)


# ------------------------------------------------------------------------------ tuner
def test_random_search_runs_and_resumes_without_rerunning(tmp_path):
    train = planted.builtin_corpus("train", 32, **CORPUS)
    validation = planted.builtin_corpus("test", 8, **CORPUS).token_ids
    hypermodel = GlomoHyperModel(train.vocabulary.size, context_lengths=(1, 3), num_heads=(1, 2),
                                 num_layers=(1,), thresholds=("scalar",), hidden_dim=8,
                                 learning_rates=(3e-3,), fixed=TINY_FIXED, jit_compile=False)
    fit = dict(validation_data=validation, epochs=1, steps_per_epoch=2, batch_size=8, verbose=0)
    tuner = make_tuner("random", hypermodel, str(tmp_path), "p", max_trials=2, seed=1)
    tuner.search(train.token_ids, **fit)
    assert os.path.isfile(tmp_path / "p" / "oracle.json")
    trials = tuner.oracle.trials
    assert len(trials) == 2 and all(t.status == "COMPLETED" for t in trials.values())
    for trial in trials.values():
        assert np.isfinite(trial.score)
        assert trial.metrics.exists("loss") and trial.metrics.exists("val_loss")
    table = results_table(tuner)
    assert "| D | heads | layers | threshold | lr | val_first_unit_loss |" in table
    assert len(table.strip().splitlines()) == 4

    runs = []
    original_fit = hypermodel.fit
    hypermodel.fit = lambda *a, **k: runs.append(1) or original_fit(*a, **k)
    again = make_tuner("random", hypermodel, str(tmp_path), "p", max_trials=2, seed=1)
    assert sorted(again.oracle.trials) == sorted(trials)
    assert {t: again.oracle.trials[t].score for t in trials} == \
        {t: trials[t].score for t in trials}
    again.search(train.token_ids, **fit)
    assert runs == [] and len(again.oracle.trials) == 2
    with pytest.raises(ValueError, match="kind"):
        make_tuner("grid", hypermodel, str(tmp_path), "q", max_trials=1)


# ------------------------------------------------------------------------------ CLI
def glomo_tune(*argv):
    original = cli.build_parser
    cli.build_parser = functools.partial(original, [("tune", "glomo_tf.cli.tune")])
    try:
        return cli.main(["tune", *argv])
    finally:
        cli.build_parser = original


@pytest.mark.slow
def test_cli_planted_end_to_end(tmp_path, capsys):
    argv = ["--planted", "--window", "24", "--validation-fraction", "0.005", "--batch-size", "8",
            "--hidden-dim", "8", "--heads", "1", "2", "--layers", "1", "--context-lengths", "1",
            "3", "--thresholds", "scalar", "--learning-rates", "0.003", "--max-trials", "2",
            "--epochs", "1", "--steps-per-epoch", "2", "--tuner", "random",
            "--directory", str(tmp_path), "--project", "sweep", "--seed", "2"]
    assert glomo_tune(*argv) == 0
    out = capsys.readouterr().out
    project = tmp_path / "sweep"
    results = (project / "results.md").read_text()
    rows = [line for line in results.splitlines() if line.startswith("| ") and "rank" not in line]
    assert len(rows) == 2 and all(" scalar | 0.003 | " in row for row in rows)
    assert rows[0].split("|")[-2].strip() != "failed"
    summary = json.loads((project / "results.json").read_text())
    assert summary["objective"] == OBJECTIVE_NAME and len(summary["trials"]) == 2
    assert summary["best"]["objective"] == min(t["objective"] for t in summary["trials"])
    assert "tensorboard --logdir" in out and rows[0] in out
    hparams = [f for f in (project / "logs").rglob("events.out.tfevents.*")]
    assert hparams, "TensorBoard logs written per trial"

    # Re-running resumes: nothing new is trained, the same table comes back.
    assert glomo_tune(*argv) == 0
    assert "Resuming the search" in capsys.readouterr().out
    assert (project / "results.md").read_text() == results
    # Other settings on the same project are refused.
    assert glomo_tune(*argv[:-2], "--seed", "3") == 2
    assert "other settings" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--planted", "--tuner", "grid"], "--tuner must be one of"),
    ([], "give the data with --train"),
    (["--planted", "--max-trials", "0"], "--max-trials must be >= 1"),
    (["--planted", "--hidden-dim", "6", "--heads", "4"], "must be divisible by --heads (4)"),
    (["--train", "missing-*.txt"], "No file matches"),
])
def test_cli_usage_errors(tmp_path, capsys, argv, message):
    assert glomo_tune(*argv, "--directory", str(tmp_path)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and err.startswith("glomo tune: error:")


def test_cli_text_files_build_and_keep_the_vocabulary(tmp_path, capsys):
    rng = np.random.default_rng(0)
    words = ["the", "cat", "dog", "sees", "a", "bird", "runs", "big", "small", "."]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(rng.choice(words, 12)) for _ in range(60)) + "\n")
    argv = ["--train", str(corpus), "--validation-fraction", "0.2", "--window", "10",
            "--shift", "5", "--vocab-size", "8", "--batch-size", "4", "--hidden-dim", "8",
            "--heads", "2", "--layers", "1", "--context-lengths", "2", "--thresholds", "query",
            "--max-trials", "1", "--epochs", "1", "--steps-per-epoch", "1",
            "--directory", str(tmp_path), "--project", "text"]
    assert glomo_tune(*argv) == 0
    vocab = (tmp_path / "text" / "tokenizer" / "vocab.txt").read_text().split()
    assert len(vocab) == 8  # --vocab-size, <pad> and <unk> included
    config = json.loads((tmp_path / "text" / "tune_config.json").read_text())
    assert config["shift"] == 5 and config["window"] == 10
    assert "| 2 | 2 | 1 | query |" in (tmp_path / "text" / "results.md").read_text()
