"""Saving and loading a graph predictor on its own, for transfer into downstream models, and a
preset's predictor with its tokenizer (:func:`load_preset`); the preset format is
:mod:`glomo_tf.presets`, below the layers this module imports."""

import os

import keras

from glomo_tf import presets
from glomo_tf.data.vocabulary import Tokenizer
from glomo_tf.layers.graph_predictor import GraphPredictor
from glomo_tf.precision import with_dtype_policy
from glomo_tf.presets import rename_weight_groups


def save_graph_predictor(graph_predictor, filepath):
    """Saves a :class:`GraphPredictor` (weights and config) as a ``.keras`` file.

    The file holds a small functional model ``token_ids -> graphs`` wrapping the predictor, so it can
    also be loaded with ``keras.saving.load_model`` and called on ids directly.
    """
    if not isinstance(graph_predictor, GraphPredictor):
        raise TypeError(f"Expected a GraphPredictor, got {type(graph_predictor).__name__}.")
    if not str(filepath).endswith(".keras"):
        raise ValueError(f"The file name must end in .keras, got {filepath!r}.")
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    outputs = graph_predictor(token_ids)
    model = keras.Model(token_ids, outputs, name="glomo_graph_predictor")
    model.save(filepath)


def load_keras_file(filepath, **kwargs):
    """``keras.saving.load_model`` after importing every glomo_tf layer and model, so that their
    registered classes are known (the ``glomo`` command imports them lazily); a file of earlier
    versions that :func:`upgrade_keras_file` must convert is converted on the way."""
    import tempfile

    import glomo_tf.layers  # noqa: F401
    import glomo_tf.models  # noqa: F401

    with tempfile.TemporaryDirectory() as scratch:
        upgraded = os.path.join(scratch, "upgraded.keras")
        if upgrade_keras_file(filepath, upgraded):
            return keras.saving.load_model(upgraded, **kwargs)
    return keras.saving.load_model(filepath, **kwargs)


def upgrade_keras_file(filepath, output):
    """Writes ``filepath``, a functional model's ``.keras`` file with a coupled predictor among
    its layers saved before :class:`~glomo_tf.CoupledGraphPredictor` was its own class, to
    ``output`` in today's layout; returns False (writing nothing) for a file that needs no
    change. Keras files a functional model's layers under their class names, so such a
    predictor's weights moved from ``layers/graph_predictor`` to
    ``layers/coupled_graph_predictor`` (and the other predictors' numbering with them), and its
    config is written in today's form; every other weight and config stay as they are::

        python -c "import glomo_tf; glomo_tf.saving.upgrade_keras_file('old.keras', 'new.keras')"
    """
    import json
    import zipfile

    with zipfile.ZipFile(filepath) as archive:
        config = json.loads(archive.read("config.json"))
        renames, legacy_names, names = {}, {}, {}
        for layer in config.get("config", {}).get("layers", []):
            if layer.get("class_name") != "GraphPredictor":
                continue  # other layers' names are not affected
            legacy = _unique("graph_predictor", legacy_names)
            coupled = layer.get("config", {}).get("coupled")
            name = _unique("coupled_graph_predictor" if coupled else "graph_predictor", names)
            if name != legacy:
                renames[legacy] = name
            if coupled:  # today's config, of today's class
                today = keras.saving.serialize_keras_object(
                    GraphPredictor.from_config(layer["config"]))
                layer.update({key: today[key] for key in ("module", "class_name", "config",
                                                          "registered_name")})
        if not renames:
            return False
        weights = output + ".weights.h5"
        with open(weights, "wb") as handle:
            handle.write(archive.read("model.weights.h5"))
        rename_weight_groups(weights, renames)
        with open(weights, "rb") as handle, zipfile.ZipFile(output, "w") as target:
            upgraded = handle.read()
            for item in archive.infolist():
                data = {"model.weights.h5": upgraded,
                        "config.json": json.dumps(config).encode()}.get(item.filename)
                target.writestr(item, archive.read(item.filename) if data is None else data)
    os.remove(weights)
    return True


def _unique(name, used):
    """Keras' names for a functional model's layers of one class in its weights file: the class
    name in snake case, then ``_1``, ``_2``... (``keras.src.saving.saving_lib``)."""
    if name in used:
        used[name] += 1
        return f"{name}_{used[name]}"
    used[name] = 0
    return name


def load_graph_predictor(filepath, trainable=False, dtype=None):
    """Loads a predictor saved by :func:`save_graph_predictor`; frozen unless ``trainable``.

    Args:
        filepath: a ``.keras`` file, the run directory of ``glomo pretrain`` (its
            ``graph_predictor.keras`` is read), or a preset directory
            (:func:`glomo_tf.save_preset`).
        trainable: bool, leave the predictor trainable (for fine-tuning).
        dtype: optional dtype policy to run it in (``"mixed_bfloat16"``, ``"float32"``); default:
            the policy it was saved with. See :func:`~glomo_tf.precision.with_dtype_policy`.
    """
    filepath = os.fspath(filepath)
    if os.path.isdir(filepath) and presets.is_preset(filepath):
        return GraphPredictor.from_preset(filepath, trainable=trainable, dtype=dtype)
    if os.path.isdir(filepath):
        run_file = os.path.join(filepath, "graph_predictor.keras")
        if not os.path.isfile(run_file):
            raise FileNotFoundError(
                f"{filepath} is a directory without graph_predictor.keras: pass the .keras file, "
                "or the output directory of a finished `glomo pretrain` run.")
        filepath = run_file
    elif not os.path.isfile(filepath):
        raise FileNotFoundError(
            f"No graph predictor at {filepath}: pass a .keras file written by "
            "glomo_tf.save_graph_predictor or a `glomo pretrain` run directory.")
    elif not filepath.endswith(".keras"):
        raise ValueError(
            f"{filepath} is not a .keras file: pass the file written by "
            "glomo_tf.save_graph_predictor or a `glomo pretrain` run directory.")
    model = load_keras_file(filepath)
    predictors = [layer for layer in model.layers if isinstance(layer, GraphPredictor)]
    if len(predictors) != 1:
        raise ValueError(
            f"{filepath} does not hold exactly one GraphPredictor (found {len(predictors)}); save "
            "it with glomo_tf.save_graph_predictor.")
    predictor = predictors[0]
    if dtype is not None:
        predictor = with_dtype_policy(predictor, dtype)
    predictor.trainable = trainable
    return predictor


def load_preset(preset, trainable=False, dtype=None):
    """``(predictor, tokenizer)`` of ``preset`` (a directory or a built-in name):
    :meth:`glomo_tf.GraphPredictor.from_preset` and :meth:`glomo_tf.data.Tokenizer.from_preset`
    together.

    The predictor is built and frozen unless ``trainable``; ``dtype`` is a dtype policy to run it
    in (``"mixed_bfloat16"``), default float32. ``tokenizer`` is None for a preset of ids only.
    """
    directory = presets.preset_directory(preset)
    predictor = GraphPredictor.from_preset(directory, trainable=trainable, dtype=dtype)
    tokenizer = Tokenizer.from_preset(directory) if presets.has_tokenizer(directory) else None
    return predictor, tokenizer
