"""A task model saved with its preset (``GlomoClassifier.save_to_preset``): ``task.json``
(the model's Keras config) and ``task.weights.h5`` (its layers' weights), beside the predictor
and the tokenizer of the preset format (:mod:`glomo_tf.presets`)."""

import json
import os

from glomo_tf.preset_sources import PresetError, existing_file, first_line, read_json
from glomo_tf.presets import (TASK_CONFIG_FILE, TASK_WEIGHTS_FILE, preset_directory,
                              preset_metadata, write_metadata)


def write_task(directory, task, entries):
    """Writes the Keras model ``task`` into the preset ``directory`` (its predictor and
    tokenizer written first): ``task.json`` (``keras.saving.serialize_keras_object``) and
    ``task.weights.h5`` (its layers' weights, without optimizer state), and ``entries`` (what
    the model card says of the task: ``class_name``, ``num_classes``, ``transfer_at``) as
    ``metadata.json``'s ``task``.
    Returns ``directory``."""
    import keras

    with open(os.path.join(directory, TASK_CONFIG_FILE), "w") as f:
        json.dump(keras.saving.serialize_keras_object(task), f, indent=1)
    _task_weights_model(task).save_weights(os.path.join(directory, TASK_WEIGHTS_FILE))
    write_metadata(directory, {"task": dict(entries)})
    return os.fspath(directory)


def _task_weights_model(task):
    """A functional model over ``task``'s layers, uncompiled: its weights file holds the layers'
    variables and no optimizer state (a loaded task is compiled afresh)."""
    import keras
    return keras.Model(task.inputs, task.outputs, name="glomo_task")


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


def load_task_weights(preset, task):
    """Reads ``task.weights.h5`` of ``preset`` into ``task`` (:func:`read_task`); returns it."""
    weights = existing_file(preset_directory(preset), TASK_WEIGHTS_FILE)
    try:
        _task_weights_model(task).load_weights(weights)
    except Exception as error:
        raise PresetError(f"could not read the task weights {weights} ({type(error).__name__}: "
                          f"{first_line(error)}): write the preset again.") from None
    return task
