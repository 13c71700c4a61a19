"""``benchmarks/README.md``: every benchmark script has a row of its table, and every recorded
output is quoted by one of its tables and holds a ``recorded`` block (date, machine, code).

The tables themselves are rendered from ``benchmarks/outputs/**.json`` by
``examples/results_tables.py`` and checked by ``tests/docs/test_results_tables.py``.
"""

import glob
import json
import os
from _paths import REPO

BENCHMARKS = os.path.join(REPO, "benchmarks")
OUTPUTS = os.path.join(BENCHMARKS, "outputs")


def test_every_script_and_every_output_is_in_the_tables():
    with open(os.path.join(BENCHMARKS, "README.md"), encoding="utf-8") as handle:
        page = handle.read()
    scripts = sorted(os.path.basename(p) for p in glob.glob(os.path.join(BENCHMARKS, "*.py"))
                     if not os.path.basename(p).startswith("_"))
    for script in scripts:
        assert f"| `{script}` |" in page, f"{script} has no row in benchmarks/README.md"
    for path in glob.glob(os.path.join(OUTPUTS, "**", "*.json"), recursive=True):
        name = os.path.relpath(path, OUTPUTS)
        assert f"`{name}`" in page, f"{name} is quoted by no table of benchmarks/README.md"
        with open(path, encoding="utf-8") as handle:
            assert "recorded" in json.load(handle), f"{name} has no recorded block"
