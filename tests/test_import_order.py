"""No circles, nothing pointing up: every import inside ``glomo_tf/`` follows :data:`ORDER`.

Every module is read with ``ast`` (nothing is imported): ``import a.b``, ``from a import b``,
relative imports and ``importlib.import_module("a.b")`` with a literal name, at module level and
inside functions alike (a function-level import is an import all the same; it only runs later).
``from package import name`` of a package that loads its names on first use (``glomo_tf``'s
``_PUBLIC``, the faces made by :func:`glomo_tf._lazy.lazy_names`) counts as an import of the
module that defines the name. A package's own ``__init__.py`` handing on its modules' names is
part of that package.

:data:`ORDER` lists the floors of the package, lowest first; each floor holds parts (a module, or
a package with everything under it) that do not import each other. A module may import its own
part and the floors below; an import of a part on its own floor or above fails, and so does any
circle of modules (inside one part too). The floors and what each part imports::

    python tests/test_import_order.py
"""

import ast
import os

import pytest
from _paths import REPO

PACKAGE = os.path.join(REPO, "glomo_tf")

# Lowest first. A part's floor is the first above every part it imports.
ORDER = [
    # The package's face: __version__, and its public names, loaded by name on first use.
    ("glomo_tf",),
    # Nothing of glomo_tf below them. export.serving_ops: facts about TensorFlow Serving's
    # kernels, read by the tokenizer (which kernels it may call) and by the export.
    ("glomo_tf._lazy", "glomo_tf._keras_private", "glomo_tf.hparams", "glomo_tf.trees",
     "glomo_tf.viz", "glomo_tf.export.serving_ops", "glomo_tf.preset_sources",
     "glomo_tf.preset_cards"),
    # Graph maths, dtype policies, the preset format (paths, metadata, weight files).
    ("glomo_tf.ops", "glomo_tf.precision", "glomo_tf.presets"),
    ("glomo_tf.training", "glomo_tf.layers", "glomo_tf.preset_tasks"),
    ("glomo_tf.data",),
    ("glomo_tf.preprocessing", "glomo_tf.evaluation", "glomo_tf.analysis"),
    ("glomo_tf.models",),
    # A predictor alone (.keras files) and a preset's predictor with its tokenizer.
    ("glomo_tf.saving", "glomo_tf.tuning"),
    ("glomo_tf.export",),
    ("glomo_tf.serving", "glomo_tf.experiments"),
    ("glomo_tf.cli",),
]

# Imports that point up or close a circle today, each with what removes it; the list only
# shrinks (test_waiting_imports_are_still_there fails once one is gone, so it is struck off).
WAITING = {}


# ------------------------------------------------------------------------------- the reader
def module_files(package_dir):
    """``{module name: path}`` of every ``.py`` file under ``package_dir``."""
    root = os.path.dirname(package_dir)
    modules = {}
    for directory, subdirectories, names in os.walk(package_dir):
        subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                parts = os.path.relpath(path, root)[:-3].split(os.sep)
                modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def lazy_names(tree):
    """``{name: module}`` that a package's ``__init__`` loads on first use: the dict literal of
    ``_PUBLIC = {...}`` or of ``lazy_names(__name__, {module: (name, ...)})``."""
    names = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id == "_PUBLIC" for t in node.targets)):
            names.update(ast.literal_eval(node.value))
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_names"
              and len(node.args) == 2 and isinstance(node.args[1], ast.Dict)):
            for module, listed in ast.literal_eval(node.args[1]).items():
                names.update(dict.fromkeys(listed, module))
    return names


def imports(modules, top="glomo_tf"):
    """``{(importer, imported): first line}`` between the modules of ``modules``."""
    trees = {name: ast.parse(open(path, encoding="utf-8").read(), path)
             for name, path in modules.items()}
    faces = {name: lazy_names(tree) for name, tree in trees.items()
             if modules[name].endswith("__init__.py")}

    def known(name):  # the module itself, else the package that holds it
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    edges = {}
    for importer, tree in trees.items():
        package = importer if modules[importer].endswith("__init__.py") \
            else importer.rpartition(".")[0]
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    targets.append(full if full in modules
                                   else faces.get(base, {}).get(alias.name, base))
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module"
                  and node.args and isinstance(node.args[0], ast.Constant)
                  and isinstance(node.args[0].value, str)):
                targets = [node.args[0].value]
            for target in targets:
                if target == top or target.startswith(top + "."):
                    target = known(target)
                    if target and target != importer:
                        edges.setdefault((importer, target), node.lineno)
    return edges


# ------------------------------------------------------------------------------- the checks
def part_of(module, order):
    """``(floor, part)`` of ``module``: the longest part of ``order`` that names it or a package
    above it (the package's face, the first part, holds only itself); None when none does."""
    best = None
    for floor, parts in enumerate(order):
        for part in parts:
            if module == part or (floor > 0 and module.startswith(part + ".")):
                if best is None or len(part) > len(best[1]):
                    best = (floor, part)
    return best


def order_violations(edges, order, modules=()):
    """One line per module without a part and per import of a part on the importer's floor or
    above it."""
    problems = [f"{m} has no part in ORDER" for m in sorted(modules) if part_of(m, order) is None]
    for (importer, imported), line in sorted(edges.items()):
        source, target = part_of(importer, order), part_of(imported, order)
        if source is None or target is None or source[1] == target[1]:
            continue
        if target[0] >= source[0]:
            way = "sideways" if target[0] == source[0] else "up"
            problems.append(f"{importer} (line {line}) imports {imported}: {way}, from floor "
                            f"{source[0]} ({source[1]}) to floor {target[0]} ({target[1]})")
    return problems


def circles(edges):
    """The circles of the import graph: its strongly connected components of two or more
    modules (Tarjan's algorithm), each sorted."""
    graph = {}
    for importer, imported in edges:
        graph.setdefault(importer, set()).add(imported)
        graph.setdefault(imported, set())
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def describe_circle(component, edges):
    members = set(component)
    ties = [f"  {a} (line {line}) -> {b}" for (a, b), line in sorted(edges.items())
            if a in members and b in members]
    return f"circle of {len(component)}: " + ", ".join(component) + "\n" + "\n".join(ties)


@pytest.fixture(scope="module")
def package_imports():
    modules = module_files(PACKAGE)
    return modules, imports(modules)


# ------------------------------------------------------------------------------- the package
def test_nothing_points_up_or_sideways(package_imports):
    modules, edges = package_imports
    edges = {edge: line for edge, line in edges.items() if edge not in WAITING}
    problems = order_violations(edges, ORDER, modules)
    assert not problems, "\n".join(problems)


def test_no_circles(package_imports):
    _, edges = package_imports
    edges = {edge: line for edge, line in edges.items() if edge not in WAITING}
    found = circles(edges)
    assert not found, "\n".join(describe_circle(c, edges) for c in found)


def test_waiting_imports_are_still_there(package_imports):
    """An entry of WAITING whose import is gone is struck off the list."""
    _, edges = package_imports
    gone = [f"{a} -> {b}" for a, b in WAITING if (a, b) not in edges]
    assert not gone, "no longer imported, remove from WAITING: " + ", ".join(gone)


def test_every_part_of_the_order_exists_once(package_imports):
    modules, _ = package_imports
    parts = [part for floor in ORDER for part in floor]
    assert len(parts) == len(set(parts))
    missing = [part for part in parts if part not in modules]
    assert not missing, missing


# ------------------------------------------------------------------------------- the checker
def plant(root, files):
    """A package ``glomo_tf`` under ``root`` with ``files`` ({relative path: source})."""
    for relative, source in files.items():
        path = root / "glomo_tf" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return module_files(str(root / "glomo_tf"))


PLANTED_ORDER = [("glomo_tf",), ("glomo_tf.ops",), ("glomo_tf.layers",), ("glomo_tf.saving",)]
CLEAN = {
    "__init__.py": '_PUBLIC = {"Layer": "glomo_tf.layers.layer"}\n',
    "ops.py": "import os\n",
    "layers/__init__.py": "from glomo_tf.layers.layer import Layer\n",
    "layers/layer.py": "from .. import ops\nfrom glomo_tf import __version__\nLayer = object\n",
    "saving.py": "import glomo_tf.layers\nfrom glomo_tf import Layer\n",
}


def test_the_checker_passes_a_clean_package(tmp_path):
    modules = plant(tmp_path, CLEAN)
    edges = imports(modules)
    assert set(edges) == {("glomo_tf.layers", "glomo_tf.layers.layer"),
                          ("glomo_tf.layers.layer", "glomo_tf.ops"),
                          ("glomo_tf.layers.layer", "glomo_tf"),
                          ("glomo_tf.saving", "glomo_tf.layers"),
                          ("glomo_tf.saving", "glomo_tf.layers.layer")}
    assert order_violations(edges, PLANTED_ORDER, modules) == []
    assert circles(edges) == []


@pytest.mark.parametrize("planted", [
    "def softmax():\n    from glomo_tf.layers.layer import Layer\n",  # inside a function
    "import glomo_tf.layers.layer\n",
    "from glomo_tf.layers import layer\n",
    "from glomo_tf import Layer\n",  # a name the face loads from its module
    "import importlib\nimportlib.import_module('glomo_tf.saving')\n",
])
def test_the_checker_flags_a_planted_upward_import(tmp_path, planted):
    modules = plant(tmp_path, {**CLEAN, "ops.py": planted})
    problems = order_violations(imports(modules), PLANTED_ORDER, modules)
    assert len(problems) == 1 and problems[0].startswith("glomo_tf.ops (line ")
    assert ": up, from floor 1 (glomo_tf.ops)" in problems[0]


def test_the_checker_flags_a_sideways_import_a_circle_and_a_module_without_a_part(tmp_path):
    modules = plant(tmp_path, {
        **CLEAN, "layers/layer.py": "from . import other\n",
        "layers/other.py": "def f():\n    from .layer import Layer\n",
        "trees.py": "", "viz.py": "from glomo_tf import trees\n"})
    edges = imports(modules)
    assert circles(edges) == [["glomo_tf.layers.layer", "glomo_tf.layers.other"]]
    order = PLANTED_ORDER[:1] + [("glomo_tf.ops", "glomo_tf.trees", "glomo_tf.viz")] \
        + PLANTED_ORDER[2:]
    assert order_violations(edges, order, modules) == [
        "glomo_tf.viz (line 1) imports glomo_tf.trees: sideways, from floor 1 (glomo_tf.viz) "
        "to floor 1 (glomo_tf.trees)"]
    assert order_violations(edges, PLANTED_ORDER, modules) == [
        "glomo_tf.trees has no part in ORDER", "glomo_tf.viz has no part in ORDER"]


if __name__ == "__main__":
    found = {edge for edge in imports(module_files(PACKAGE)) if edge not in WAITING}
    for number, floor in reversed(list(enumerate(ORDER))):
        for part in floor:
            below = sorted({part_of(b, ORDER)[1] for a, b in found
                            if part_of(a, ORDER)[1] == part and part_of(b, ORDER)[1] != part})
            print(f"floor {number:2d}  {part:28s} imports {', '.join(below) or 'nothing'}")
    for (importer, imported), why in WAITING.items():
        print(f"waiting: {importer} -> {imported}: {why}")
