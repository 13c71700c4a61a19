"""glomo_tf.training: crash-safe checkpoints (atomic writes, torn and unreadable checkpoints), the
chief-only rule, strategies, and the TensorBoard loggers (throughput, hyper-parameters, graph
images)."""

import glob
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from glomo_tf import GlomoPretrainer, training
from glomo_tf.data.vocabulary import Tokenizer

V, T = 20, 10


def tiny_model(hidden_dim=8):
    # conv_layers=1 keeps batch norm (moving statistics are non-trainable state to restore too);
    # SGD with momentum has optimizer state beyond the step counter. Eager: these tests take a
    # few steps each, fewer than it would take to trace the step into a graph.
    model = GlomoPretrainer.from_sizes(V, hidden_dim=hidden_dim, num_layers=2, num_heads=2,
                                       conv_layers=1, context_length=2, decoder_layers=1,
                                       num_positions=None)
    model.compile(optimizer=keras.optimizers.SGD(0.5, momentum=0.5), run_eagerly=True)
    model.build()
    return model


def batch(seed=0, size=4):
    return np.random.default_rng(seed).integers(1, V, size=(size, T)).astype("int32")


def train(model, steps, seed=0):
    for step in range(steps):
        model.train_on_batch(batch(seed + step))


def all_state(model):
    """Model weights (trainable and not) and optimizer variables, as NumPy arrays."""
    return ([w.numpy() for w in model.weights]
            + [keras.ops.convert_to_numpy(v) for v in model.optimizer.variables])


def assert_same_state(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def events(directory):
    """Every summary value written under ``directory``: a list of (tag, step, value proto)."""
    found = []
    for path in sorted(glob.glob(os.path.join(directory, "**", "events.out.tfevents.*"),
                                 recursive=True)):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                found.append((value.tag, event.step, value))
    return found


# ---------------------------------------------------------------------- checkpoints
def test_checkpoint_round_trip_restores_weights_optimizer_and_step(tmp_path):
    model = tiny_model()
    train(model, 2)
    path = training.write_checkpoint(model, str(tmp_path), {"step": 2, "epoch": 0, "note": "x"})
    assert os.path.basename(path) == "ckpt-0000000002"
    assert (tmp_path / "latest").read_text().strip() == "ckpt-0000000002"

    fresh = tiny_model()
    assert not np.array_equal(fresh.get_weights()[0], model.get_weights()[0])
    metadata = training.restore_latest(fresh, str(tmp_path))
    assert metadata["step"] == 2 and metadata["epoch"] == 0 and metadata["note"] == "x"
    assert metadata["path"] == path
    assert int(fresh.optimizer.iterations.numpy()) == 2
    assert_same_state(all_state(fresh), all_state(model))
    # The momentum was restored too: one more identical step keeps the two models identical.
    train(model, 1, seed=10)
    train(fresh, 1, seed=10)
    assert_same_state(all_state(fresh), all_state(model))


def test_restore_latest_without_checkpoints_returns_none(tmp_path):
    model = tiny_model()
    assert training.restore_latest(model, str(tmp_path / "missing")) is None
    assert training.restore_latest(model, str(tmp_path)) is None


def test_old_checkpoints_beyond_keep_are_deleted(tmp_path):
    model = tiny_model()
    for step in (1, 2, 3):
        training.write_checkpoint(model, str(tmp_path), {"step": step, "epoch": 0}, keep=2)
    assert training.list_checkpoints(str(tmp_path)) == ["ckpt-0000000002", "ckpt-0000000003"]
    assert (tmp_path / "latest").read_text().strip() == "ckpt-0000000003"
    assert sorted(os.listdir(tmp_path)) == ["ckpt-0000000002", "ckpt-0000000003", "latest"]


def test_staging_directory_left_by_a_killed_write_is_ignored_and_cleaned(tmp_path):
    model = tiny_model()
    train(model, 1)
    training.write_checkpoint(model, str(tmp_path), {"step": 1, "epoch": 0})
    saved = all_state(model)
    # A writer killed mid-write leaves its staging directory (a torn weights file, even its
    # metadata) and possibly a half-written pointer file; neither may be restored.
    staging = tmp_path / ".ckpt-0000000007.tmp-99999"
    staging.mkdir()
    (staging / "model.weights.h5").write_bytes(b"\x89HDF\r\n torn")
    (staging / "metadata.json").write_text(json.dumps({"step": 7, "epoch": 0}))
    (tmp_path / "latest.tmp-99999").write_text("ckpt-00000")
    assert training.list_checkpoints(str(tmp_path)) == ["ckpt-0000000001"]

    fresh = tiny_model()
    metadata = training.restore_latest(fresh, str(tmp_path))
    assert metadata["step"] == 1
    assert_same_state(all_state(fresh), saved)
    # The next checkpoint write removes the dead writer's leftovers.
    training.write_checkpoint(model, str(tmp_path), {"step": 2, "epoch": 0})
    assert sorted(os.listdir(tmp_path)) == ["ckpt-0000000001", "ckpt-0000000002", "latest"]


def test_checkpoint_renamed_but_not_yet_named_latest_is_not_used(tmp_path):
    """A kill between the rename and the pointer update: the pointer's checkpoint wins."""
    model = tiny_model()
    train(model, 1)
    training.write_checkpoint(model, str(tmp_path), {"step": 1, "epoch": 0})
    saved = all_state(model)
    pointer = (tmp_path / "latest").read_text()
    train(model, 1, seed=5)
    training.write_checkpoint(model, str(tmp_path), {"step": 2, "epoch": 0})
    (tmp_path / "latest").write_text(pointer)
    fresh = tiny_model()
    assert training.restore_latest(fresh, str(tmp_path))["step"] == 1
    assert_same_state(all_state(fresh), saved)


@pytest.mark.parametrize("damage", ["garbage_weights", "truncated_weights", "no_weights",
                                    "bad_metadata"])
def test_unreadable_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, capsys, damage):
    model = tiny_model()
    train(model, 1)
    training.write_checkpoint(model, str(tmp_path), {"step": 1, "epoch": 0})
    previous = all_state(model)
    train(model, 1, seed=3)
    newest = training.write_checkpoint(model, str(tmp_path), {"step": 2, "epoch": 0})
    weights = os.path.join(newest, "model.weights.h5")
    if damage == "garbage_weights":
        with open(weights, "wb") as f:
            f.write(os.urandom(2048))
    elif damage == "truncated_weights":
        size = os.path.getsize(weights)
        with open(weights, "r+b") as f:
            f.truncate(size // 2)
    elif damage == "no_weights":
        os.remove(weights)
    else:
        with open(os.path.join(newest, "metadata.json"), "w") as f:
            f.write('{"step": 2, "ep')

    fresh = tiny_model()
    metadata = training.restore_latest(fresh, str(tmp_path))
    assert metadata is not None and metadata["step"] == 1
    assert_same_state(all_state(fresh), previous)
    out = capsys.readouterr().out
    assert "ckpt-0000000002" in out and "unreadable" in out


@pytest.mark.filterwarnings("ignore:Skipping variable loading for optimizer")
def test_checkpoint_of_another_architecture_is_not_restored_silently(tmp_path):
    model = tiny_model()
    training.write_checkpoint(model, str(tmp_path), {"step": 0, "epoch": 0})
    other = tiny_model(hidden_dim=16)
    before = [w.numpy() for w in other.weights]
    assert training.restore_latest(other, str(tmp_path)) is None
    assert_same_state([w.numpy() for w in other.weights], before)
    assert int(other.optimizer.iterations.numpy()) == 0


# ---------------------------------------------------------------------- CrashSafeCheckpoint
def test_crash_safe_checkpoint_writes_every_n_steps_and_at_the_end(tmp_path):
    model = tiny_model()
    data = tf.data.Dataset.from_tensor_slices(batch(0, size=12)).batch(4)  # 3 steps per epoch

    class Snapshots(keras.callbacks.Callback):
        """The weights after every step (by optimizer step), for comparison with the files."""

        def __init__(self):
            super().__init__()
            self.weights = {}

        def on_train_batch_end(self, batch, logs=None):
            step = int(self.model.optimizer.iterations.numpy())
            self.weights[step] = [w.numpy() for w in self.model.weights]

    snapshots = Snapshots()
    callback = training.CrashSafeCheckpoint(str(tmp_path), every_steps=4, keep=10,
                                            extra_metadata={"run": "test"})
    model.fit(data, epochs=2, verbose=0, shuffle=False, callbacks=[snapshots, callback])
    names = training.list_checkpoints(str(tmp_path))
    assert names == [f"ckpt-{s:010d}" for s in (4, 6)]  # step 4, then the end (step 6)
    for name in names:
        meta = json.loads((tmp_path / name / "metadata.json").read_text())
        step = int(name[5:])
        assert meta["step"] == step and meta["run"] == "test"
        assert meta["epoch"] == (step - 1) // 3  # the epoch the step belongs to
        fresh = tiny_model()
        fresh.optimizer.build(fresh.trainable_variables)
        fresh.load_weights(str(tmp_path / name / "model.weights.h5"))
        for saved, expected in zip(fresh.weights, snapshots.weights[step]):
            np.testing.assert_array_equal(saved.numpy(), expected)
        assert int(fresh.optimizer.iterations.numpy()) == step


def test_only_the_chief_writes_checkpoints(tmp_path, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({
        "cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
        "task": {"type": "worker", "index": 1}}))
    model = tiny_model()
    callback = training.CrashSafeCheckpoint(str(tmp_path / "ckpt"), every_steps=1)
    model.fit(batch(0, size=8), batch_size=4, epochs=1, verbose=0, callbacks=[callback])
    assert not (tmp_path / "ckpt").exists()


def test_checkpoint_interval_must_be_positive():
    with pytest.raises(training.ConfigurationError, match=">= 1"):
        training.CrashSafeCheckpoint("unused", every_steps=0)


@pytest.mark.parametrize("config, chief", [
    (None, True),
    ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}}, True),
    ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}, False),
    ({"cluster": {"chief": ["c:1"], "worker": ["a:1"]}, "task": {"type": "chief", "index": 0}},
     True),
    ({"cluster": {"chief": ["c:1"], "worker": ["a:1"]}, "task": {"type": "worker", "index": 0}},
     False),
    ({"cluster": {"worker": ["a:1"]}}, True),
])
def test_is_chief(monkeypatch, config, chief):
    if config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    assert training.is_chief() is chief


# ---------------------------------------------------------------------- strategies
def test_make_strategy_default_and_errors(monkeypatch):
    assert training.make_strategy("default") is tf.distribute.get_strategy()
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(training.ConfigurationError, match="TF_CONFIG"):
        training.make_strategy("multi-worker")
    with pytest.raises(training.ConfigurationError, match="Unknown strategy 'horovod'"):
        training.make_strategy("horovod")


# ---------------------------------------------------------------------- loggers
class ScriptedClock:
    """``time.perf_counter`` returning the given readings in order."""

    def __init__(self, readings):
        self.readings = iter(readings)

    def perf_counter(self):
        return next(self.readings)


def test_throughput_logger_reports_tokens_per_second_and_learning_rate(monkeypatch):
    # Readings: epoch begin, batch 1 end, batch 2 end, epoch end; per epoch. The run's first
    # batch takes 20 s (tracing and compiling), the others 2 s.
    monkeypatch.setattr(training, "time", ScriptedClock([0, 20, 22, 23, 30, 32, 34, 35]))
    model = tiny_model()
    model.optimizer.learning_rate = 0.25
    seen = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(("batch", dict(logs)))

        def on_epoch_end(self, epoch, logs=None):
            seen.append(("epoch", dict(logs)))

    tokens_per_batch = 4 * T
    model.fit(batch(0, size=8), batch_size=4, epochs=2, verbose=0,
              callbacks=[training.ThroughputLogger(tokens_per_batch), Record()])
    assert [kind for kind, _ in seen] == ["batch"] * 2 + ["epoch"] + ["batch"] * 2 + ["epoch"]
    # The steady rate, from the end of each epoch's first batch: the compile's 20 s never count
    # (counted, the first epoch would read 2 batches in 23 s). No rate after a first batch.
    for i, (kind, logs) in enumerate(seen):
        if i % 3 == 0:
            assert "tokens_per_s" not in logs
        elif kind == "batch":
            assert logs["tokens_per_s"] == pytest.approx(tokens_per_batch / 2.0)
        else:
            assert logs["tokens_per_s"] == pytest.approx(tokens_per_batch / 3.0)
            assert logs["learning_rate"] == pytest.approx(0.25)


def test_hyperparameter_logger_writes_the_settings(tmp_path):
    from tensorboard.plugins.hparams import plugin_data_pb2
    settings = {"hidden_dim": 8, "learning_rate": 0.5, "optimizer": "sgd", "jit": False,
                "train": ["a.txt", "b.txt"], "head_dim": None}
    model = tiny_model()
    model.fit(batch(0), batch_size=4, epochs=1, verbose=0,
              callbacks=[training.HyperparameterLogger(str(tmp_path), settings)])
    values = [v for tag, _, v in events(str(tmp_path / "hparams"))
              if v.metadata.plugin_data.plugin_name == "hparams"]
    assert len(values) == 1
    data = plugin_data_pb2.HParamsPluginData.FromString(values[0].metadata.plugin_data.content)
    hparams = data.session_start_info.hparams
    assert set(hparams) == set(settings)
    assert hparams["hidden_dim"].number_value == 8
    assert hparams["learning_rate"].number_value == 0.5
    assert hparams["optimizer"].string_value == "sgd"
    assert hparams["jit"].bool_value is False
    assert json.loads(hparams["train"].string_value) == ["a.txt", "b.txt"]
    assert hparams["head_dim"].string_value == "null"


def test_graph_image_logger_draws_each_probe_direction_and_layer(tmp_path):
    from glomo_tf import viz
    lines = tf.data.Dataset.from_tensor_slices(["the cat sat on the mat", "a dog ran far"])
    tokenizer = Tokenizer.build(lines)
    probes = ["the cat ran", "a dog sat on the mat"]
    model = GlomoPretrainer.from_sizes(tokenizer.vocabulary_size, hidden_dim=8, num_layers=2,
                                       num_heads=2, conv_layers=1, context_length=2,
                                       decoder_layers=1, num_positions=None)
    model.compile(optimizer=keras.optimizers.SGD(0.5), run_eagerly=True)
    ids = tokenizer.encode(["the cat sat on the mat a dog", "a dog ran far the cat sat on"],
                           max_length=8)
    logger = training.GraphImageLogger(str(tmp_path), tokenizer, probes, max_length=16)
    model.fit(ids, batch_size=2, epochs=2, verbose=0, callbacks=[logger])

    found = [(tag, step, v) for tag, step, v in events(str(tmp_path / "graphs"))]
    expected_tags = {f"probe{i}/{d}/layer{l}" for i in range(2) for d in ("forward", "backward")
                     for l in (1, 2)}
    assert {tag for tag, _, _ in found} == expected_tags
    assert sorted({step for _, step, _ in found}) == [0, 1]  # one image per tag per epoch
    assert len(found) == 2 * len(expected_tags)

    # The last epoch's images are the graphs of the trained model, averaged over heads, cut to
    # each probe's length (independently recomputed and drawn here).
    probe_ids = tokenizer.encode(probes, max_length=16).numpy()
    graphs = model.graph_predictor(probe_ids, training=False)["graphs"].numpy().mean(axis=3)
    for tag, step, value in found:
        if step != 1:
            continue
        probe, direction, layer = tag.split("/")
        i, z, l = int(probe[5:]), ("forward", "backward").index(direction), int(layer[5:]) - 1
        n = int((probe_ids[i] != 0).sum())
        assert n == len(probes[i].split())
        expected = viz.graph_image(graphs[i, z, l, :n, :n], probes[i].split(),
                                   title=f"{direction} layer {l + 1}")
        logged = tf.io.decode_image(tf.make_ndarray(value.tensor)[2]).numpy()
        assert logged.shape == expected.shape
        np.testing.assert_array_equal(logged, expected)

    # Liveness scalars of the last epoch, recounted from the probes' full graphs by hand.
    full = model.graph_predictor(probe_ids, training=False)["graphs"].numpy()  # [B, 2, L, K, T, T]
    live, rows = np.zeros((2, 2, 2)), np.zeros(2)
    for i, probe in enumerate(probes):
        n = len(probe.split())
        for z in range(2):
            for t in range(n):
                if (t > 0) if z == 0 else (t < n - 1):  # rows that have an admissible source
                    rows[z] += 1
                    live[z] += full[i, z, :, :, t].sum(-1) > 0.5
    scalars = {(tag, step): float(tf.make_ndarray(v.tensor))
               for tag, step, v in events(str(tmp_path / "liveness"))}
    assert set(scalars) == {(t, s) for t in ("live_rows/forward", "live_rows/backward",
                                              "dead_graphs") for s in (0, 1)}
    for z, direction in enumerate(("forward", "backward")):
        assert scalars[(f"live_rows/{direction}", 1)] == pytest.approx(live[z].mean() / rows[z])
    assert scalars[("dead_graphs", 1)] == (live == 0).sum()


def test_graph_images_are_written_every_epoch_beside_step_based_tensorboard(tmp_path):
    """TensorBoard with update_freq=3 keeps record_if(step % 3 == 0) active during fit; the graph
    images must still be written at the end of epochs that end on other steps (2 and 4 here)."""
    lines = tf.data.Dataset.from_tensor_slices(["the cat sat on the mat", "a dog ran far"])
    tokenizer = Tokenizer.build(lines)
    model = GlomoPretrainer.from_sizes(tokenizer.vocabulary_size, hidden_dim=8, num_layers=1,
                                       num_heads=2, conv_layers=1, context_length=2,
                                       decoder_layers=1, num_positions=None)
    model.compile(optimizer=keras.optimizers.SGD(0.5), run_eagerly=True)
    ids = tokenizer.encode(["the cat sat on the mat a dog"] * 4, max_length=8)
    written = []

    class Count(keras.callbacks.Callback):  # what is on disk when each epoch ends
        def on_epoch_end(self, epoch, logs=None):
            written.append(len(events(str(tmp_path / "graphs"))))

    callbacks = [training.StepTensorBoard(str(tmp_path), update_freq=3),
                 training.GraphImageLogger(str(tmp_path), tokenizer, ["the cat ran"], 16), Count()]
    model.fit(ids, batch_size=2, epochs=2, verbose=0, callbacks=callbacks)
    assert written == [2, 4]  # forward and backward images, flushed at each epoch's end
