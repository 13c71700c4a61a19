"""The documentation: ``mkdocs build --strict`` (the guides, the results and the API reference
generated from the docstrings) and every relative link of ``README.md`` and ``docs/**/*.md``."""

import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
# [text](target) and ![alt](target), outside code spans and fenced blocks.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def links(path):
    text = re.sub(r"(?ms)^```.*?^```", "", path.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)
    return LINK.findall(text)


def slug(heading):
    """A heading's anchor as GitHub and mkdocs' ``toc`` write it."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[\s]+", "-", text)


def anchors(path):
    text = re.sub(r"(?ms)^```.*?^```", "", path.read_text(encoding="utf-8"))
    return {slug(m) for m in re.findall(r"(?m)^#+ (.*)$", text)}


def test_the_pages_exist_and_link_somewhere():
    names = {str(p.relative_to(REPO)) for p in PAGES}
    for name in ["docs/guides/transfer.md", "docs/guides/pretraining.md", "docs/guides/serving.md",
                 "docs/guides/related-models.md", "docs/guides/images.md",
                 "docs/guides/precision.md", "docs/benchmarks.md", "docs/architecture.md"]:
        assert name in names, name
    assert len(links(REPO / "README.md")) > 10


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_points_at_an_existing_file(path):
    for target in links(path):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve() if file else path
        assert resolved.exists(), f"{path.relative_to(REPO)}: {target} does not exist"
        assert REPO in resolved.parents or resolved == REPO, f"{target} leaves the repository"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), f"{path.relative_to(REPO)}: no heading #{anchor}"


def test_mkdocs_build_strict(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None:
        pytest.skip('mkdocs and mkdocstrings are not installed: pip install -e ".[docs]"')
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                             str(tmp_path / "site"), "--config-file", str(REPO / "mkdocs.yml")],
                            capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stderr[-4000:]
    api = (tmp_path / "site" / "api" / "layers" / "index.html").read_text(encoding="utf-8")
    assert "GlomoTransfer" in api and "graph_predictor" in api  # rendered from the docstrings
