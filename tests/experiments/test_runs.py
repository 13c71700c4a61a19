"""Run directories (``glomo_tf.experiments.runs``): what ``glomo pretrain`` and ``glomo sentence-pretrain``
both do when they open one: resume only a run that has a checkpoint, refuse other settings, and
write ``config.json`` on the chief worker only."""

import json

import pytest

from glomo_tf.experiments.runs import RunDirectory, refuse_changed_settings

WORKER_1 = json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker",
                                                                       "index": 1}})


def check(saved, current):
    refuse_changed_settings(saved, current, ("epochs",), "the run directory holds a run",
                            "Start another run.")


def checkpoint(run_dir):
    (run_dir / "checkpoints" / "ckpt-0000000002").mkdir(parents=True)
    (run_dir / "checkpoints" / "ckpt-0000000002" / "metadata.json").write_text("{}")


def test_config_on_the_chief_only_and_other_settings_refused(tmp_path, monkeypatch):
    run = tmp_path / "run"
    monkeypatch.setenv("TF_CONFIG", WORKER_1)
    RunDirectory(str(run)).open({"hidden_dim": 8, "epochs": 1, "sizes": (1, 2)}, check)
    assert run.is_dir() and not (run / "config.json").exists()  # not the chief: no writer
    monkeypatch.delenv("TF_CONFIG")
    RunDirectory(str(run)).open({"hidden_dim": 8, "epochs": 1, "sizes": (1, 2)}, check)
    assert json.loads((run / "config.json").read_text())["sizes"] == [1, 2]
    assert not RunDirectory(str(run)).resuming
    # No checkpoint yet: a new start with other settings replaces them.
    RunDirectory(str(run)).open({"hidden_dim": 16, "epochs": 1, "sizes": (1, 2)}, check)
    checkpoint(run)
    assert RunDirectory(str(run)).resuming
    # A run to resume: more epochs may change, the model may not (tuples compare as saved).
    RunDirectory(str(run)).open({"hidden_dim": 16, "epochs": 3, "sizes": (1, 2)}, check)
    assert json.loads((run / "config.json").read_text())["epochs"] == 3
    with pytest.raises(ValueError, match="hidden_dim: 16 -> 32"):
        RunDirectory(str(run)).open({"hidden_dim": 32, "epochs": 3, "sizes": (1, 2)}, check)
