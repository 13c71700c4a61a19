"""The documentation: ``mkdocs build --strict`` (the guides, the results and the API reference
generated from the docstrings) and every relative link of ``README.md`` and ``docs/**/*.md``."""

import fnmatch
import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest
from _paths import REPO

REPO = pathlib.Path(REPO)
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


# A recorded file the pages name, in prose or in a command: ``examples/outputs/...`` up to a space,
# quote, bracket or closing punctuation, with the shell's ``{a,b}`` and ``*``; a name with capitals
# (``NAME.json``) is a placeholder.
RECORDED = re.compile(r"examples/outputs/(?:[\w./+*-]|\{[\w.,-]*\})*(?<=[\w/*}])")


def expand_braces(name):
    """``a{b,c}d`` -> ``abd``, ``acd`` (the shell's brace expansion, any number of groups)."""
    group = re.search(r"\{([^{}]*)\}", name)
    if not group:
        return [name]
    return [expanded for choice in group.group(1).split(",")
            for expanded in expand_braces(name[:group.start()] + choice + name[group.end():])]


def tracked_files():
    listed = subprocess.run(["git", "ls-files", "examples/outputs"], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout.split()
    return set(listed) | {str(pathlib.PurePosixPath(f).parent) for f in listed}


def test_the_pages_recorded_names_are_read_as_the_shell_reads_them():
    text = ("see `examples/outputs/mr_results.{json,md}`), `examples/outputs/wikitext2_*_metrics"
            ".json` and examples/outputs/listops_models/tokenizer.")
    assert [n for m in RECORDED.findall(text) for n in expand_braces(m)] == [
        "examples/outputs/mr_results.json", "examples/outputs/mr_results.md",
        "examples/outputs/wikitext2_*_metrics.json", "examples/outputs/listops_models/tokenizer"]


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="a source tree without its git history")
def test_every_recorded_file_the_pages_name_is_committed():
    """A page's ``--model examples/outputs/...`` or JSON is in git, not only on the machine that
    made it (``*.keras`` is ignored unless its folder is let through in ``.gitignore``)."""
    tracked = tracked_files()
    named = {(name.rstrip("/"), str(path.relative_to(REPO))) for path in PAGES
             for m in RECORDED.findall(path.read_text(encoding="utf-8"))
             if not re.search(r"[A-Z]{2}", m) for name in expand_braces(m)}
    missing = sorted(f"{page}: {name}" for name, page in named
                     if not fnmatch.filter(tracked, name))
    assert not missing, "named but not committed: " + "; ".join(missing)


def test_mkdocs_build_strict(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None:
        pytest.skip('mkdocs and mkdocstrings are not installed: pip install -e ".[docs]"')
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                             str(tmp_path / "site"), "--config-file", str(REPO / "mkdocs.yml")],
                            capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "WARNING -" not in result.stderr, result.stderr[-4000:]  # mkdocs' warnings
    # The docstrings' Sphinx roles became cross-references: none is printed raw.
    raw = [str(html.relative_to(tmp_path)) for html in (tmp_path / "site").rglob("*.html")
           if re.search(r":(class|func|meth|mod|attr):<code>", html.read_text(encoding="utf-8"))]
    assert not raw, raw
    # The files outside docs/ are in the site, their links and the links to them rewritten.
    readme = (tmp_path / "site" / "project" / "readme" / "index.html").read_text(encoding="utf-8")
    assert 'href="../../guides/transfer/' in readme
    assert not re.search(r'href="[^"]*\.md[#"]', readme)  # every .md link became a page URL
    transfer = (tmp_path / "site" / "guides" / "transfer" / "index.html").read_text("utf-8")
    assert "../../project/glomo_books_en/" in transfer
    api = (tmp_path / "site" / "api" / "layers" / "index.html").read_text(encoding="utf-8")
    assert "GlomoTransfer" in api and "graph_predictor" in api  # rendered from the docstrings
    assert 'href="#glomo_tf.layers.GlomoTransfer"><code>GlomoTransfer</code></a>' in api
    # Signatures shown, GlomoTransfer first, the Keras plumbing left to Keras' own reference.
    assert "doc-signature" in api
    first = re.search(r'id="(glomo_tf\.layers\.\w+)"', api).group(1)
    assert first == "glomo_tf.layers.GlomoTransfer", first
    assert 'id="glomo_tf.layers.GlomoTransfer.from_preset"' in api
    assert not re.search(r'id="glomo_tf\.layers\.\w+\.(call|get_config|from_config|build)"', api)
    # The type column filled from the docstrings' words (docs_types.py).
    assert re.search(r"<code>num_mixtures</code>\s*</td>\s*<td>\s*<code><span title=\"int\">int</span>", api, re.S)


def test_dead_links_are_errors_of_the_site_build():
    """mkdocs.yml validates every kind of link at ``warn``, which ``--strict`` makes an error."""
    text = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    block = text[text.index("validation:"):text.index("markdown_extensions:")]
    kinds = dict(line.strip().split(": ") for line in block.splitlines()[2:] if line.strip())
    assert kinds == {"not_found": "warn", "absolute_links": "warn", "unrecognized_links": "warn",
                     "anchors": "warn"}


def test_the_hook_rewrites_links_by_where_their_targets_live():
    import types

    sys.path.insert(0, str(REPO))
    import mkdocs_hooks

    def page(src_uri):
        return types.SimpleNamespace(file=types.SimpleNamespace(src_uri=src_uri))

    guide = mkdocs_hooks.on_page_markdown(
        "[card](../../glomo_tf/builtin_presets/glomo_books_en/README.md) "
        "[home](../../README.md#transfer-in-modelfit) [x](../api/layers.md) "
        "[web](https://keras.io/a.md) ![p](../../examples/outputs/wikitext2_graphs.png)",
        page("guides/transfer.md"), None, None)
    assert guide == ("[card](../project/glomo_books_en.md) "
                     "[home](../project/readme.md#transfer-in-modelfit) [x](../api/layers.md) "
                     "[web](https://keras.io/a.md) ![p](../project/wikitext2_graphs.png)")
    readme = mkdocs_hooks.on_page_markdown(
        "[g](docs/guides/transfer.md) [h](docs/results/x.md#a---b) [s](setup.py)",
        page("project/readme.md"), None, None)
    assert readme == "[g](../guides/transfer.md) [h](../results/x.md#a-b) [s](setup.py)"


def test_the_reference_takes_its_type_column_from_the_docstrings_words():
    """docs_types.py (the site's griffe extension) turns ``name: int, words`` into Google
    style's ``name (int): words``, and names the type of entries that start with one, leaving
    the rest and the continuation lines as they are."""
    import docs_types

    docstring = "\n".join([
        "Summary.", "", "Args:",
        "    num_mixtures: int, mixtures per direction.",
        "    fine_tune: bool. False (default) freezes the",
        "        predictor: its weights stay.",
        "    fused: bool (default False): one XLA cluster.",
        "    mode: ``\"learned\"`` or ``\"uniform\"``.",
        "    top_k: None (default: dense) or int: the sources kept.",
        "    predictor: a :class:`~glomo_tf.layers.GraphPredictor`, or None.",
        "    other: the rest.", "", "Returns:", "    int, the count."])
    assert docs_types.typed(docstring).splitlines()[3:] == [
        "    num_mixtures (int): mixtures per direction.",
        "    fine_tune (bool): False (default) freezes the",
        "        predictor: its weights stay.",
        "    fused (bool): one XLA cluster.",
        "    mode (str): ``\"learned\"`` or ``\"uniform\"``.",
        "    top_k (int | None): None (default: dense) or int: the sources kept.",
        "    predictor (GraphPredictor): a :class:`~glomo_tf.layers.GraphPredictor`, or None.",
        "    other: the rest.", "", "Returns:", "    int, the count."]
