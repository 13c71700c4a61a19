"""glomo_tf: GLoMo latent relational graphs, learned without labels and transferred in Keras."""

import importlib
import os
import sys

__version__ = "0.1.0"

# Public name -> its module.
_PUBLIC = {
    "ContextDecoder": "glomo_tf.layers", "ContextualizedNonLocal": "glomo_tf.layers",
    "FeaturePredictor": "glomo_tf.layers", "GlomoTransfer": "glomo_tf.layers",
    "GraphPropagation": "glomo_tf.layers",
    "GraphMixture": "glomo_tf.layers", "GraphPredictor": "glomo_tf.layers",
    "CoupledGraphPredictor": "glomo_tf.layers",
    "LinearChainCRF": "glomo_tf.layers", "OrderedMemory": "glomo_tf.layers",
    "SharedPrivateRNN": "glomo_tf.layers",
    "GlomoPretrainer": "glomo_tf.models", "Perplexity": "glomo_tf.models",
    "load_graph_predictor": "glomo_tf.saving", "save_graph_predictor": "glomo_tf.saving",
    # Presets: a pretrained predictor and its tokenizer in one directory (keras-hub's layout).
    "save_preset": "glomo_tf.presets", "load_preset": "glomo_tf.saving",
    "list_presets": "glomo_tf.presets", "upload_preset": "glomo_tf.presets",
    "Tokenizer": "glomo_tf.data.vocabulary",
    "GlomoTokenizer": "glomo_tf.preprocessing",
    # A task model on raw strings, from a preset (keras-hub's TextClassifier shape).
    "GlomoClassifier": "glomo_tf.models", "GlomoPairClassifier": "glomo_tf.models",
    # Self-supervised sentence encoders.
    "SentenceEncoder": "glomo_tf.layers", "SentencePretrainer": "glomo_tf.models",
    # GLoMo on images.
    "GraphPredictor2D": "glomo_tf.layers", "MaskedConv2D": "glomo_tf.layers",
    "GlomoPretrainer2D": "glomo_tf.models", "build_image_classifier": "glomo_tf.models",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name):
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'glomo_tf' has no attribute {name!r}")


def _started_as_the_command_line():
    """True in a process started as the ``glomo`` command (its console script)."""
    name = os.path.splitext(os.path.basename(sys.argv[0] if sys.argv else ""))[0]
    return name in ("glomo", "glomo-script")


# `import glomo_tf` imports TensorFlow and the layers, which registers every class with Keras, so
# `keras.saving.load_model` reads glomo_tf models after it. The `glomo` command defers that to the
# command that needs it (its --help and flag errors come before TensorFlow loads), and the names
# above then load on first use.
if not _started_as_the_command_line():
    for _name in _PUBLIC:
        __getattr__(_name)
    del _name
