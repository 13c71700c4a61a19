"""The README's Python examples run as pasted (in a scratch directory, on their toy data)."""

import os
import pathlib
import re
import warnings

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_every_python_block_of_the_readme_runs(tmp_path, monkeypatch):
    blocks = python_blocks()
    assert blocks, "the README has Python examples"
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        namespace = {}
        for block in blocks:
            if not block.startswith("# Continues the example above"):
                namespace = {"__name__": "__readme__"}
            exec(compile(block, str(README), "exec"), namespace)  # noqa: S102
    assert not [w for w in caught if issubclass(w.category, UserWarning)], \
        [str(w.message) for w in caught]  # nothing a user pasting it would be warned about
    assert os.path.isfile(tmp_path / "graph_predictor.keras")  # the example saved its predictor
