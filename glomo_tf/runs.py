"""Run directories: the settings a run or a search was started with, checked when it resumes."""

# Where the run lives: a run directory that was moved, copied or named by another relative path
# is the same run.
LOCATION = ("output_dir", "directory")


def refuse_changed_settings(saved, current, may_change, holder, remedy):
    """Raises ``ValueError`` when ``current`` settings differ from ``saved`` ones.

    Keys in ``may_change`` (and the run's own location, :data:`LOCATION`) are free to differ;
    ``holder`` names what holds the saved settings
    ("the run directory holds a run") and ``remedy`` says what to do instead.
    """
    free = set(may_change) | set(LOCATION)
    changed = [k for k in current if k not in free and saved.get(k) != current[k]]
    if changed:
        details = ", ".join(f"{k}: {saved.get(k)!r} -> {current[k]!r}" for k in changed)
        raise ValueError(f"{holder} with other settings ({details}). {remedy}")
