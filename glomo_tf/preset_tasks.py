"""A task model saved with its preset (``GlomoClassifier.save_to_preset``): ``task.json``
(the model's Keras config) and ``task.weights.h5`` (the weights of its layers other than the
graph predictor, in the model's order of variables), beside the predictor and the tokenizer of
the preset format (:mod:`glomo_tf.presets`): the predictor's weights are stored once, in its own
file."""

import json
import os

from glomo_tf.preset_sources import PresetError, existing_file, first_line, read_json
from glomo_tf.presets import (TASK_CONFIG_FILE, TASK_WEIGHTS_FILE, preset_directory,
                              preset_metadata, write_metadata)


def write_task(directory, task, entries, shared=()):
    """Writes the Keras model ``task`` into the preset ``directory`` (its predictor and
    tokenizer written first): ``task.json`` (``keras.saving.serialize_keras_object``) and
    ``task.weights.h5`` (its variables but those of ``shared``, the layers whose weights the
    preset holds elsewhere, in the order of ``task.weights``, which a model built again from
    ``task.json`` shares; no optimizer state), and ``entries`` (what the model card
    says of the task: ``class_name``, ``num_classes``, ``transfer_at``) as ``metadata.json``'s
    ``task``. Returns ``directory``."""
    import h5py
    import keras

    with open(os.path.join(directory, TASK_CONFIG_FILE), "w") as f:
        json.dump(keras.saving.serialize_keras_object(task), f, indent=1)
    with h5py.File(os.path.join(directory, TASK_WEIGHTS_FILE), "w") as f:
        f.attrs["format"] = _FORMAT
        for i, variable in enumerate(_own_variables(task, shared)):
            f.create_dataset(f"{i:05d}", data=keras.ops.convert_to_numpy(variable))
            f[f"{i:05d}"].attrs["path"] = variable.path
    write_metadata(directory, {"task": dict(entries)})
    return os.fspath(directory)


_FORMAT = "glomo_tf task weights: the variables in order, shared layers left out"


def _own_variables(task, shared):
    """``task``'s variables that no layer of ``shared`` holds, in ``task.weights``' order."""
    left_out = {id(v) for layer in shared for v in layer.weights}
    return [v for v in task.weights if id(v) not in left_out]


def has_task(preset):
    """Whether ``preset`` holds a task model (:func:`write_task`)."""
    return preset_metadata(preset).get("task") is not None


def read_task(preset, cls):
    """The task model of ``preset``, an instance of exactly ``cls``, built from ``task.json``
    and not yet given its weights: the caller gives its layers their assets (the tokenizer's
    vocabulary), then :func:`load_task_weights`."""
    import keras

    directory = preset_directory(preset)
    saved = (preset_metadata(directory).get("task") or {}).get("class_name")
    if saved is None:
        raise PresetError(f"the preset {preset!r} holds no task model: pass num_classes for a new "
                          "one on its tokenizer and graph predictor.")
    if saved != cls.__name__:
        raise PresetError(f"the preset {preset!r} holds a {saved}, not a {cls.__name__}: load "
                          f"it with {saved}.from_preset.")
    config = read_json(directory, TASK_CONFIG_FILE)
    try:
        return keras.saving.deserialize_keras_object(config)
    except Exception as error:
        raise PresetError(f"{os.path.join(directory, TASK_CONFIG_FILE)} does not describe a "
                          f"{cls.__name__} ({type(error).__name__}: {first_line(error)}).") \
            from None


def load_task_weights(preset, task, shared=()):
    """Reads ``task.weights.h5`` of ``preset`` into ``task`` (:func:`read_task`), all but the
    variables of ``shared`` (the caller loads those from their own files); returns it."""
    import h5py

    weights = existing_file(preset_directory(preset), TASK_WEIGHTS_FILE)
    own = _own_variables(task, shared)
    try:
        with h5py.File(weights, "r") as f:
            if f.attrs.get("format") != _FORMAT:
                raise ValueError("not a task weights file")
            stored = [(f[name][()], f[name].attrs.get("path")) for name in sorted(f)]
        if len(stored) != len(own):
            raise ValueError(f"it holds {len(stored)} variables where the model has {len(own)}")
        for (value, path), variable in zip(stored, own):  # every shape checked first
            if tuple(value.shape) != tuple(variable.shape):
                raise ValueError(f"{path} has shape {tuple(value.shape)} where the model's "
                                 f"{variable.path} has {tuple(variable.shape)}")
        for (value, _), variable in zip(stored, own):
            variable.assign(value)
    except Exception as error:
        raise PresetError(f"could not read the task weights {weights} ({type(error).__name__}: "
                          f"{first_line(error)}): write the preset again.") from None
    return task
