"""mkdocs hooks: the site stands alone.

The pages link to files outside ``docs/`` (the README, ``benchmarks/README.md``,
``serving/README.md``, the built-in presets' model cards, figures under ``examples/outputs/``).
Those links resolve on GitHub and in a checkout; for the built site, :func:`on_files` copies each
such file in (``project/...``), and :func:`on_page_markdown` rewrites every relative link of a
page by where its target lies in the repository: a page of ``docs/`` to that page, a copied file
to its copy. The copies' own links (the README's ``docs/guides/...``) are rewritten the same way,
so that ``mkdocs build --strict`` can validate every link as an error.
"""

import os
import posixpath
import re

from mkdocs.structure.files import File

ROOT = os.path.dirname(os.path.abspath(__file__))
DOCS = "docs"
# Files outside docs/ that the pages link to: repository path -> path in the site.
COPIED = {
    "README.md": "project/readme.md",
    "benchmarks/README.md": "project/benchmarks-readme.md",
    "serving/README.md": "project/serving-readme.md",
    "glomo_tf/builtin_presets/glomo_books_en/README.md": "project/glomo_books_en.md",
    "glomo_tf/builtin_presets/glomo_planted_demo/README.md": "project/glomo_planted_demo.md",
    "examples/outputs/wikitext2_graphs.png": "project/wikitext2_graphs.png",
    "examples/outputs/glomo_images_planted_figure4.png": "project/glomo_images_planted_figure4.png",
    "examples/outputs/demo_graphs.png": "project/demo_graphs.png",
    "examples/outputs/listops_graphs.png": "project/listops_graphs.png",
}
SOURCE_OF = {site: repo for repo, site in COPIED.items()}
# [text](target) and ![alt](target), the target without a scheme or a leading slash or '#'.
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s#]+)(#[^)\s]*)?(\))")
ABSOLUTE = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def on_files(files, config):
    for repo_path, site_path in COPIED.items():
        source = os.path.join(ROOT, repo_path)
        if os.path.exists(source) and files.get_file_from_path(site_path) is None:
            files.append(File.generated(config, site_path, abs_src_path=source))
    return files


def repository_path(page_src_uri):
    """Where a page of the site lives in the repository."""
    return SOURCE_OF.get(page_src_uri, posixpath.join(DOCS, page_src_uri))


def site_target(repo_target):
    """The site path of a repository path, or None when the site has no copy of it."""
    if repo_target in COPIED:
        return COPIED[repo_target]
    if repo_target.startswith(DOCS + "/"):
        return repo_target[len(DOCS) + 1:]
    return None


def on_page_markdown(markdown, page, config, files):
    here = posixpath.dirname(repository_path(page.file.src_uri))
    site_here = posixpath.dirname(page.file.src_uri)

    def rewrite(match):
        prefix, target, anchor, close = match.groups()
        if ABSOLUTE.match(target) or target.startswith("/"):
            return match.group(0)
        resolved = posixpath.normpath(posixpath.join(here, target))
        site = site_target(resolved)
        if site is None:
            return match.group(0)
        # GitHub keeps every dash of a heading's anchor ("--heads" -> "---heads"); the site's
        # table of contents collapses runs of them.
        anchor = re.sub("-+", "-", anchor or "")
        return f"{prefix}{posixpath.relpath(site, site_here or '.')}{anchor}{close}"

    return LINK.sub(rewrite, markdown)


# ---------------------------------------------------------------------------------------------
# The docstrings cross-reference in Sphinx's roles (:class:`GlomoTransfer`, :func:`~glomo_tf.x`),
# which mkdocstrings prints raw. Each becomes an autorefs cross-reference to the object's
# documentation (resolved by the autorefs plugin after every page is rendered; a target the site
# does not document stays code, unlinked).
ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):<code>(~?)([\w.]+)</code>")
# Where a bare name in a docstring is looked up, in order.
NAMESPACES = ("glomo_tf", "glomo_tf.layers", "glomo_tf.models", "glomo_tf.data", "glomo_tf.ops",
              "glomo_tf.serving")


def canonical_path(target):
    """The object's import path where it is defined (what mkdocstrings documents it under), or
    None when no namespace holds it."""
    import importlib

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

    for prefix in ("", *(n + "." for n in NAMESPACES)):
        parts = (prefix + target).split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for name in parts[cut:]:
                    obj = getattr(obj, name)
            except AttributeError:
                break
            if isinstance(obj, type(importlib)):
                return obj.__name__
            module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
            if module and qualname:
                return f"{module}.{qualname}"
            return prefix + target
    return None


def on_page_content(html, page, config, files):
    def cross_reference(match):
        short, target = match.groups()
        title = target.rsplit(".", 1)[-1] if short else target
        path = canonical_path(target)
        if path is None:
            return f"<code>{title}</code>"
        return f'<autoref identifier="{path}" optional><code>{title}</code></autoref>'

    return ROLE.sub(cross_reference, html)
