"""The Python examples of the README and the docs/ pages run as pasted (in a scratch directory, on
their toy data).

Each page's blocks run in order; a block that starts with ``# Continues the example above``
shares the namespace of the block before it on the same page. The README's block reads SST-2;
here it reads the first ``SST_EXAMPLES`` sentences of each split, so that its code runs in
seconds (the whole of it, as written and in a fresh interpreter, is
``tests/test_presets.py::test_newcomer_first_lines_from_the_readme_fit_and_evaluate``, a slow
test).
"""

import os
import pathlib
import re
import warnings

import pytest
from _paths import REPO

REPO = pathlib.Path(REPO)
SST_EXAMPLES = 256
# Every page with Python examples, with how many it has (a block cannot vanish unnoticed).
PAGES = {"README.md": 1, "docs/guides/transfer.md": 4, "docs/guides/related-models.md": 1,
         "docs/guides/images.md": 1, "docs/guides/serving.md": 2}


def python_blocks(name):
    return re.findall(r"```python\n(.*?)```", (REPO / name).read_text(encoding="utf-8"), re.S)


def test_every_page_with_python_examples_is_run():
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    found = {str(p.relative_to(REPO)): len(python_blocks(p.relative_to(REPO))) for p in pages}
    assert {name: n for name, n in found.items() if n} == PAGES


@pytest.mark.parametrize("name", sorted(PAGES))
def test_every_python_block_of_the_page_runs(name, tmp_path, monkeypatch):
    blocks = python_blocks(name)
    assert len(blocks) == PAGES[name], f"{name} has Python examples"
    monkeypatch.chdir(tmp_path)
    from glomo_tf.data import labeled

    read_sst = labeled.load_sst
    monkeypatch.setattr(labeled, "load_sst", lambda *args, **kwargs: tuple(
        part[:SST_EXAMPLES] if i < 2 else part
        for i, part in enumerate(read_sst(*args, **kwargs))))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        namespace = {}
        for block in blocks:
            if not block.startswith("# Continues the example above"):
                namespace = {"__name__": "__readme__"}
            exec(compile(block, str(REPO / name), "exec"), namespace)  # noqa: S102
    assert not [w for w in caught if issubclass(w.category, UserWarning)], \
        [str(w.message) for w in caught]  # nothing a user pasting it would be warned about
    if name == "docs/guides/transfer.md":
        assert os.path.isfile(tmp_path / "graph_predictor.keras")  # the example saved its predictor
