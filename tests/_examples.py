"""Importing a script of ``examples/`` (not a package) as a module, for its tests."""

import importlib.util
import os
from _paths import REPO

EXAMPLES = os.path.join(REPO, "examples")


def load_example(name):
    """``examples/<name>.py`` imported as the module ``name``."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
