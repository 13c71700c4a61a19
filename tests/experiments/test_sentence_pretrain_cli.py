"""glomo sentence-pretrain: the run directory, resuming with exactly the weights an uninterrupted
run reaches, settings checked on resume, one-line errors, GLoMo graphs from a pretrain run, and
the run read back by glomo probe."""

import json
import os
import random
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest

from glomo_tf import SentencePretrainer, cli
from glomo_tf.data.sentences import MASK
from glomo_tf.data.vocabulary import Tokenizer
from _paths import REPO

TINY = ["--format", "lines", "--embedding-dim", "6", "--units", "5", "--batch-size", "12",
        "--max-length", "10", "--checkpoint-every", "3", "--verbose", "0", "--seed", "4",
        "--learning-rate", "0.01"]
WORDS = "the a cat dog sat ran on under mat house big small red blue".split()


def write_corpus(path, documents=20, seed=0):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(documents):
            for _ in range(4):
                f.write(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))) + " .\n")
            f.write("\n")
    return str(path)


def pretrain(corpus, run_dir, *extra):
    return cli.main(["sentence-pretrain", "--train", corpus, "--output-dir", str(run_dir),
                     *TINY, *extra])


def weights(run_dir):
    model = keras.saving.load_model(os.path.join(run_dir, "sentence_pretrainer.keras"),
                                    compile=False)
    return model, model.get_weights()


@pytest.mark.slow  # five short runs: about 2 minutes on 2 shared cores
def test_run_directory_and_resume_equal_an_uninterrupted_run(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt")  # 60 pairs: 5 steps of 12 per epoch
    straight = tmp_path / "straight"
    assert pretrain(corpus, straight, "--epochs", "2") == 0
    for name in ("config.json", "metrics.json", "sentence_pretrainer.keras",
                 "tokenizer/vocab.txt", "checkpoints/latest"):
        assert os.path.exists(straight / name), name
    metrics = json.load(open(straight / "metrics.json"))
    assert metrics["steps"] == 10 and metrics["pairs"] == 60
    assert set(metrics["last_epoch"]) == {"loss", "qt_loss", "sp_loss", "g2l_loss"}
    tokenizer = Tokenizer.load(str(straight / "tokenizer"))
    assert MASK in tokenizer.vocabulary
    model, trained = weights(straight)
    assert isinstance(model, SentencePretrainer) and model.units == 5

    resumed = tmp_path / "resumed"
    assert pretrain(corpus, resumed, "--epochs", "1") == 0
    capsys.readouterr()
    assert pretrain(corpus, resumed, "--epochs", "2") == 0
    assert "Resuming from" in capsys.readouterr().out
    assert json.load(open(resumed / "metrics.json"))["steps"] == 10
    for a, b in zip(weights(resumed)[1], trained):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # The first epoch alone ended elsewhere: the resumed run did train on.
    assert pretrain(corpus, tmp_path / "one", "--epochs", "1") == 0
    assert max(np.abs(a - b).max() for a, b in zip(weights(tmp_path / "one")[1], trained)) > 1e-4
    # Once done, a rerun trains nothing more.
    assert pretrain(corpus, resumed, "--epochs", "2") == 0
    assert "Already trained" in capsys.readouterr().out


def test_epoch_snapshots_hold_the_model_of_each_epoch_and_the_probe_reads_them(tmp_path,
                                                                               capsys):
    corpus = write_corpus(tmp_path / "corpus.txt")  # 60 pairs: 5 steps of 12 per epoch
    run_dir = tmp_path / "run"
    assert pretrain(corpus, run_dir, "--epochs", "2", "--snapshot-every-epoch") == 0
    assert sorted(os.listdir(run_dir / "snapshots")) == ["step-0000005", "step-0000010"]
    first = run_dir / "snapshots" / "step-0000005"
    info = json.load(open(first / "metrics.json"))
    assert info["steps"] == 5 and info["epochs"] == 1 and info["pairs_seen"] == 60
    assert info["epoch_seconds"] > 0 and info["loss_steps"] == 5
    # The first snapshot is the model a run of one epoch ends with; the last, the final model.
    assert pretrain(corpus, tmp_path / "one", "--epochs", "1") == 0
    for a, b in zip(weights(first)[1], weights(tmp_path / "one")[1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(weights(run_dir / "snapshots" / "step-0000010")[1], weights(run_dir)[1]):
        np.testing.assert_array_equal(a, b)
    task = tmp_path / "task.tsv"
    with open(task, "w") as f:
        f.write("text\tlabel\n")
        for i in range(20):
            f.write(f"the {'cat' if i % 2 else 'dog'} sat on the mat\t{i % 2}\n")
    capsys.readouterr()
    assert cli.main(["probe", "--run", str(first), "--file", str(task), "--folds", "2",
                     "--inner-folds", "2", "--c-values", "1"]) == 0
    assert "| step-0000005 |" in capsys.readouterr().out
    # Turning snapshots on for a resumed run is allowed (a run setting, not a model setting).
    assert pretrain(corpus, tmp_path / "one", "--epochs", "2", "--snapshot-every-epoch") == 0
    assert os.listdir(tmp_path / "one" / "snapshots") == ["step-0000010"]


def test_held_out_losses_are_each_objectives_mean_over_the_first_pairs(tmp_path):
    import tensorflow as tf

    from glomo_tf.data import sentences
    from glomo_tf.experiments.sentence_pretraining import heldout_losses

    run_dir = tmp_path / "run"
    assert pretrain(write_corpus(tmp_path / "corpus.txt"), run_dir, "--epochs", "1") == 0
    heldout = write_corpus(tmp_path / "heldout.txt", documents=10, seed=1)  # 30 pairs
    got = heldout_losses(str(run_dir), [heldout], "lines", max_pairs=25, batch_size=12,
                         max_length=10)
    assert got["pairs"] == 24  # two whole batches of the first 25 pairs
    # The reference: the whole file's pairs, cut to the first 24, each batch's objectives by
    # hand (Self Prediction's corruptions drawn from the same counter), averaged in NumPy.
    model, _ = weights(run_dir)
    tokenizer = Tokenizer.load(str(run_dir / "tokenizer"))
    columns = sentences.encode_documents(sentences.iter_documents([heldout], "lines"),
                                         tokenizer, 10)
    state = model.seed_generator.state
    state.assign(tf.stack([state[0], tf.zeros([], state.dtype)]))
    per_batch = [model.objective_losses({k: v[i:i + 12] for k, v in columns.items()})
                 for i in (0, 12)]
    for objective in ("qt", "sp", "g2l"):
        expected = np.mean([float(b[objective]) for b in per_batch])
        np.testing.assert_allclose(got[f"{objective}_loss"], expected, rtol=1e-5)
    np.testing.assert_allclose(got["loss"], got["qt_loss"] + got["sp_loss"] + got["g2l_loss"],
                               rtol=1e-5)
    # The same model and sentences give the same losses (the corruptions do not move on).
    assert heldout_losses(str(run_dir), [heldout], "lines", 25, 12, 10) == got
    with pytest.raises(ValueError, match="below one batch of 12; raise it"):
        heldout_losses(str(run_dir), [heldout], "lines", max_pairs=8, batch_size=12)
    with pytest.raises(ValueError, match="30 sentence pairs, fewer than one batch of 40"):
        heldout_losses(str(run_dir), [heldout], "lines", max_pairs=100, batch_size=40)


def test_a_snapshot_after_a_resumption_says_what_its_losses_cover(tmp_path):
    """Resumed mid-epoch from step 3 of 5, the epoch's losses cover its last 2 steps; a
    snapshot the run wrote before it was interrupted is kept as it was."""
    corpus = write_corpus(tmp_path / "corpus.txt")  # 5 steps of 12 per epoch
    run_dir = tmp_path / "run"
    assert pretrain(corpus, run_dir, "--epochs", "1", "--snapshot-every-epoch") == 0
    snapshot = run_dir / "snapshots" / "step-0000005" / "metrics.json"
    whole = json.load(open(snapshot))
    assert whole["loss_steps"] == 5

    def back_to_step_3():
        shutil.rmtree(run_dir / "checkpoints" / "ckpt-0000000005")
        (run_dir / "checkpoints" / "latest").write_text("ckpt-0000000003")
        return pretrain(corpus, run_dir, "--epochs", "1", "--snapshot-every-epoch")

    assert back_to_step_3() == 0
    assert json.load(open(snapshot)) == whole  # kept
    shutil.rmtree(snapshot.parent)
    assert back_to_step_3() == 0
    resumed = json.load(open(snapshot))
    assert resumed["loss_steps"] == 2 and resumed["steps"] == 5
    assert resumed["last_epoch"] != whole["last_epoch"]


def test_changed_settings_are_refused_on_resume(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt")
    run_dir = tmp_path / "run"
    assert pretrain(corpus, run_dir, "--epochs", "1", "--objectives", "qt", "sp") == 0
    capsys.readouterr()
    assert pretrain(corpus, run_dir, "--epochs", "2", "--objectives", "qt") == 2
    err = capsys.readouterr().err
    assert "objectives" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_copied_run_directory_resumes(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt")
    assert pretrain(corpus, tmp_path / "run", "--epochs", "1") == 0
    shutil.copytree(tmp_path / "run", tmp_path / "copy")
    capsys.readouterr()
    assert pretrain(corpus, tmp_path / "copy", "--epochs", "2") == 0
    out = capsys.readouterr().out
    assert "Resuming from" in out
    assert json.load(open(tmp_path / "copy" / "metrics.json"))["steps"] == 10
    assert json.load(open(tmp_path / "copy" / "config.json"))["output_dir"] == str(
        tmp_path / "copy")
    # The same corpus named by another path is the same setting; another corpus is not.
    other_name = os.path.join(str(tmp_path), ".", "corpus.txt")
    assert pretrain(other_name, tmp_path / "copy", "--epochs", "3") == 0
    assert "Resuming from" in capsys.readouterr().out
    other = write_corpus(tmp_path / "other.txt", seed=1)
    assert pretrain(other, tmp_path / "copy", "--epochs", "4") == 2
    assert "train" in capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--objectives-per-batch", "0"], "--objectives-per-batch"),
    (["--batch-size", "1"], "--batch-size must be at least 2"),
    (["--batch-size", "500"], "fewer than one batch"),
    (["--graph-run", "nowhere"], "graph_predictor.keras and is no preset"),
    (["--graph-run", "glomo_books_en", "--vocab", "nowhere"], "leave out --vocab"),
])
def test_one_line_errors(tmp_path, capsys, extra, message):
    corpus = write_corpus(tmp_path / "corpus.txt")
    assert pretrain(corpus, tmp_path / "run", *extra) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow  # a glomo pretrain run, a sentence-pretrain run and a probe
def test_graph_run_feeds_glomo_graphs_and_probe_reads_the_run(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt")
    graph_run = tmp_path / "glomo"
    assert cli.main(["pretrain", "--train", corpus, "--output-dir", str(graph_run),
                     "--window", "8", "--shift", "4", "--hidden-dim", "8", "--layers", "1",
                     "--heads", "2", "--conv-layers", "1", "--decoder-layers", "1",
                     "--context-length", "1", "--batch-size", "4", "--epochs", "1",
                     "--steps-per-epoch", "2", "--verbose", "0"]) == 0
    run_dir = tmp_path / "run"
    assert pretrain(corpus, run_dir, "--epochs", "1", "--graph-run", str(graph_run)) == 0
    model, _ = weights(run_dir)
    assert model.source_encoder.transfer is not None
    glomo_vocab = Tokenizer.load(str(graph_run / "tokenizer")).vocabulary.tokens
    assert Tokenizer.load(str(run_dir / "tokenizer")).vocabulary.tokens == glomo_vocab + [MASK]
    task = tmp_path / "task.tsv"
    rng = np.random.default_rng(0)
    with open(task, "w") as f:
        f.write("text\tlabel\n")
        for i in range(40):
            f.write(f"the {'cat' if i % 2 else 'dog'} sat on {rng.choice(WORDS)}\t{i % 2}\n")
    capsys.readouterr()
    assert cli.main(["probe", "--run", str(run_dir), "--baselines", "bow", "random",
                     "--glomo-run", str(graph_run), "--file", str(task), "--folds", "2",
                     "--inner-folds", "2", "--c-values", "1"]) == 0
    out = capsys.readouterr().out
    for name in ("| run |", "| bow |", "| random |", "| glomo:glomo |"):
        assert name in out


def test_a_built_in_preset_feeds_its_frozen_graphs(tmp_path):
    """``--graph-run NAME``: a built-in preset's predictor, unchanged by training, and its
    tokenizer (plus [MASK]) read the corpus."""
    from glomo_tf import load_preset

    corpus = write_corpus(tmp_path / "corpus.txt")
    run_dir = tmp_path / "run"
    assert pretrain(corpus, run_dir, "--epochs", "1", "--steps-per-epoch", "2",
                    "--graph-run", "glomo_books_en") == 0
    model, _ = weights(run_dir)
    predictor, tokenizer = load_preset("glomo_books_en")
    assert Tokenizer.load(str(run_dir / "tokenizer")).vocabulary.tokens == \
        tokenizer.vocabulary.tokens + [MASK]
    trained = model.source_encoder.transfer.graph_predictor
    assert trained is not None and not trained.trainable
    for saved, preset in zip(trained.get_weights(), predictor.get_weights(), strict=True):
        np.testing.assert_array_equal(saved, preset)


def test_the_glomo_command_reads_a_run_in_a_fresh_process(tmp_path):
    """The ``glomo`` command imports its classes lazily: glomo probe must still load the run's
    SentencePretrainer (a fresh interpreter started as the console script)."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    assert pretrain(corpus, tmp_path / "run", "--epochs", "1") == 0
    pool = tmp_path / "pool.txt"
    pool.write_text("the cat sat on the mat .\nthe dog ran under the house .\na big red dog .\n")
    as_the_command = ("import sys; sys.argv[0] = 'glomo'; from glomo_tf import cli; "
                      "sys.exit(cli.main(sys.argv[1:]))")
    done = subprocess.run(
        [sys.executable, "-c", as_the_command, "probe", "--run", str(tmp_path / "run"),
         "--neighbours", "the cat sat on the mat", "--pool", str(pool), "--k", "2",
         "--output-dir", str(tmp_path / "probe")],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.load(open(tmp_path / "probe" / "probe.json"))["neighbours"]
    assert [len(entry["neighbours"]) for entry in found] == [2]
    assert found[0]["neighbours"][0]["sentence"] == "the cat sat on the mat ."


@pytest.mark.slow  # four toy pretraining runs and a probe: about 3 minutes on 2 shared cores
@pytest.mark.skipif(not os.path.isdir(os.path.join(REPO, os.pardir, "shared", "data",
                                          "wikitext2")),
    reason="the shared WikiText-2, MR, SUBJ and SST copies are absent")
def test_the_measured_example_runs_at_toy_size(tmp_path):
    import importlib.util

    path = os.path.join(REPO, "examples",
                        "sentence_encoders.py")
    spec = importlib.util.spec_from_file_location("sentence_encoders", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    output = tmp_path / "out.json"
    out = example.main(["--tiny", "--runs-dir", str(tmp_path / "runs"), "--output", str(output),
                        "--precision", "mixed_bfloat16"])
    saved = json.load(open(output))
    for name in example.VARIANTS:  # the flag reaches every pretraining run
        with open(tmp_path / "runs" / name / "config.json") as f:
            assert json.load(f)["precision"] == "mixed_bfloat16", name
    assert set(saved["probe"]) == set(example.VARIANTS) | {"bow", "random"}
    for row in saved["probe"].values():
        assert set(row) == {"mr", "subj", "sst2"}
        assert all(0.0 <= r["accuracy"] <= 1.0 for r in row.values())
    assert set(saved["comparisons"]["drop_when_left_out"]) == {"qt", "sp", "g2l"}
    for name, metrics in saved["pretraining"].items():
        assert metrics["steps"] == 3, name  # the same budget for every objective set
    assert out["table"].startswith("| encoder | mr | subj | sst2 |")


def test_books_format_trains_on_sentences_of_prose_within_each_book(tmp_path, capsys):
    """--format books on a gzipped file of prose paragraphs (several sentences a line, blank lines
    between books): the pairs are the consecutive sentences inside each book."""
    import gzip

    rng = random.Random(3)
    path = tmp_path / "books.txt.gz"
    sentences_per_book = []
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for _ in range(6):
            count = 0
            for _ in range(3):  # paragraphs of 2 or 3 sentences
                n = rng.randint(2, 3)
                handle.write(" ".join(  # (no one-letter word: "a." would read as an initial)
                    "Mr. " + " ".join(rng.choice(WORDS[2:]) for _ in range(4)) + "."
                    for _ in range(n)) + "\n")
                count += n
            handle.write("\n")
            sentences_per_book.append(count)
    tiny = [a for a in TINY]
    tiny[tiny.index("lines")] = "books"
    assert cli.main(["sentence-pretrain", "--train", str(path), "--output-dir",
                     str(tmp_path / "run"), *tiny, "--epochs", "1"]) == 0
    pairs = sum(n - 1 for n in sentences_per_book)
    assert f"{pairs} sentence pairs" in capsys.readouterr().out


def _example(name):
    import importlib.util

    path = os.path.join(REPO, "examples",
                        f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # a toy run with two snapshots, probed four times: about a minute
def test_the_probe_curve_reads_each_snapshot_resumes_and_merges(tmp_path):
    curve = _example("sentence_curve")
    run_dir, task = curve.tiny_run(str(tmp_path))
    common = ["--run", run_dir, "--file", task, "--folds", "2", "--inner-folds", "2",
              "--c-values", "1", "10000"]
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    # Two processes' share of the work: the first snapshot; the second with the baselines.
    assert curve.main(common + ["--snapshots", "step-0000005", "--output", str(first)]) == 0
    part = json.load(open(first))
    assert list(part["curve"]) == ["step-0000005"] and not part["baselines"]
    assert curve.main(common + ["--snapshots", "step-0000010", "--output", str(second),
                                "--merge", str(first)]) == 0
    record = json.load(open(second))
    assert [(v["steps"], v["pairs_seen"]) for v in record["curve"].values()] == [(5, 60),
                                                                                (10, 120)]
    assert record["baselines"]["snapshot"] == "step-0000010"
    # The task's label is the word cat or dog: the bag of words reads it off exactly.
    assert record["baselines"]["results"]["bow"]["task"]["accuracy"] == 1.0
    for point in record["curve"].values():
        assert 0.0 <= point["probe"]["task"]["accuracy"] <= 1.0
        assert set(point["losses"]) == {"loss", "qt_loss", "sp_loss", "g2l_loss"}
        assert point["loss_steps"] == 5  # every step of its epoch
    assert "| 120 pairs |" in record["table"] and "| bow (step-0000010) |" in record["table"]
    # Everything probed already is kept as it is: a rerun probes nothing.
    kept = record["curve"]
    assert curve.main(common + ["--output", str(second)]) == 0
    again = json.load(open(second))
    assert again["curve"] == kept and again["wall_time_s_this_call"] < 5
    with pytest.raises(SystemExit, match="no snapshot step-9"):
        curve.main(common + ["--snapshots", "step-9", "--output", str(second)])
    # Probes of other settings are never mixed into one file.
    assert again["probe_settings"]["max_iter"] == 100
    with pytest.raises(SystemExit, match="was probed with .* give the same settings"):
        curve.main(common + ["--max-iter", "1000", "--output", str(second)])
    with pytest.raises(SystemExit, match="was probed with .*'pooling': 'final'"):
        curve.main(common + ["--pooling", "max", "--output", str(second)])
    # Max-pooled states, in a file of their own: the newest snapshot and its baselines.
    pooled = tmp_path / "pooled.json"
    assert curve.main(common + ["--pooling", "max", "--snapshots", "step-0000010", "--output",
                                str(pooled)]) == 0
    record = json.load(open(pooled))
    assert record["probe_settings"]["pooling"] == "max" and list(record["curve"]) == [
        "step-0000010"]
    assert set(record["baselines"]["results"]) == {"bow", "random"}
    assert record["baselines"]["results"]["bow"]["task"]["accuracy"] == 1.0
    # Held-out losses, added to the points already probed (nothing probed again), at the
    # run's batch size; later calls give the same held-out settings or none.
    corpus = os.path.join(os.path.dirname(run_dir), "corpus.txt")
    heldout = ["--heldout", corpus, "--heldout-pairs", "30"]
    assert curve.main(common + heldout + ["--output", str(second)]) == 0
    record = json.load(open(second))
    assert record["heldout"] == {"files": [corpus], "pairs": 30, "batch_size": 12}
    assert {k: v["probe"] for k, v in record["curve"].items()} == {
        k: v["probe"] for k, v in kept.items()}
    first_losses = [v["heldout_losses"] for v in record["curve"].values()]
    assert [x["pairs"] for x in first_losses] == [24, 24]
    assert first_losses[1]["loss"] < first_losses[0]["loss"]  # the text it trained on
    assert curve.main(common + ["--output", str(second)]) == 0
    assert json.load(open(second))["heldout"] == record["heldout"]
    with pytest.raises(SystemExit, match="holds held-out losses of .* give the same --heldout"):
        curve.main(common + ["--heldout", corpus, "--output", str(second)])


def test_short_epochs_say_they_read_the_corpus_part_after_part(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt")  # 60 pairs; epochs of 2 steps of 12
    assert pretrain(corpus, tmp_path / "run", "--epochs", "1", "--steps-per-epoch", "2") == 0
    assert ("60 sentence pairs, 18 units, 2 steps of 12 per epoch (an epoch reads the next part "
            "of them: all in 3 epochs).") in capsys.readouterr().out
