"""The JSON records the result scripts of ``examples/`` keep and extend, run after run."""

import json
import os


def read_record(path, empty):
    """The record at ``path`` (a dict read from JSON), or ``empty`` when there is no file yet
    (or no ``path``)."""
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    return empty


def write_record(path, record):
    """Writes ``record`` to ``path`` as indented JSON."""
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)
