"""``glomo pretrain``: clear one-line errors, the run directory, TensorBoard logs, and resuming
after a SIGKILL at exactly the data position and state an uninterrupted run would have had."""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from glomo_tf import load_graph_predictor, training
from glomo_tf.data.vocabulary import Tokenizer
from _paths import REPO
from _tiny_runs import PRETRAIN_TINY as TINY, PROBE, glomo_pretrain, write_corpus

RUNNER = os.path.join(REPO, "tests", "_pretrain_runner.py")


def events(directory):
    found = []
    for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                found.append((value.tag, event.step, value))
    return found


def scalar(value):
    return float(tf.make_ndarray(value.tensor))


# ---------------------------------------------------------------------- errors
@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "corpus.txt")


def expect_usage_error(capsys, argv, *fragments):
    code = glomo_pretrain(*argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err  # one line, no traceback
    assert lines[0].startswith("glomo pretrain: error: "), err
    for fragment in fragments:
        assert fragment in lines[0], err
    return lines[0]


def test_missing_corpus_argument(tmp_path, capsys):
    expect_usage_error(capsys, ["--output-dir", str(tmp_path / "run")], "--train", "--tfds")


def test_train_and_tfds_together(tmp_path, corpus, capsys):
    expect_usage_error(capsys, ["--train", corpus, "--tfds", "lm1b", "--output-dir",
                                str(tmp_path / "run")], "alternatives")


def test_missing_file(tmp_path, capsys):
    missing = str(tmp_path / "nope" / "*.txt")
    expect_usage_error(capsys, ["--train", missing, "--output-dir", str(tmp_path / "run")],
                       "No file matches", missing)


def test_empty_file(tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    expect_usage_error(capsys, ["--train", str(tmp_path / "empty.txt"), "--output-dir",
                                str(tmp_path / "run")], "empty")


def test_directory_instead_of_files(tmp_path, capsys):
    (tmp_path / "texts").mkdir()
    expect_usage_error(capsys, ["--train", str(tmp_path / "texts"), "--output-dir",
                                str(tmp_path / "run")], "is a directory")


def test_corpus_too_small_for_one_batch(tmp_path, capsys):
    (tmp_path / "small.txt").write_text("the cat sat on the mat\n" * 3)  # 18 units
    expect_usage_error(capsys, ["--train", str(tmp_path / "small.txt"), *TINY, "--output-dir",
                                str(tmp_path / "run")], "too small for one batch")


@pytest.mark.parametrize("argv, fragment", [
    (["--positions", "some"], "--positions must be a positive integer or 'all'"),
    (["--window", "3", "--context-length", "3"], "must be longer than --context-length"),
    (["--hidden-dim", "10", "--heads", "3"], "must be divisible by --num-heads"),
    (["--batch-size", "2", "--global-batch-size", "4"], "alternatives"),
])
def test_inconsistent_settings(tmp_path, corpus, capsys, argv, fragment):
    expect_usage_error(capsys, ["--train", corpus, *argv, "--output-dir", str(tmp_path / "r")],
                       fragment)


@pytest.mark.parametrize("argv, fragment", [
    (["--hidden-dim", "-16"], "--hidden-dim must be at least 1, got -16"),
    (["--vocab-size", "-5"], "--vocab-size must be at least 3, got -5"),
    (["--heads", "0"], "--num-heads must be at least 1, got 0"),
    (["--epochs", "-1"], "--epochs must be at least 1, got -1"),
    (["--batch-size", "-8"], "--batch-size must be at least 1, got -8"),
    (["--validation-fraction", "1.5"], "--validation-fraction must be in [0, 1), got 1.5"),
    (["--learning-rate", "0"], "--learning-rate must be > 0"),
    (["--normalization", "entmax", "--entmax-alpha", "1"],
     "--entmax-alpha must be in (1, 2], got 1; alpha 1 is --normalization softmax"),
])
def test_out_of_range_flags_are_refused_before_the_corpus_is_read(tmp_path, capsys, argv,
                                                                  fragment):
    """The corpus named here does not exist: the range error must come first (no vocabulary
    built, nothing read), as one line."""
    missing = str(tmp_path / "not-read-*.txt")
    expect_usage_error(capsys, ["--train", missing, *argv, "--output-dir", str(tmp_path / "r")],
                       fragment)
    assert not (tmp_path / "r" / "tokenizer").exists()


def test_a_corpus_of_random_bytes_is_refused_with_the_share_undecodable(tmp_path, capsys):
    """Bytes that are not UTF-8 become U+FFFD; a corpus mostly made of them is refused with the
    count, unless --max-undecodable says to go on."""
    rng = np.random.default_rng(0)
    noise = tmp_path / "noise.txt"
    noise.write_bytes(b"\n".join(rng.integers(128, 256, size=40, dtype=np.uint8).tobytes()
                                 for _ in range(50)))
    line = expect_usage_error(capsys, ["--train", str(noise), "--output-dir", str(tmp_path / "r")],
                              "of 50 lines", "not UTF-8", "--max-undecodable")
    assert "(100.0%)" in line
    # Allowed: the run says how much was replaced and trains.
    assert glomo_pretrain("--train", str(noise), "--max-undecodable", "1", *TINY, "--epochs", "1",
                          "--steps-per-epoch", "1", "--output-dir", str(tmp_path / "r2")) == 0
    assert "Note: 50 of 50 lines (100.0%) hold bytes that are not UTF-8" in capsys.readouterr().out


def test_sampled_positions_the_final_evaluation_is_told_apart_from_the_bar(tmp_path, corpus,
                                                                          capsys):
    """With --positions N each evaluation decodes from other positions: metrics.json keeps the
    final evaluation and the bar's last-epoch figure, and the run says which is which."""
    run = tmp_path / "run"
    argv = [*TINY, "--positions", "2", "--validation-fraction", "0.2", "--epochs", "1",
            "--steps-per-epoch", "2"]
    assert glomo_pretrain("--train", corpus, *argv, "--output-dir", str(run)) == 0
    metrics = json.loads((run / "metrics.json").read_text())
    out = capsys.readouterr().out
    assert (f"Validation perplexity of the final model: {metrics['val_perplexity']:.2f} (a fresh "
            f"evaluation; the bar's {metrics['last_epoch_val_perplexity']:.2f} after the last "
            "epoch decoded from other sampled positions: --positions 2)") in out


def test_a_run_that_never_trained_leaves_nothing_to_resume(tmp_path, capsys):
    """Its settings and tokenizer do not bind the next attempt in the same directory."""
    run = str(tmp_path / "run")
    (tmp_path / "a.txt").write_text("the cat sat on the mat\n" * 3)
    (tmp_path / "b.txt").write_text("one two three four\n" * 3)
    expect_usage_error(capsys, ["--train", str(tmp_path / "a.txt"), *TINY, "--output-dir", run],
                       "too small for one batch")
    assert Tokenizer.load(os.path.join(run, "tokenizer")).vocabulary_size == 5 + 2
    # Other settings and another corpus: no "other settings" refusal, a new vocabulary.
    expect_usage_error(capsys, ["--train", str(tmp_path / "b.txt"), *TINY, "--window", "16",
                                "--output-dir", run], "too small for one batch")
    assert Tokenizer.load(os.path.join(run, "tokenizer")).vocabulary_size == 4 + 2
    assert json.loads(open(os.path.join(run, "config.json")).read())["window"] == 16


def test_multi_worker_without_tf_config(tmp_path, corpus, capsys, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    expect_usage_error(capsys, ["--train", corpus, *TINY, "--strategy", "multi-worker",
                                "--output-dir", str(tmp_path / "run")], "TF_CONFIG")


# ---------------------------------------------------------------------- a finished run
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One completed in-process run: 2 epochs of 3 steps, a validation split, one probe."""
    tmp = tmp_path_factory.mktemp("pretrain")
    corpus = write_corpus(tmp / "corpus.txt")
    run = str(tmp / "run")
    argv = ["--train", corpus, *TINY, "--epochs", "2", "--steps-per-epoch", "3",
            "--checkpoint-every", "2", "--validation-fraction", "0.25", "--learning-rate", "0.5",
            "--probe", PROBE, "--verbose", "0", "--output-dir", run]
    keras.utils.set_random_seed(0)
    assert glomo_pretrain(*argv) == 0
    return {"dir": run, "argv": argv, "corpus": corpus}


def test_run_directory_holds_config_tokenizer_checkpoints_models_and_metrics(finished_run):
    run = finished_run["dir"]
    config = json.loads(open(os.path.join(run, "config.json")).read())
    assert config["hidden_dim"] == 8 and config["num_positions"] is None
    assert config["train"] == [finished_run["corpus"]] and config["epochs"] == 2
    tokenizer = Tokenizer.load(os.path.join(run, "tokenizer"))
    words = set(open(finished_run["corpus"]).read().split())
    assert tokenizer.vocabulary_size == len(words) + 2  # <pad>, <unk>
    assert open(os.path.join(run, "checkpoints", "latest")).read().strip() == "ckpt-0000000006"

    metrics = json.loads(open(os.path.join(run, "metrics.json")).read())
    assert metrics["steps"] == 6
    assert metrics["train_tokens_per_s"] > 0
    assert np.isfinite(metrics["val_loss"]) and metrics["val_perplexity"] > 1.0
    # Decoding from every position (--positions all), the final evaluation is the one the
    # progress bar showed after the last epoch (same weights, same positions).
    assert metrics["last_epoch_val_perplexity"] == pytest.approx(metrics["val_perplexity"],
                                                                 rel=1e-5)

    # The saved model is the last checkpoint's model; the saved graph predictor is its part.
    model = keras.saving.load_model(os.path.join(run, "pretrainer.keras"))
    assert int(model.optimizer.iterations.numpy()) == 6
    restored = keras.saving.load_model(os.path.join(run, "pretrainer.keras"))
    training.restore_latest(restored, os.path.join(run, "checkpoints"))
    for a, b in zip(model.weights, restored.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    predictor = load_graph_predictor(os.path.join(run, "graph_predictor.keras"))
    ids = tokenizer.encode([PROBE, "the dog likes the old car ."], max_length=12)
    np.testing.assert_array_equal(predictor(ids)["graphs"].numpy(),
                                  model.graph_predictor(ids)["graphs"].numpy())

    # RUN/preset: the same predictor and tokenizer, with what the run knows about them.
    from glomo_tf.presets import preset_metadata
    from glomo_tf.saving import load_preset
    preset_predictor, preset_tokenizer = load_preset(os.path.join(run, "preset"))
    np.testing.assert_array_equal(preset_tokenizer.encode([PROBE], max_length=12).numpy(),
                                  tokenizer.encode([PROBE], max_length=12).numpy())
    np.testing.assert_allclose(preset_predictor(ids)["graphs"].numpy(),
                               model.graph_predictor(ids)["graphs"].numpy(), atol=1e-6)
    info = preset_metadata(os.path.join(run, "preset"))
    batch = config["batch_size"]
    assert info["tokens_seen"] == 6 * batch * config["window"] and info["training_steps"] == 6
    assert info["corpus"] == ["corpus.txt"] and info["made_by"] == "glomo pretrain"
    assert info["validation_perplexity"] == pytest.approx(metrics["val_perplexity"])


def test_tensorboard_has_scalars_hparams_and_graph_images(finished_run):
    from tensorboard.plugins.hparams import plugin_data_pb2
    logs = os.path.join(finished_run["dir"], "logs")
    train = events(os.path.join(logs, "train"))
    by_tag = {}
    for tag, step, value in train:
        by_tag.setdefault(tag, {})[step] = scalar(value)
    for name in ("loss", "perplexity", "tokens_per_s", "learning_rate"):
        assert sorted(by_tag[f"epoch_{name}"]) == [0, 1], name
    assert by_tag["epoch_learning_rate"][0] == 0.5  # --learning-rate, during the first epoch
    assert all(v > 0 for v in by_tag["epoch_tokens_per_s"].values())
    for step in (0, 1):
        loss, perplexity = by_tag["epoch_loss"][step], by_tag["epoch_perplexity"][step]
        assert 0 < loss < 10 and 1 < perplexity < np.exp(10)
    # Per-step curves are numbered by the optimizer step.
    assert sorted(by_tag["batch_loss"]) == [1, 2, 3, 4, 5, 6]
    validation = {tag: step for tag, step, _ in events(os.path.join(logs, "validation"))}
    assert "epoch_loss" in validation

    hparams = [v for tag, _, v in events(os.path.join(logs, "hparams"))
               if v.metadata.plugin_data.plugin_name == "hparams"]
    assert len(hparams) == 1
    info = plugin_data_pb2.HParamsPluginData.FromString(
        hparams[0].metadata.plugin_data.content).session_start_info.hparams
    assert info["hidden_dim"].number_value == 8
    assert info["learning_rate"].number_value == 0.5
    assert info["optimizer"].string_value == "sgd"
    assert json.loads(info["probe"].string_value) == [PROBE]

    images = [(tag, step, v) for tag, step, v in events(os.path.join(logs, "graphs"))]
    tags = {f"probe0/{d}/layer{l}" for d in ("forward", "backward") for l in (1, 2)}
    assert {tag for tag, _, _ in images} == tags
    assert sorted(step for _, step, _ in images) == [0] * 4 + [1] * 4
    for _, _, value in images:
        width, height, png = tf.make_ndarray(value.tensor)[:3]
        image = tf.io.decode_png(png).numpy()
        assert image.dtype == np.uint8 and image.shape[:2] == (int(height), int(width))
        assert image.shape[2] in (3, 4) and image.std() > 0  # a picture, not a blank canvas


def test_resuming_with_other_settings_is_refused(finished_run, capsys):
    argv = list(finished_run["argv"])
    argv[argv.index("--hidden-dim") + 1] = "16"
    line = expect_usage_error(capsys, argv, "other settings", "hidden_dim: 8 -> 16")
    assert "--output-dir" in line


def test_an_entmax_alpha_run_trains_and_its_predictor_keeps_the_alpha(tmp_path, corpus):
    run = str(tmp_path / "run")
    assert glomo_pretrain("--train", corpus, *TINY, "--normalization", "entmax",
                          "--entmax-alpha", "1.25", "--epochs", "1", "--steps-per-epoch", "2",
                          "--verbose", "0", "--output-dir", run) == 0
    config = json.loads(open(os.path.join(run, "config.json")).read())
    assert (config["normalization"], config["entmax_alpha"]) == ("entmax", 1.25)
    predictor = load_graph_predictor(os.path.join(run, "graph_predictor.keras"))
    assert (predictor.normalization, predictor.entmax_alpha) == ("entmax", 1.25)
    ids = np.array([[3, 4, 5, 6, 7, 0]], np.int32)
    sums = predictor(ids)["graphs"].numpy().sum(-1)[0, :, :, :, 1:5]  # real rows with sources
    np.testing.assert_allclose(sums[0], 1.0, atol=1e-5)  # forward rows 1..4
    np.testing.assert_allclose(sums[1][..., :3], 1.0, atol=1e-5)  # backward rows 1..3


def test_a_run_on_a_given_vocabulary_holds_that_tokenizer(tmp_path, corpus):
    """--vocab DIR: the run directory still holds tokenizer/ (what --run readers load), a copy of
    the given one."""
    from glomo_tf.data.vocabulary import Tokenizer

    given = Tokenizer.build(open(corpus).read().splitlines()[:40], max_size=50)
    given.save(str(tmp_path / "vocab"))
    run = str(tmp_path / "run")
    argv = ["--train", corpus, "--vocab", str(tmp_path / "vocab"), *TINY, "--epochs", "1",
            "--steps-per-epoch", "2", "--verbose", "0", "--output-dir", run]
    assert glomo_pretrain(*argv) == 0
    copied = Tokenizer.load(os.path.join(run, "tokenizer"))
    assert copied.vocabulary.tokens == given.vocabulary.tokens
    assert copied.get_config() == given.get_config()


def test_run_directories_from_before_entmax_alpha_resume_at_its_default():
    from glomo_tf.experiments import pretraining

    current = {"entmax_alpha": 1.5, "epochs": 3}
    pretraining.check_resumable({"epochs": 1}, current)
    with pytest.raises(ValueError, match="entmax_alpha: 1.5 -> 1.25"):
        pretraining.check_resumable({"epochs": 1}, dict(current, entmax_alpha=1.25))


def test_rerunning_a_finished_run_trains_no_further(finished_run, capsys):
    argv = list(finished_run["argv"])
    argv[argv.index("--verbose") + 1] = "2"  # may change when resuming
    assert glomo_pretrain(*argv) == 0
    out = capsys.readouterr().out
    assert "Resuming from" in out and "step 6" in out
    assert "Already trained for 2 epochs (6 steps)" in out
    metrics = json.loads(open(os.path.join(finished_run["dir"], "metrics.json")).read())
    assert metrics["steps"] == 6


# ---------------------------------------------------------------------- kill and resume
def start(argv, output_dir, log_path, **env):
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **env)
    environment.pop("TF_CONFIG", None)
    log = open(log_path, "w")
    return subprocess.Popen([sys.executable, RUNNER, *argv, "--output-dir", output_dir],
                            stdout=log, stderr=subprocess.STDOUT, env=environment, cwd=REPO)


def finish(process, log_path, timeout=300):
    try:
        process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return open(log_path).read()


def final_weights(run_dir):
    return keras.saving.load_model(os.path.join(run_dir, "pretrainer.keras")).get_weights()


@pytest.mark.slow
def test_sigkilled_run_resumes_exactly_where_it_stopped(tmp_path):
    """A run SIGKILLed mid-epoch (step 21; last checkpoint at step 20) and run again ends with
    bit-identical weights to an uninterrupted run: the step counter, optimizer state (momentum),
    batch-norm statistics and data position (epoch 2, batch 6 of 15) all carry on exactly."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    argv = ["--train", corpus, *TINY, "--epochs", "2", "--steps-per-epoch", "15",
            "--checkpoint-every", "4", "--probe", PROBE, "--verbose", "2"]
    killed, reference = str(tmp_path / "killed"), str(tmp_path / "reference")
    paused = str(tmp_path / "paused")
    first = start(argv, killed, tmp_path / "first.log", GLOMO_TEST_PAUSE_AT_STEP="21",
                  GLOMO_TEST_PAUSED=paused)
    uninterrupted = start(argv, reference, tmp_path / "reference.log")
    try:
        deadline = time.monotonic() + 300
        while not os.path.exists(paused):
            assert first.poll() is None, open(tmp_path / "first.log").read()
            assert time.monotonic() < deadline, "the run never reached step 21"
            time.sleep(0.1)
        os.kill(first.pid, signal.SIGKILL)
        assert first.wait(timeout=60) == -signal.SIGKILL
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert open(os.path.join(killed, "checkpoints", "latest")).read().strip() == "ckpt-0000000020"
    assert not os.path.exists(os.path.join(killed, "metrics.json"))

    second = start(argv, killed, tmp_path / "second.log")
    output = finish(second, tmp_path / "second.log")
    assert second.returncode == 0, output
    assert (f"Resuming from {os.path.join(killed, 'checkpoints', 'ckpt-0000000020')}: step 20, "
            "epoch 2, batch 5 of 15.") in output
    reference_output = finish(uninterrupted, tmp_path / "reference.log")
    assert uninterrupted.returncode == 0, reference_output
    assert "Resuming" not in reference_output

    for run in (killed, reference):
        metrics = json.loads(open(os.path.join(run, "metrics.json")).read())
        assert metrics["steps"] == 2 * 15
    for a, b in zip(final_weights(killed), final_weights(reference)):
        np.testing.assert_array_equal(a, b)

    # The resumed run's per-step TensorBoard curve continues at step 21 instead of restarting.
    resumed_files = glob.glob(os.path.join(killed, "logs", "train",
                                           f"events.out.tfevents.*.{second.pid}.*"))
    steps = sorted(step for path in resumed_files
                   for tag, step, _ in events_of_file(path) if tag == "batch_loss")
    assert steps == list(range(21, 31))


def events_of_file(path):
    for event in tf.compat.v1.train.summary_iterator(path):
        for value in event.summary.value:
            yield value.tag, event.step, value


@pytest.mark.parametrize("known_count", [True, False])
def test_epochs_shorter_than_the_corpus_walk_through_all_of_it(known_count):
    """Five epochs of 5,000 examples over a corpus of 25,000 (more than the shuffle buffer) hold
    every example once; the sixth starts over. Each epoch is shuffled, and the same again when
    built anew (a resumed run), skipped batches included."""
    from glomo_tf.experiments.pretraining import epoch_stream

    examples = tf.data.Dataset.range(25_000)
    if not known_count:  # a stream of unknown length, its count given (glomo pretrain's windows)
        examples = examples.filter(lambda x: True)
        assert examples.cardinality() < 0
    stream = epoch_stream(examples, 100, 50, 7, 0, 6, count=None if known_count else 25_000)
    batches = [b.numpy() for b in stream.take(300)]
    epochs = [np.concatenate(batches[50 * e:50 * (e + 1)]) for e in range(6)]
    for e in range(5):
        np.testing.assert_array_equal(np.sort(epochs[e]), np.arange(5_000 * e, 5_000 * (e + 1)))
        assert np.mean(np.diff(epochs[e]) == 1) < 0.1  # shuffled within the epoch
    np.testing.assert_array_equal(np.sort(epochs[5]), np.arange(5_000))
    assert not np.array_equal(epochs[5], epochs[0])  # another epoch's shuffle
    again = epoch_stream(examples, 100, 50, 7, 2, 4, skip_batches=10,
                         count=None if known_count else 25_000)
    np.testing.assert_array_equal(np.concatenate([b.numpy() for b in again.take(90)]),
                                  np.concatenate(batches[110:200]))
    # Epochs as long as the corpus hold all of it, each in another order.
    whole = epoch_stream(examples, 100, 250, 7, 0, 2, count=None if known_count else 25_000)
    batches = [b.numpy() for b in whole.take(500)]
    first, second = np.concatenate(batches[:250]), np.concatenate(batches[250:])
    for epoch in (first, second):
        np.testing.assert_array_equal(np.sort(epoch), np.arange(25_000))
    assert not np.array_equal(first, second)
