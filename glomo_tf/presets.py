"""Presets: a pretrained graph predictor and its tokenizer in one directory, keras-hub's layout.

A preset directory holds::

    metadata.json          format version, code versions, date, corpus, tokens seen, perplexity,
                           the data's licence, how the weights are stored
    config.json            the GraphPredictor (keras.saving.serialize_keras_object)
    model.weights.h5       its weights (Keras' weights file; float16 on disk for the built-ins)
    assets/tokenizer/      vocab.txt + tokenizer.json: the ids the predictor was trained on
    reference_graphs.npz   a few sequences and the graphs the predictor gave them when the preset
                           was written, to check a loaded preset against (:func:`check_preset`)

``save_preset`` writes one (``glomo pretrain`` writes ``RUN/preset/`` at the end of a run);
``load_preset``, ``GraphPredictor.from_preset``, ``Tokenizer.from_preset`` and
``GlomoTransfer.from_preset`` read one by directory or by the name of a built-in preset
(:func:`list_presets`), with no network and nothing from the run that made it::

    transfer = glomo_tf.GlomoTransfer.from_preset("glomo_books_en")
    tokenizer = glomo_tf.Tokenizer.from_preset("glomo_books_en")
    glomo_tf.save_preset(predictor, tokenizer, "my_preset", metadata={"corpus": [...]})
"""

import datetime
import json
import os
import shutil

import numpy as np

from glomo_tf import hparams

PRESET_FORMAT = "glomo_tf.preset"
PRESET_FORMAT_VERSION = 1
METADATA_FILE = "metadata.json"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
TOKENIZER_ASSETS = os.path.join("assets", "tokenizer")
REFERENCE_FILE = "reference_graphs.npz"
WEIGHTS_DTYPES = ("float32", "float16")
BUILTIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "builtin_presets")


class PresetError(ValueError):
    """A preset that cannot be found or read; the message names the file and the fix."""


# --------------------------------------------------------------------------------- writing
def save_preset(predictor, tokenizer, directory, metadata=None, weights_dtype="float32",
                reference_texts=None, reference_ids=None):
    """Writes ``predictor`` and its ``tokenizer`` as a preset directory; returns its path.

    Args:
        predictor: a built :class:`~glomo_tf.GraphPredictor`, or a
            :class:`~glomo_tf.GlomoPretrainer` (its ``graph_predictor`` is saved).
        tokenizer: the :class:`~glomo_tf.data.Tokenizer` whose ids the predictor reads, or None
            for a predictor of ids without text (the planted demo's).
        directory: where to write; created if missing. An existing directory must be empty or
            hold a preset (which is replaced).
        metadata: a dict merged into ``metadata.json`` (for example ``corpus``,
            ``tokens_seen``, ``validation_perplexity``, ``data_licence``, ``description``).
        weights_dtype: ``"float32"``, or ``"float16"`` to halve the file: loading restores the
            variables' own dtype (float32); graphs move by the rounding of the weights (the
            built-in presets state by how much in their ``metadata.json``).
        reference_texts: a few texts (with ``tokenizer``) or ``reference_ids`` (int ``[N, T]``)
            whose graphs are recorded with the preset, as the predictor gives them now in
            float32, for :func:`check_preset`.

    Returns:
        ``directory`` as a string.
    """
    import keras

    from glomo_tf import __version__
    from glomo_tf.layers.graph_predictor import GraphPredictor

    if isinstance(tokenizer, (str, os.PathLike)):
        raise TypeError("save_preset(predictor, tokenizer, directory): the tokenizer comes "
                        "second (None for a predictor of token ids), the directory third.")
    predictor = getattr(predictor, "graph_predictor", predictor)
    if not isinstance(predictor, GraphPredictor):
        raise TypeError(f"save_preset needs a GraphPredictor (or a GlomoPretrainer), got "
                        f"{type(predictor).__name__}.")
    if not predictor.built:
        raise ValueError("save_preset needs a built GraphPredictor: call it once, or load it "
                         "with glomo_tf.load_graph_predictor.")
    hparams.check_choice("weights_dtype", weights_dtype, WEIGHTS_DTYPES)
    if tokenizer is not None and tokenizer.vocabulary_size != predictor.vocabulary_size:
        raise ValueError(
            f"the tokenizer has {tokenizer.vocabulary_size} ids and the predictor reads "
            f"{predictor.vocabulary_size}: save the tokenizer the predictor was trained with.")
    if reference_texts is not None and tokenizer is None:
        raise ValueError("reference_texts need the tokenizer; pass reference_ids for a "
                         "predictor without one.")
    final = os.fspath(directory)
    _check_writable(final)
    # Written beside the target and moved into place at the end: a preset is never half old,
    # half new, and an interrupted save leaves the previous one intact.
    directory = f"{final.rstrip(os.sep)}.partial-{os.getpid()}"
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)

    from glomo_tf.saving import with_dtype_policy
    source = with_dtype_policy(predictor, "float32")  # configs and references in float32
    with open(os.path.join(directory, CONFIG_FILE), "w") as f:
        json.dump(keras.saving.serialize_keras_object(source), f, indent=1)
    weights_path = os.path.join(directory, WEIGHTS_FILE)
    _weights_model(source).save_weights(weights_path)
    if weights_dtype == "float16":
        _store_half(weights_path)
    if tokenizer is not None:
        tokenizer.save(os.path.join(directory, TOKENIZER_ASSETS))
    reference = None
    if reference_texts is not None:
        reference_ids = tokenizer.encode(list(reference_texts)).to_tensor().numpy()
    if reference_ids is not None:
        reference_ids = np.asarray(reference_ids, np.int32)
        graphs = source(reference_ids, training=False)["graphs"].numpy().astype(np.float32)
        np.savez_compressed(os.path.join(directory, REFERENCE_FILE), token_ids=reference_ids,
                            graphs=graphs,
                            texts=np.array(list(reference_texts or []), dtype=object).astype(str))
        reference = {"sequences": int(reference_ids.shape[0])}
    info = {
        "format": PRESET_FORMAT, "format_version": PRESET_FORMAT_VERSION,
        "class_name": "GraphPredictor",
        "glomo_tf_version": __version__, "keras_version": keras.__version__,
        "tensorflow_version": _tensorflow_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "parameters": int(source.count_params()),
        "vocabulary_size": int(source.vocabulary_size),
        "tokenizer": tokenizer.get_config() if tokenizer is not None else None,
        "weights_dtype": weights_dtype,
        "reference_graphs": reference,
    }
    info.update(metadata or {})
    with open(os.path.join(directory, METADATA_FILE), "w") as f:
        json.dump(info, f, indent=1)
    if os.path.isdir(final):  # a preset (checked above) or an empty directory: replaced
        shutil.rmtree(final)
    os.replace(directory, final)
    return final


def _check_writable(directory):
    if os.path.exists(directory):
        if not os.path.isdir(directory):
            raise ValueError(f"{directory!r} exists and is not a directory: pass a new or empty "
                             "directory for the preset.")
        if os.listdir(directory) and not os.path.isfile(os.path.join(directory, METADATA_FILE)):
            raise ValueError(f"{directory!r} is not empty and holds no preset: pass a new or "
                             "empty directory (an existing preset there is replaced).")


def _load_weights(model, weights, config):
    """``model.load_weights(weights)``; a coupled predictor's preset of earlier versions (a
    ``GraphPredictor`` config with ``coupled``) filed its weights under ``layers/graph_predictor``,
    today's class under ``layers/coupled_graph_predictor``: read through a renamed copy."""
    if config.get("class_name") != "GraphPredictor" or not config["config"].get("coupled"):
        return model.load_weights(weights)
    import tempfile

    from glomo_tf.saving import rename_weight_groups
    with tempfile.TemporaryDirectory() as scratch:
        upgraded = shutil.copy(weights, os.path.join(scratch, WEIGHTS_FILE))
        rename_weight_groups(upgraded, {"graph_predictor": "coupled_graph_predictor"})
        return model.load_weights(upgraded)


def _weights_model(predictor):
    """The functional wrapper whose weights file holds the predictor's variables."""
    import keras
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    return keras.Model(token_ids, predictor(token_ids), name="glomo_preset")


def _store_half(path):
    """Rewrites a Keras weights file with its float32 arrays as float16 (Keras casts them back
    when it assigns them to the float32 variables), the large ones byte-shuffled and gzipped
    (h5py's standard filters, which Keras reads as any array: 12% smaller for the books
    preset). A new file: HDF5 does not give back the space of deleted arrays."""
    import h5py

    def copy(source, target):
        target.attrs.update(dict(source.attrs))
        for key, item in source.items():
            if isinstance(item, h5py.Group):
                copy(item, target.create_group(key))
                continue
            values = item[()]
            if values.dtype == np.float32:
                if np.abs(values).max(initial=0.0) >= np.finfo(np.float16).max:
                    raise ValueError(f"weight {item.name} does not fit float16; save the preset "
                                     "with weights_dtype='float32'.")
                values = values.astype(np.float16)
            compact = dict(shuffle=True, compression="gzip", compression_opts=9) \
                if values.size >= 4096 else {}
            target.create_dataset(key, data=values, **compact)
            target[key].attrs.update(dict(item.attrs))

    half = path + ".half"
    with h5py.File(path, "r") as source, h5py.File(half, "w") as target:
        copy(source, target)
    os.replace(half, path)


def _tensorflow_version():
    import tensorflow as tf
    return tf.__version__


# --------------------------------------------------------------------------------- reading
def list_presets():
    """The built-in presets: ``{name: metadata}`` (their ``metadata.json``), sorted by name."""
    names = sorted(n for n in os.listdir(BUILTIN_DIR)
                   if os.path.isfile(os.path.join(BUILTIN_DIR, n, METADATA_FILE))) \
        if os.path.isdir(BUILTIN_DIR) else []
    return {name: _read_json(os.path.join(BUILTIN_DIR, name), METADATA_FILE) for name in names}


def preset_directory(preset):
    """The directory of ``preset``: an existing directory as given, or a built-in's by name."""
    preset = os.fspath(preset)
    if os.path.isdir(preset):
        return preset
    builtin = os.path.join(BUILTIN_DIR, preset)
    if os.sep not in preset and os.path.isfile(os.path.join(builtin, METADATA_FILE)):
        return builtin
    names = ", ".join(list_presets()) or "none installed"
    raise PresetError(f"no preset {preset!r}: pass a preset directory (written by "
                      f"glomo_tf.save_preset or glomo pretrain's RUN/preset) or a built-in name "
                      f"({names}).")


def is_preset(path):
    """True when ``path`` is a directory holding a preset's ``metadata.json``."""
    return os.path.isfile(os.path.join(os.fspath(path), METADATA_FILE))


def preset_metadata(preset):
    """``metadata.json`` of ``preset`` (a directory or a built-in name), checked."""
    directory = preset_directory(preset)
    info = _read_json(directory, METADATA_FILE)
    if info.get("format") != PRESET_FORMAT:
        raise PresetError(f"{os.path.join(directory, METADATA_FILE)} is not a glomo_tf preset's "
                          f"metadata (format {info.get('format')!r}): pass a directory written "
                          "by glomo_tf.save_preset.")
    version = info.get("format_version")
    if not isinstance(version, int) or version > PRESET_FORMAT_VERSION:
        raise PresetError(f"{directory!r} is a preset of format version {version}, newer than "
                          f"this glomo_tf reads ({PRESET_FORMAT_VERSION}): upgrade glomo_tf.")
    return info


def load_preset(preset, trainable=False, dtype=None):
    """``(predictor, tokenizer)`` of ``preset`` (a directory or a built-in name).

    The predictor is built and frozen unless ``trainable``; ``dtype`` is a dtype policy to run it
    in (``"mixed_bfloat16"``), default float32. ``tokenizer`` is None for a preset of ids only.
    """
    directory = preset_directory(preset)
    return load_preset_predictor(directory, trainable, dtype), load_preset_tokenizer(directory)


def load_preset_predictor(preset, trainable=False, dtype=None):
    """The preset's :class:`~glomo_tf.GraphPredictor` (see :func:`load_preset`)."""
    import keras

    import glomo_tf.layers  # noqa: F401  (registers the classes)

    directory = preset_directory(preset)
    preset_metadata(directory)
    config = _read_json(directory, CONFIG_FILE)
    if dtype is not None:
        config = json.loads(json.dumps(config))
        config.setdefault("config", {})["dtype"] = keras.dtype_policies.get(dtype).name
    try:
        predictor = keras.saving.deserialize_keras_object(config)
    except Exception as error:
        raise PresetError(f"{os.path.join(directory, CONFIG_FILE)} does not describe a "
                          f"GraphPredictor ({type(error).__name__}: {_first_line(error)}).") from None
    weights = _existing(directory, WEIGHTS_FILE)
    model = _weights_model(predictor)
    try:
        _load_weights(model, weights, config)
    except Exception as error:
        raise PresetError(f"could not read the weights {weights} ({type(error).__name__}: "
                          f"{_first_line(error)}): the file is damaged or belongs to another "
                          "preset; write the preset again.") from None
    predictor.trainable = trainable
    return predictor


def load_preset_tokenizer(preset):
    """The preset's :class:`~glomo_tf.data.Tokenizer`, or None for a preset of ids only."""
    from glomo_tf.data.vocabulary import Tokenizer

    directory = preset_directory(preset)
    if preset_metadata(directory).get("tokenizer") is None:
        return None
    path = tokenizer_directory(directory)
    try:
        return Tokenizer.load(path)
    except (OSError, ValueError) as error:
        raise PresetError(f"could not read the preset's tokenizer in {path}: "
                          f"{_first_line(error)}") from None


def tokenizer_directory(preset):
    """The preset's tokenizer directory (``assets/tokenizer``), checked to exist."""
    directory = preset_directory(preset)
    if preset_metadata(directory).get("tokenizer") is None:
        raise PresetError(f"the preset {preset!r} has no tokenizer (its predictor reads ids): "
                          "it cannot read text.")
    _existing(directory, os.path.join(TOKENIZER_ASSETS, "vocab.txt"))
    return os.path.join(directory, TOKENIZER_ASSETS)


def check_preset(preset, predictor=None):
    """The largest absolute difference between the graphs ``predictor`` (default: the preset
    loaded afresh) gives the preset's reference sequences and the graphs recorded with them."""
    directory = preset_directory(preset)
    recorded = np.load(_existing(directory, REFERENCE_FILE))
    predictor = predictor or load_preset_predictor(directory)
    graphs = predictor(recorded["token_ids"], training=False)["graphs"]
    return float(np.abs(np.asarray(graphs, np.float32) - recorded["graphs"]).max())


def _existing(directory, name):
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
        raise PresetError(f"the preset {directory!r} is missing {name}: it is partial or "
                          "damaged; write it again (glomo_tf.save_preset).")
    return path


def _read_json(directory, name):
    path = _existing(directory, name)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as error:
        raise PresetError(f"could not read {path} ({_first_line(error)}): the preset is damaged; "
                          "write it again (glomo_tf.save_preset).") from None


def _first_line(error):
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
