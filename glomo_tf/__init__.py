"""glomo_tf: GLoMo latent relational graphs, learned without labels and transferred in Keras.

The public names below load on first use, so a process that only needs a light part (the command
line's parsers, the serving client, :mod:`glomo_tf.hparams`) does not import TensorFlow. The layers
still register with Keras before any glomo_tf file can be read: at once when Keras is already
imported, else right after Keras is (``keras.saving.load_model`` then finds every glomo_tf class,
whichever of ``import glomo_tf`` and ``import keras`` came first).
"""

import importlib
import importlib.abc
import importlib.util
import sys
import typing

__version__ = "0.1.0"

# Public name -> its module.
_PUBLIC = {
    "ContextDecoder": "glomo_tf.layers", "ContextualizedNonLocal": "glomo_tf.layers",
    "FeaturePredictor": "glomo_tf.layers", "GlomoTransfer": "glomo_tf.layers",
    "GraphMixture": "glomo_tf.layers", "GraphPredictor": "glomo_tf.layers",
    "LinearChainCRF": "glomo_tf.layers", "SharedPrivateRNN": "glomo_tf.layers",
    "GlomoPretrainer": "glomo_tf.models", "Perplexity": "glomo_tf.models",
    "load_graph_predictor": "glomo_tf.saving", "save_graph_predictor": "glomo_tf.saving",
}
__all__ = sorted(_PUBLIC)

if typing.TYPE_CHECKING:  # what the names are, for readers and static analysis
    from glomo_tf.layers import (ContextDecoder, ContextualizedNonLocal,  # noqa: F401
                                 FeaturePredictor, GlomoTransfer, GraphMixture, GraphPredictor,
                                 LinearChainCRF, SharedPrivateRNN)
    from glomo_tf.models import GlomoPretrainer, Perplexity  # noqa: F401
    from glomo_tf.saving import load_graph_predictor, save_graph_predictor  # noqa: F401


def __getattr__(name):
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'glomo_tf' has no attribute {name!r}")


def _ready(name, just_run=None):
    """Whether module ``name`` is imported and done initialising (``just_run``: the module whose
    code has just run, still flagged as initialising)."""
    module = sys.modules.get(name)
    return module is not None and (name == just_run or not getattr(
        getattr(module, "__spec__", None), "_initializing", False))


def _register_with_keras(just_run=None):
    """Imports the modules whose classes are ``keras.saving.register_keras_serializable``, once
    TensorFlow and Keras are both fully imported (and unless that import is under way)."""
    if "glomo_tf.layers" in sys.modules:
        return  # imported, or being imported: its classes register themselves
    if _ready("keras", just_run) and _ready("tensorflow", just_run):
        for module in ("glomo_tf.layers", "glomo_tf.models"):
            importlib.import_module(module)


class _RegisterAfterKeras(importlib.abc.MetaPathFinder):
    """Calls :func:`_register_with_keras` after ``keras`` and after ``tensorflow`` are imported
    (Keras imports TensorFlow, and TensorFlow may import Keras while it initialises: registering
    needs both finished)."""

    def __init__(self):
        self.pending = {"keras", "tensorflow"}

    def find_spec(self, name, path=None, target=None):
        if name not in self.pending:
            return None
        self.pending.discard(name)  # the lookup below must not come back here
        if not self.pending and self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            _register_with_keras(just_run=name)

        spec.loader.exec_module = exec_then_register
        return spec


if _ready("keras") and _ready("tensorflow"):
    _register_with_keras()
elif not any(isinstance(finder, _RegisterAfterKeras) for finder in sys.meta_path):
    sys.meta_path.insert(0, _RegisterAfterKeras())
