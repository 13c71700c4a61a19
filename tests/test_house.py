"""The package's rooms stay a size a reader can hold (issue 67's targets): no module of
``glomo_tf`` over 500 lines, and no class of ``glomo_tf.serving`` over 200 lines or 30 branches
(the places where its code takes one way or another: ``if``, a conditional expression, a loop,
a comprehension's loop, an ``except`` and a ``match`` case)."""

import ast
import pathlib

import pytest
from _paths import REPO

PACKAGE = pathlib.Path(REPO) / "glomo_tf"
MAX_MODULE_LINES = 500
MAX_CLASS_LINES, MAX_CLASS_BRANCHES = 200, 30
BRANCHES = (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.comprehension,
            ast.ExceptHandler, ast.match_case)


def modules():
    """Every hand-written module of the package (protobuf's generated ``*_pb2`` modules aside)."""
    return sorted(p for p in PACKAGE.rglob("*.py") if not p.name.endswith(("_pb2.py",
                                                                           "_pb2_grpc.py")))


def branches(node):
    return sum(isinstance(n, BRANCHES) for n in ast.walk(node))


def classes(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]


def test_no_module_over_500_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in modules()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, long


def test_no_serving_class_over_200_lines_or_30_branches():
    large = {f"{p.name}:{c.name}": (c.end_lineno - c.lineno + 1, branches(c))
             for p in modules() if "serving" in p.relative_to(PACKAGE).parts
             for c in classes(p)
             if c.end_lineno - c.lineno + 1 > MAX_CLASS_LINES or branches(c) > MAX_CLASS_BRANCHES}
    assert not large, large


@pytest.mark.parametrize("source, count", [
    ("if a:\n    pass\nelif b:\n    pass\n", 2),
    ("x = [i for i in y if i]\n", 1),
    ("try:\n    pass\nexcept A:\n    pass\nexcept B:\n    pass\n", 2),
    ("for i in y:\n    z = 1 if i else 2\n", 2),
])
def test_the_branch_count(source, count):
    assert branches(ast.parse(source)) == count
