"""Distributed training: MirroredStrategy on two logical CPU devices against one device, two
MultiWorkerMirroredStrategy workers on 127.0.0.1 (GlomoPretrainer.fit and ``glomo pretrain``).

Each runs in subprocesses (tests/_mw_worker.py, tests/_pretrain_runner.py): logical devices and
collective ops must be configured before TensorFlow initialises, which this process already did.

The models have no convolution layers (``conv_layers=0``), hence no batch norm: under a
MirroredStrategy the batch-norm statistics are computed per replica (not synchronised), so the
forward pass itself differs from one device's and no equality would hold; everything else in a
step (graphs, features, decoders, loss, gradients, optimizer) is compared exactly.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from _tiny_runs import PRETRAIN_TINY as TINY, PROBE, write_corpus
from _network import free_ports
from _paths import REPO

WORKER = os.path.join(REPO, "tests", "_mw_worker.py")
RUNNER = os.path.join(REPO, "tests", "_pretrain_runner.py")
LEARNING_RATE, STEPS, CLIP = 0.5, 4, 1e-3  # as in tests/_mw_worker.py


def environment(**extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **extra)
    if "TF_CONFIG" not in extra:
        env.pop("TF_CONFIG", None)
    return env


def run_all(commands, logs, timeout=420):
    """Starts every ``(argv, env)`` at once and waits for all; kills the rest on a failure."""
    processes = []
    try:
        for (argv, env), log in zip(commands, logs):
            processes.append(subprocess.Popen(argv, env=env, cwd=REPO, stdout=open(log, "w"),
                                              stderr=subprocess.STDOUT))
        for process in processes:
            process.wait(timeout=timeout)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    outputs = [open(log).read() for log in logs]
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-5000:]
    return outputs


def load(path):
    arrays = np.load(path)
    groups = {}
    for key in arrays.files:
        name, index = key.rsplit("_", 1)
        groups.setdefault(name, {})[int(index)] = arrays[key]
    return {name: [found[i] for i in range(len(found))] for name, found in groups.items()}


def update_norm(final, init):
    return float(np.sqrt(sum(np.sum((a.astype("float64") - b) ** 2)
                             for a, b in zip(final, init))))


def assert_same_training(actual, expected, init):
    """Weights equal up to float32 rounding: per tensor, within 1e-3 of its training update."""
    assert len(actual) == len(expected) == len(init)
    for a, b, w0 in zip(actual, expected, init):
        moved = np.abs(b - w0).max()
        assert moved > 1e-7  # every weight was trained
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-3 * moved)


def cluster(index, ports):
    return json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                       "task": {"type": "worker", "index": index}})


# ---------------------------------------------------------------------- MirroredStrategy
@pytest.fixture(scope="module")
def mirrored(tmp_path_factory):
    out = tmp_path_factory.mktemp("mirrored")
    run_all([([sys.executable, WORKER, "mirrored", str(out / "w.npz")], environment())],
            [out / "log.txt"])
    return load(out / "w.npz")


@pytest.mark.slow
def test_mirrored_on_two_devices_matches_one_device(mirrored):
    """Same initial weights, same global batches (split 2 + 2), plain SGD: same weights."""
    assert_same_training(mirrored["plain_mirrored"], mirrored["plain_single"], mirrored["init"])


@pytest.mark.slow
def test_global_clipnorm_clips_the_summed_gradient_under_mirrored(mirrored):
    """``glomo pretrain``'s optimizer (make_optimizer) clips the gradient of the global batch,
    as on one device; Keras's own clips each replica's share, which gives other weights."""
    init = mirrored["init"]
    bound = STEPS * LEARNING_RATE * CLIP  # each step moves the weights by at most lr * clip
    assert update_norm(mirrored["plain_single"], init) > 2 * bound  # so the clip acts
    single, replicated = mirrored["glomo_clip_single"], mirrored["glomo_clip_mirrored"]
    for name in ("glomo_clip_single", "glomo_clip_mirrored"):
        assert 0.5 * bound < update_norm(mirrored[name], init) <= bound * (1 + 1e-5), name
    assert_same_training(replicated, single, init)
    # Keras's per-replica clip (the reason for training.clip_summed_gradient).
    difference = update_norm(mirrored["keras_clip_mirrored"], single)
    assert difference > 0.05 * update_norm(single, init)


# ---------------------------------------------------------------------- MultiWorkerMirrored
@pytest.mark.slow
def test_two_workers_train_together_to_identical_weights(tmp_path):
    """Two MultiWorkerMirroredStrategy workers (fit, global batch 4 = 2 per worker, clipped SGD):
    both end with identical weights, changed from the initial ones, equal to one device's."""
    ports = free_ports(2)
    options = ["--optimizer", "glomo", "--clipnorm", str(CLIP)]
    run_all([([sys.executable, WORKER, "worker", str(tmp_path / f"w{i}.npz"), *options],
              environment(TF_CONFIG=cluster(i, ports))) for i in range(2)],
            [tmp_path / f"w{i}.log" for i in range(2)])
    chief, other = load(tmp_path / "w0.npz"), load(tmp_path / "w1.npz")
    for a, b in zip(chief["init"], other["init"]):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(chief["final"], other["final"]):
        np.testing.assert_array_equal(a, b)
    assert_same_training(chief["final"], chief["single"], chief["init"])
    assert update_norm(chief["final"], chief["init"]) <= STEPS * LEARNING_RATE * CLIP * 1.00001


@pytest.mark.slow
def test_glomo_pretrain_multi_worker_run(tmp_path):
    """``glomo pretrain --strategy multi-worker``, two workers sharing the run directory: both
    finish (validation included, which needs both), the chief alone writes the checkpoints, the
    tokenizer, the models and metrics.json; the other worker logs under logs/.worker-PID."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    run = str(tmp_path / "run")
    argv = [sys.executable, RUNNER, "--train", corpus, *TINY, "--epochs", "1",
            "--steps-per-epoch", "3", "--checkpoint-every", "2", "--validation-fraction", "0.25",
            "--probe", PROBE, "--verbose", "2", "--strategy", "multi-worker",
            "--output-dir", run]
    ports = free_ports(2)
    outputs = run_all([(argv, environment(TF_CONFIG=cluster(i, ports))) for i in range(2)],
                      [tmp_path / f"w{i}.log" for i in range(2)])
    metrics = json.loads(open(os.path.join(run, "metrics.json")).read())
    assert metrics["steps"] == 3 and np.isfinite(metrics["val_loss"])
    assert json.dumps(metrics) in outputs[0] and "Saved" not in outputs[1]
    assert sorted(os.listdir(os.path.join(run, "checkpoints"))) == [
        "ckpt-0000000002", "ckpt-0000000003", "latest"]
    assert sorted(os.listdir(run)) == ["checkpoints", "config.json", "graph_predictor.keras",
                                       "logs", "metrics.json", "preset", "pretrainer.keras",
                                       "tokenizer"]
    worker_logs = [d for d in os.listdir(os.path.join(run, "logs")) if d.startswith(".worker-")]
    assert len(worker_logs) == 1
    # Both workers report the same (global-batch) validation loss.
    val_losses = [line.split("val_loss: ")[1].split()[0] for out in outputs
                  for line in out.splitlines() if "val_loss: " in line]
    assert len(val_losses) == 2 and val_losses[0] == val_losses[1]
