"""glomo_tf uses tensorflow-text through its public API only: ``tensorflow_text`` itself and its
``tools`` package, never the private ``tensorflow_text.python`` / ``tensorflow_text.core`` modules
(the tokenizer's splitting kernels are loaded with ``tf.load_op_library`` instead)."""

import ast
import pathlib
from _paths import REPO

PACKAGE = pathlib.Path(REPO) / "glomo_tf"
PRIVATE = ("tensorflow_text.python", "tensorflow_text.core")


def imported_modules(path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module


def test_no_module_imports_private_tensorflow_text():
    offenders = sorted(f"{path.relative_to(PACKAGE.parent)}: {name}"
                       for path in PACKAGE.rglob("*.py") for name in imported_modules(path)
                       if name.startswith(PRIVATE))
    assert offenders == []
