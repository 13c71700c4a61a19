"""Packages whose public names load their module on first use (PEP 562)."""

import importlib
import sys


def lazy_names(package, modules):
    """``(__all__, __getattr__, __dir__)`` for ``package`` (its ``__name__``), whose public names
    are listed per module in ``modules`` (``{module: (name, ...)}``): a name imports its module
    when first read and is then kept in the package, so ``--help`` and light readers never pay
    for TensorFlow."""
    module_of = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name):
        if name not in module_of:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module_of[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(module_of))

    return sorted(module_of), __getattr__, __dir__
