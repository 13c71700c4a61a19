"""Run directories: the settings a run or a search was started with, checked when it resumes."""

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
