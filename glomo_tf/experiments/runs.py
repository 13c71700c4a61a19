"""Run directories: the settings a run or a search was started with, checked when it resumes."""

import json
import os

# Where the run lives: a run directory that was moved, copied or named by another relative path
# is the same run.
LOCATION = ("output_dir", "directory")


def _resolved(value):
    """A path setting (a string or a list of them) as the file it names."""
    if isinstance(value, str):
        return os.path.realpath(value)
    if isinstance(value, list):
        return [os.path.realpath(v) if isinstance(v, str) else v for v in value]
    return value


def refuse_changed_settings(saved, current, may_change, holder, remedy, paths=()):
    """Raises ``ValueError`` when ``current`` settings differ from ``saved`` ones.

    Keys in ``may_change`` (and the run's own location, :data:`LOCATION`) are free to differ;
    keys in ``paths`` name files, compared as the files they resolve to. ``holder`` names what
    holds the saved settings ("the run directory holds a run") and ``remedy`` says what to do
    instead.
    """
    free = set(may_change) | set(LOCATION)

    def differs(k):
        if k in paths:  # the same files, named by another relative or absolute path
            return _resolved(saved.get(k)) != _resolved(current[k])
        return saved.get(k) != current[k]

    changed = [k for k in current if k not in free and differs(k)]
    if changed:
        details = ", ".join(f"{k}: {saved.get(k)!r} -> {current[k]!r}" for k in changed)
        raise ValueError(f"{holder} with other settings ({details}). {remedy}")


class RunDirectory:
    """A run's directory, as ``glomo pretrain`` and ``glomo sentence-pretrain`` keep it: the
    settings it was started with (``config.json``, checked when the run resumes, written by the
    chief worker only), its crash-safe checkpoints (``checkpoints/``) and the files it writes.

    >>> run = RunDirectory("runs/wiki")
    >>> run.file("metrics.json")
    'runs/wiki/metrics.json'
    """

    def __init__(self, path):
        self.path = path

    def file(self, *names):
        """The path of ``names`` inside the run directory."""
        return os.path.join(self.path, *names)

    @property
    def checkpoints(self):
        return self.file("checkpoints")

    @property
    def resuming(self):
        """True when the directory holds a checkpoint: a run that got that far, which a new
        start of the same command continues (a directory whose run stopped before, e.g. on a
        usage error, starts afresh with the new settings)."""
        from glomo_tf import training
        return bool(training.list_checkpoints(self.checkpoints))

    def open(self, settings, check_resumable):
        """Creates the directory; when it holds a run to resume, raises ``ValueError`` (through
        ``check_resumable(saved, settings)``) if that run was started with other settings; then
        writes ``settings`` (JSON-ready) as its ``config.json``, on the chief worker only (on a
        shared file system, one writer)."""
        from glomo_tf import training
        os.makedirs(self.path, exist_ok=True)
        config_path = self.file("config.json")
        settings = json.loads(json.dumps(settings))  # tuples as lists, as saved
        if self.resuming and os.path.isfile(config_path):
            with open(config_path) as f:
                check_resumable(json.load(f), settings)
        if training.is_chief():
            with open(config_path, "w") as f:
                json.dump(settings, f, indent=1)
        return self

    def restore(self, model, steps_per_epoch):
        """Restores ``model`` (weights, optimizer state) from the newest checkpoint, if any, and
        says so; returns ``(step, epoch, batch)``: the optimizer steps taken, the epoch they
        reached (from 0) and the batches of it already trained on."""
        from glomo_tf import training
        restored = training.restore_latest(model, self.checkpoints)
        step = int(model.optimizer.iterations.numpy())
        epoch, batch = divmod(step, steps_per_epoch)
        if restored:
            print(f"Resuming from {restored['path']}: step {step}, epoch {epoch + 1}, "
                  f"batch {batch} of {steps_per_epoch}.", flush=True)
        return step, epoch, batch
