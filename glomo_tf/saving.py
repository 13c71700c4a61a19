"""Saving and loading a graph predictor on its own, for transfer into downstream models."""

import os

import keras

from glomo_tf.layers.graph_predictor import GraphPredictor


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
    registered classes are known: the ``glomo`` command imports them lazily."""
    import glomo_tf.layers  # noqa: F401
    import glomo_tf.models  # noqa: F401

    return keras.saving.load_model(filepath, **kwargs)


def load_graph_predictor(filepath, trainable=False, dtype=None):
    """Loads a predictor saved by :func:`save_graph_predictor`; frozen unless ``trainable``.

    Args:
        filepath: a ``.keras`` file, the run directory of ``glomo pretrain`` (its
            ``graph_predictor.keras`` is read), or a preset directory
            (:func:`glomo_tf.save_preset`).
        trainable: bool, leave the predictor trainable (for fine-tuning).
        dtype: optional dtype policy to run it in (``"mixed_bfloat16"``, ``"float32"``); default:
            the policy it was saved with. See :func:`with_dtype_policy`.
    """
    filepath = os.fspath(filepath)
    from glomo_tf.presets import is_preset, load_preset_predictor
    if os.path.isdir(filepath) and is_preset(filepath):
        return load_preset_predictor(filepath, trainable=trainable, dtype=dtype)
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


def with_dtype_policy(predictor, dtype):
    """``predictor`` computing under the dtype policy ``dtype``: the same layer when it already
    does, else a copy made from its config with that policy and given its weights (which stay
    float32 under ``mixed_bfloat16``). A saved layer keeps the policy it was saved with, whatever
    the global policy, so this is how a float32 predictor runs in bfloat16."""
    policy = keras.dtype_policies.get(dtype)
    if predictor.dtype_policy.name == policy.name:
        return predictor
    if not predictor.built:
        raise ValueError("with_dtype_policy needs a built GraphPredictor (call it once, or load "
                         "it with load_graph_predictor).")
    clone = type(predictor).from_config({**predictor.get_config(), "dtype": policy.name})
    clone.build((None, None))
    clone.set_weights(predictor.get_weights())
    clone.trainable = predictor.trainable
    return clone
