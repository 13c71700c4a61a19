"""Presets: a pretrained graph predictor and its tokenizer in one directory, keras-hub's layout.

A preset directory holds::

    metadata.json          format version, code versions, date, corpus, tokens seen, perplexity,
                           the data's licence, how the weights are stored
    config.json            the GraphPredictor (keras.saving.serialize_keras_object)
    model.weights.h5       its weights (Keras' weights file; float16 on disk for the built-ins)
    assets/tokenizer/      vocab.txt + tokenizer.json: the ids the predictor was trained on
    reference_graphs.npz   a few sequences and the graphs the predictor gave them when the preset
                           was written, to check a loaded preset against (:func:`check_preset`)
    README.md              the model card, written from metadata.json with every preset
                           (:func:`model_card`; the Hugging Face Hub shows it as the model's page)
    task.json, task.weights.h5
                           a task model saved with the preset (``GlomoClassifier.save_to_preset``)

This module is the format: where presets are, and how a layer, a tokenizer, the metadata and
the reference graphs are written and read. It imports no layer, tokenizer or model (it sits
below them all): each class reads and writes itself on top of it (``from_preset`` and
``save_to_preset`` on :class:`~glomo_tf.GraphPredictor`, :class:`~glomo_tf.GlomoTransfer`,
``Tokenizer``, ``GlomoTokenizer``, ``GlomoClassifier`` and ``GlomoPairClassifier``; each class's
``presets`` lists the built-in presets it loads, as keras-hub's ``Backbone.presets`` does).

A preset is named by (:func:`preset_directory`):

- a directory written by ``save_to_preset`` (or :func:`save_preset`, ``glomo pretrain``'s
  ``RUN/preset``);
- the name of a built-in preset (:func:`list_presets`), shipped with the package;
- a Hugging Face Hub handle ``hf://OWNER/NAME`` (``hf://OWNER/NAME@REVISION``), downloaded by
  ``huggingface_hub``, or a Kaggle Models handle
  ``kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION]``, downloaded by ``kagglehub``; both
  libraries come with the ``hub`` extra (``pip install 'glomo_tf[hub]'``) and are imported only
  for a handle::

    transfer = glomo_tf.GlomoTransfer.from_preset("glomo_books_en")
    tokenizer = glomo_tf.GlomoTokenizer.from_preset("hf://someone/glomo_books_en")
    glomo_tf.save_preset(predictor, tokenizer, "my_preset", metadata={"corpus": [...]})
"""

import contextlib
import datetime
import json
import os
import shutil
import tempfile

import numpy as np

from glomo_tf import hparams, preset_cards, preset_sources
from glomo_tf.preset_sources import (HUB_EXTRA, HUBS, MissingHubLibrary,  # noqa: F401
                                     PresetError, existing_file, first_line, read_json)

PRESET_FORMAT = "glomo_tf.preset"
PRESET_FORMAT_VERSION = 1
METADATA_FILE = "metadata.json"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
TOKENIZER_ASSETS = os.path.join("assets", "tokenizer")
REFERENCE_FILE = "reference_graphs.npz"
CARD_FILE = "README.md"
TASK_CONFIG_FILE = "task.json"
TASK_WEIGHTS_FILE = "task.weights.h5"
WEIGHTS_DTYPES = ("float32", "float16")
BUILTIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "builtin_presets")
class BuiltinPresets:
    """A class attribute listing the built-in presets the class loads, ``{name: metadata}``
    (:func:`list_presets`, read when it is asked for), as keras-hub's ``Backbone.presets``::

        >>> sorted(glomo_tf.GraphPredictor.presets)
        ['glomo_books_en', 'glomo_planted_demo']
        >>> list(glomo_tf.GlomoClassifier.presets)     # the presets that read text
        ['glomo_books_en']

    Args:
        needs_tokenizer: bool, list only the presets with a tokenizer (the classes that read
            text: a preset of token ids has none).
    """

    def __init__(self, needs_tokenizer=False):
        self.needs_tokenizer = bool(needs_tokenizer)

    def __get__(self, instance, owner):
        return {name: info for name, info in list_presets().items()
                if info.get("tokenizer") is not None or not self.needs_tokenizer}


# ------------------------------------------------------------------- a predictor and its tokenizer
def save_preset(predictor, tokenizer, directory, metadata=None, weights_dtype="float32",
                reference_texts=None, reference_ids=None):
    """Writes ``predictor`` and its ``tokenizer`` as a preset directory; returns its path.

    The predictor's saver (:meth:`glomo_tf.GraphPredictor.save_to_preset`) and the tokenizer's
    (:meth:`glomo_tf.data.Tokenizer.save_to_preset`) called together: the directory appears
    whole when both are written, or not at all.

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
    predictor = _predictor_argument(predictor, tokenizer)
    if reference_texts is not None:
        if tokenizer is None:
            raise ValueError("reference_texts need the tokenizer; pass reference_ids for a "
                             "predictor without one.")
        reference_ids = tokenizer.encode(list(reference_texts)).to_tensor().numpy()
    with writing(directory) as partial:
        predictor.save_to_preset(partial, metadata=metadata, weights_dtype=weights_dtype,
                                 reference_ids=reference_ids, reference_texts=reference_texts)
        if tokenizer is not None:
            tokenizer.save_to_preset(partial)
    return os.fspath(directory)


def _predictor_argument(predictor, tokenizer):
    """``predictor`` (a pretrainer's ``graph_predictor``), checked to come first, before the
    tokenizer (or None) and the directory."""
    import keras

    def a_predictor(value):
        value = getattr(value, "graph_predictor", value)
        return isinstance(value, keras.layers.Layer) and hasattr(value, "save_to_preset")

    if isinstance(tokenizer, (str, os.PathLike)):
        raise TypeError("save_preset(predictor, tokenizer, directory): the tokenizer comes "
                        "second (None for a predictor of token ids), the directory third.")
    if a_predictor(tokenizer) and not a_predictor(predictor):
        raise TypeError(f"save_preset(predictor, tokenizer, directory): the predictor comes first "
                        f"and the tokenizer second; got a {type(predictor).__name__} first and a "
                        f"{type(tokenizer).__name__} second.")
    if not a_predictor(predictor):
        raise TypeError(f"save_preset needs a GraphPredictor (or a GlomoPretrainer), got "
                        f"{type(predictor).__name__}.")
    return getattr(predictor, "graph_predictor", predictor)


def check_preset(preset, predictor=None):
    """The largest absolute difference between the graphs ``predictor`` (default: the preset's
    layer read afresh, :func:`read_layer`) gives the preset's reference sequences and the graphs
    recorded with them."""
    directory = preset_directory(preset)
    token_ids, recorded = read_reference_graphs(directory)
    predictor = predictor or read_layer(directory)
    graphs = predictor(token_ids, training=False)["graphs"]
    return float(np.abs(np.asarray(graphs, np.float32) - recorded).max())


# --------------------------------------------------------------------------------- writing
@contextlib.contextmanager
def writing(directory):
    """A new, empty directory to write a preset into, which replaces ``directory`` when the block
    ends, so a preset is never half old, half new: it is written beside the target and moved into
    place at the end (removed on an error, the previous preset left intact). ``directory`` must be
    new, empty or a preset. Its model card (:func:`write_model_card`) is written last, from the
    metadata the block wrote."""
    final = os.fspath(directory)
    _check_writable(final)
    partial = f"{final.rstrip(os.sep)}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    try:
        yield partial
        write_model_card(partial, name=os.path.basename(os.path.abspath(final)))
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if os.path.isdir(final):  # a preset (checked above) or an empty directory: replaced
        shutil.rmtree(final)
    os.replace(partial, final)


def write_layer(directory, layer, weights_dtype="float32"):
    """``config.json`` and ``model.weights.h5`` of the built Keras ``layer`` (a model of ids
    ``[batch, T]``), its float32 weights stored as ``weights_dtype``."""
    import keras

    hparams.check_choice("weights_dtype", weights_dtype, WEIGHTS_DTYPES)
    with open(os.path.join(directory, CONFIG_FILE), "w") as f:
        json.dump(keras.saving.serialize_keras_object(layer), f, indent=1)
    weights_path = os.path.join(directory, WEIGHTS_FILE)
    _weights_model(layer).save_weights(weights_path)
    if weights_dtype == "float16":
        _store_half(weights_path)


def write_metadata(directory, entries):
    """Merges ``entries`` into the preset's ``metadata.json`` (written with the format, its
    version, the versions of the code and the date when the preset has none yet)."""
    path = os.path.join(directory, METADATA_FILE)
    if os.path.isfile(path):
        info = read_json(directory, METADATA_FILE)
    else:
        import keras

        from glomo_tf import __version__
        info = {
            "format": PRESET_FORMAT, "format_version": PRESET_FORMAT_VERSION,
            "glomo_tf_version": __version__, "keras_version": keras.__version__,
            "tensorflow_version": _tensorflow_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        }
    info.update(entries)
    with open(path, "w") as f:
        json.dump(info, f, indent=1)


def write_reference_graphs(directory, token_ids, graphs, texts=()):
    """``reference_graphs.npz``: ``token_ids [N, T]``, the ``graphs`` the predictor gave them
    and the ``texts`` they were read from (none for ids); returns the metadata entry."""
    np.savez_compressed(os.path.join(directory, REFERENCE_FILE), token_ids=token_ids,
                        graphs=np.asarray(graphs, np.float32),
                        texts=np.array(list(texts), dtype=object).astype(str))
    return {"sequences": int(np.shape(token_ids)[0])}


def save_tokenizer(directory, tokenizer):
    """Writes ``tokenizer`` (its ``save`` and ``get_config``) into the preset ``directory``, for
    ``Tokenizer.save_to_preset``: its files under ``assets/tokenizer`` (replacing any there) and
    its settings in ``metadata.json``; it must have the ids of the preset's predictor. Returns
    ``directory``."""
    info = preset_metadata(directory)
    if tokenizer.vocabulary_size != info.get("vocabulary_size"):
        raise ValueError(
            f"the tokenizer has {tokenizer.vocabulary_size} ids and the predictor reads "
            f"{info.get('vocabulary_size')}: save the tokenizer the predictor was trained with.")
    assets = os.path.join(directory, TOKENIZER_ASSETS)
    shutil.rmtree(assets, ignore_errors=True)
    tokenizer.save(assets)
    write_metadata(directory, {"tokenizer": tokenizer.get_config()})
    write_model_card(directory)
    return os.fspath(directory)


def _check_writable(directory):
    if os.path.exists(directory):
        if not os.path.isdir(directory):
            raise ValueError(f"{directory!r} exists and is not a directory: pass a new or empty "
                             "directory for the preset.")
        if os.listdir(directory) and not os.path.isfile(os.path.join(directory, METADATA_FILE)):
            raise ValueError(f"{directory!r} is not empty and holds no preset: pass a new or "
                             "empty directory (an existing preset there is replaced).")


def _weights_model(layer):
    """The functional wrapper whose weights file holds the layer's variables."""
    import keras
    token_ids = keras.Input((None,), dtype="int32", name="token_ids")
    return keras.Model(token_ids, layer(token_ids), name="glomo_preset")


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


def rename_weight_groups(path, renames):
    """Moves the layers ``{old: new}`` of the Keras weights file ``path`` (``layers/old`` ->
    ``layers/new``), in place."""
    import h5py

    with h5py.File(path, "r+") as h5:
        for old in renames:  # through temporary names: a new name may be an old one
            h5.move(f"layers/{old}", f"layers/{old}.upgrading")
        for old, new in renames.items():
            h5.move(f"layers/{old}.upgrading", f"layers/{new}")


def _tensorflow_version():
    import tensorflow as tf
    return tf.__version__


# --------------------------------------------------------------------------------- reading
def list_presets():
    """The built-in presets: ``{name: metadata}`` (their ``metadata.json``), sorted by name."""
    names = sorted(n for n in os.listdir(BUILTIN_DIR)
                   if os.path.isfile(os.path.join(BUILTIN_DIR, n, METADATA_FILE))) \
        if os.path.isdir(BUILTIN_DIR) else []
    return {name: read_json(os.path.join(BUILTIN_DIR, name), METADATA_FILE) for name in names}


def preset_directory(preset):
    """The local directory of ``preset``: an existing directory as given, a built-in's by name,
    or an ``hf://`` / ``kaggle://`` handle's download (:func:`download`).

    Raises :class:`PresetError` for a name that is none of these, and
    :class:`MissingHubLibrary` (one line naming the extra) for a handle whose library is not
    installed, before anything is read or downloaded.
    """
    preset = os.fspath(preset)
    if preset_sources.scheme(preset) is not None:
        return preset_sources.download(preset, METADATA_FILE)
    if os.path.isdir(preset):
        return preset
    builtin = os.path.join(BUILTIN_DIR, preset)
    if os.sep not in preset and os.path.isfile(os.path.join(builtin, METADATA_FILE)):
        return builtin
    names = ", ".join(list_presets()) or "none installed"
    raise PresetError(f"no preset {preset!r}: pass a preset directory (written by "
                      f"save_to_preset, glomo_tf.save_preset or glomo pretrain's RUN/preset), a "
                      f"built-in name ({names}) or an hf:// or kaggle:// handle.")


def is_preset(path):
    """True when ``path`` is a directory holding a preset's ``metadata.json``."""
    return os.path.isfile(os.path.join(os.fspath(path), METADATA_FILE))


def upload_preset(uri, preset):
    """Uploads the local preset directory ``preset`` (written by ``save_to_preset``, with its
    model card) to ``uri``, keras-hub's ``upload_preset``: ``hf://OWNER/NAME`` (a Hugging Face
    model repository, created when missing) or ``kaggle://OWNER/MODEL/FRAMEWORK/VARIATION`` (a
    new version of that Kaggle model variation), through the ``hub`` extra's library, logged in
    as that library is (``huggingface-cli login``, Kaggle's API token). The preset is checked
    whole, and the handle's form, before anything is sent; ``from_preset(uri)`` loads it back.
    Returns ``uri``."""
    directory = os.fspath(preset)
    if preset_sources.scheme(directory) is not None or not os.path.isdir(directory):
        raise PresetError(f"upload_preset takes a local preset directory, got {directory!r}: "
                          "write one with save_to_preset first.")
    info = preset_metadata(directory)
    needed = [CARD_FILE] + ([CONFIG_FILE, WEIGHTS_FILE] if info.get("class_name") else []) + (
        [TASK_CONFIG_FILE, TASK_WEIGHTS_FILE] if info.get("task") else []) + (
        [os.path.join(TOKENIZER_ASSETS, n) for n in ("vocab.txt", "tokenizer.json")]
        if info.get("tokenizer") else [])
    for name in needed:
        existing_file(directory, name)
    return preset_sources.upload(os.fspath(uri), directory)


def preset_metadata(preset):
    """``metadata.json`` of ``preset`` (a directory or a built-in name), checked."""
    directory = preset_directory(preset)
    info = read_json(directory, METADATA_FILE)
    if info.get("format") != PRESET_FORMAT:
        raise PresetError(f"{os.path.join(directory, METADATA_FILE)} is not a glomo_tf preset's "
                          f"metadata (format {info.get('format')!r}): pass a directory written "
                          "by glomo_tf.save_preset.")
    version = info.get("format_version")
    if not isinstance(version, int) or version > PRESET_FORMAT_VERSION:
        raise PresetError(f"{directory!r} is a preset of format version {version}, newer than "
                          f"this glomo_tf reads ({PRESET_FORMAT_VERSION}): upgrade glomo_tf.")
    return info


def read_layer(preset, cls=None, dtype=None):
    """The Keras layer stored in ``preset`` (a directory or a built-in name), built, its weights
    read, in the dtype policy ``dtype`` (default: the one it was saved with, float32).

    The layer's class must be registered with Keras (imported): ``cls`` (for example
    :class:`~glomo_tf.GraphPredictor`, whose ``from_preset`` calls this) is the class it must be
    an instance of. Raises :class:`PresetError` naming the file for a preset that does not hold
    one or cannot be read.
    """
    directory = preset_directory(preset)
    preset_metadata(directory)
    import keras

    config = read_json(directory, CONFIG_FILE)
    if dtype is not None:
        config = json.loads(json.dumps(config))
        config.setdefault("config", {})["dtype"] = keras.dtype_policies.get(dtype).name
    kind = (cls or keras.layers.Layer).__name__
    try:
        layer = keras.saving.deserialize_keras_object(config)
    except Exception as error:
        raise PresetError(f"{os.path.join(directory, CONFIG_FILE)} does not describe a "
                          f"{kind} ({type(error).__name__}: {first_line(error)}).") from None
    if not isinstance(layer, cls or keras.layers.Layer):
        raise PresetError(f"{os.path.join(directory, CONFIG_FILE)} describes a "
                          f"{type(layer).__name__}, not a {kind}.")
    return load_layer_weights(directory, layer, config)


def load_layer_weights(preset, layer, config=None):
    """Reads the weights file of ``preset`` into ``layer``, built from the preset's config (by
    :func:`read_layer`, or inside a task model the preset holds); returns ``layer``."""
    directory = preset_directory(preset)
    config = config or read_json(directory, CONFIG_FILE)
    weights = existing_file(directory, WEIGHTS_FILE)
    try:
        _load_weights(_weights_model(layer), weights, config)
    except Exception as error:
        raise PresetError(f"could not read the weights {weights} ({type(error).__name__}: "
                          f"{first_line(error)}): the file is damaged or belongs to another "
                          "preset; write the preset again.") from None
    return layer


def _load_weights(model, weights, config):
    """``model.load_weights(weights)``; a coupled predictor's preset of earlier versions (a
    ``GraphPredictor`` config with ``coupled``) filed its weights under ``layers/graph_predictor``,
    today's class under ``layers/coupled_graph_predictor``: read through a renamed copy."""
    if config.get("class_name") != "GraphPredictor" or not config["config"].get("coupled"):
        return model.load_weights(weights)
    with tempfile.TemporaryDirectory() as scratch:
        upgraded = shutil.copy(weights, os.path.join(scratch, WEIGHTS_FILE))
        rename_weight_groups(upgraded, {"graph_predictor": "coupled_graph_predictor"})
        return model.load_weights(upgraded)


def has_tokenizer(preset):
    """Whether ``preset`` holds a tokenizer (a preset of token ids has none)."""
    return preset_metadata(preset).get("tokenizer") is not None


def tokenizer_directory(preset):
    """The preset's tokenizer directory (``assets/tokenizer``), checked to exist."""
    directory = preset_directory(preset)
    if not has_tokenizer(directory):
        raise PresetError(f"the preset {preset!r} has no tokenizer (its predictor reads ids): "
                          "it cannot read text.")
    existing_file(directory, os.path.join(TOKENIZER_ASSETS, "vocab.txt"))
    return os.path.join(directory, TOKENIZER_ASSETS)


def read_reference_graphs(preset):
    """``(token_ids [N, T], graphs)`` recorded with ``preset`` when it was written."""
    recorded = np.load(existing_file(preset_directory(preset), REFERENCE_FILE))
    return recorded["token_ids"], recorded["graphs"]


# ------------------------------------------------------------------------------ the model card
def model_card(preset, name=None):
    """The model card of ``preset`` (Markdown), from its ``metadata.json`` only: what it is, how
    it was trained (what the metadata records of it), how to load it, the licence of its data
    and its sources (:func:`glomo_tf.preset_cards.render_card`). ``name``: how the card calls the
    preset (default: its directory's name).

    Every preset is written with its card (:func:`write_model_card`); the built-in presets'
    cards add the results recorded for them (``examples/make_presets.py``).
    """
    directory = preset_directory(preset)
    name = name or os.path.basename(os.path.abspath(directory))
    builtin = os.path.dirname(os.path.abspath(directory)) == os.path.abspath(BUILTIN_DIR)
    return preset_cards.render_card(preset_metadata(directory), name, builtin, HUB_EXTRA)


def write_model_card(directory, name=None):
    """Writes ``README.md``, the :func:`model_card` of the preset in ``directory`` (nothing
    while it has no metadata yet); returns its path or None."""
    if not os.path.isfile(os.path.join(directory, METADATA_FILE)):
        return None
    path = os.path.join(directory, CARD_FILE)
    with open(path, "w", encoding="utf-8") as f:
        f.write(model_card(directory, name=name))
    return path
