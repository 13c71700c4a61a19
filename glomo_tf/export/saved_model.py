"""Export a graph predictor and its tokenizer as a SavedModel for TensorFlow Serving.

``export_saved_model`` writes ``EXPORT_DIR/MODEL_NAME/VERSION/`` (TensorFlow Serving's layout: a
model's base path holds one directory per integer version, and the server loads the newest)::

    saved_model.pb, fingerprint.pb
    variables/                   the graph predictor's weights (inference mode)
    assets/vocab.txt             the vocabulary: the lookup table is initialised from this file
    assets/tokenizer.json        the tokenizer settings (splitter, lowercase, subword, ...)
    assets/glomo_export.json     what was exported: model config, max_length, top_k, signatures

The directory is self-contained: serving raw text needs nothing else. Tokenisation runs inside the
SavedModel with the same kernels as training (see :mod:`glomo_tf.data.vocabulary`), and the only
ops outside core TensorFlow are the three tensorflow-text tokenizers that stock TensorFlow Serving
links in (:mod:`glomo_tf.export.serving_ops`).

Signatures (``B`` = batch, ``T`` = units of the longest text of the batch after truncation to
``max_length``, ``L`` layers, ``K`` heads, ``k`` = ``top_k``; all batch-major, so TensorFlow
Serving's batching and its row-format JSON ``{"instances": [...]}`` work):

====================  =================  ====================================================
signature             input              outputs
====================  =================  ====================================================
serving_default       text [B] string    tokens, token_ids, lengths, truncated, graphs
graphs_from_ids       token_ids [B, T']  token_ids, lengths, truncated, graphs
top_k_edges           text [B] string    tokens, token_ids, lengths, truncated,
                                         edge_sources, edge_weights, mean_edge_sources,
                                         mean_edge_weights
top_k_edges_from_ids  token_ids [B, T']  token_ids, lengths, truncated, edge_sources,
                                         edge_weights, mean_edge_sources, mean_edge_weights
mean_graphs           text [B] string    tokens, token_ids, lengths, truncated, mean_graphs
====================  =================  ====================================================

- ``tokens`` string ``[B, T]`` (padded with ``""``), ``token_ids`` int32 ``[B, T]`` (padded
  with 0), ``lengths`` int32 ``[B]`` (units kept), ``truncated`` bool ``[B]`` (the text had more
  than ``max_length`` units; only the first ``max_length`` are kept, as in training windows).
- ``graphs`` float32 ``[B, 2, L, K, T, T]``: ``graphs[b, z, l, h, t, s]`` is the weight that the
  receiving unit ``t`` puts on the source ``s`` (direction ``z`` 0 = forward, sources ``s < t``;
  1 = backward, ``s > t``). Rows sum to 1 or are all zero. Rows and columns of padding are zero,
  so a text's graphs do not depend on the other texts of the batch.
- ``edge_sources`` int32 / ``edge_weights`` float32 ``[B, 2, L, K, T, k]``: the ``k`` heaviest
  sources of each receiving unit, heaviest first; where a unit has fewer than ``k`` sources with a
  positive weight the rest are ``-1`` / ``0``. ``mean_edge_*`` ``[B, 2, L, T, k]``: the same for the
  graphs averaged over heads. A 256-unit text gives ``2*L*K*256*k`` numbers instead of
  ``2*L*K*256*256``.
- ``mean_graphs`` float32 ``[B, 2, L, T, T]``: the graphs averaged over the ``K`` heads.

The ``*_from_ids`` signatures take int32 ids (0 = padding, anything in ``[0, vocabulary_size)``)
instead of text; columns after ``max_length`` and trailing all-padding columns are dropped, so
clients may pad every request to ``max_length`` (which TensorFlow Serving's request batching needs,
see serving/README.md). Ids outside the vocabulary fail with ``INVALID_ARGUMENT``.
"""

import datetime
import json
import os
import re
import shutil
import tempfile

import keras
import tensorflow as tf
import tensorflow_text as tf_text

from glomo_tf.data import vocabulary as vocab_lib
from glomo_tf.layers.graph_predictor import GraphPredictor
from glomo_tf.precision import check_precision, with_dtype_policy

FORMAT = "glomo_tf.export"
FORMAT_VERSION = 1
METADATA_FILE = "glomo_export.json"
DEFAULT_MAX_LENGTH = 256
DEFAULT_TOP_K = 8

TEXT_INPUT = "text"
IDS_INPUT = "token_ids"
_TEXT_OUTPUTS = ("tokens", "token_ids", "lengths", "truncated")
_IDS_OUTPUTS = ("token_ids", "lengths", "truncated")
_TOP_K_OUTPUTS = ("edge_sources", "edge_weights", "mean_edge_sources", "mean_edge_weights")

# signature name -> (input name, output names). The order of the outputs is the documented order.
SIGNATURES = {
    "serving_default": (TEXT_INPUT, _TEXT_OUTPUTS + ("graphs",)),
    "graphs_from_ids": (IDS_INPUT, _IDS_OUTPUTS + ("graphs",)),
    "top_k_edges": (TEXT_INPUT, _TEXT_OUTPUTS + _TOP_K_OUTPUTS),
    "top_k_edges_from_ids": (IDS_INPUT, _IDS_OUTPUTS + _TOP_K_OUTPUTS),
    "mean_graphs": (TEXT_INPUT, _TEXT_OUTPUTS + ("mean_graphs",)),
}

_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


# ---------------------------------------------------------------------------------- public API
def export_saved_model(model, tokenizer, export_dir, model_name, version=None, max_length=None,
                       top_k=DEFAULT_TOP_K, precision=None):
    """Exports a graph predictor with its tokenizer to ``export_dir/model_name/version/``.

    Args:
        model: a :class:`~glomo_tf.GraphPredictor`, a :class:`~glomo_tf.GlomoPretrainer` (its
            ``graph_predictor`` is exported), a Keras model holding exactly one graph predictor
            (such as a file written by :func:`glomo_tf.save_graph_predictor`), or the path of a
            ``.keras`` file holding one of these.
        tokenizer: the :class:`~glomo_tf.data.Tokenizer` the model was trained with, its
            :class:`~glomo_tf.data.Vocabulary` (settings from its ``tokenizer.json``), or the
            directory written by ``Tokenizer.save`` (``glomo pretrain`` writes ``RUN/tokenizer``).
        export_dir: the model repository, TensorFlow Serving's ``--model_base_path`` parent.
        model_name: the served model's name (letters, digits, ``_``, ``-``, ``.``).
        version: positive int; default: one more than the newest version already there (1 first).
        max_length: int, units kept per text (longer texts are truncated, ``truncated`` says so);
            default: the tokenizer's ``max_length`` if it has one, else 256.
        top_k: int, edges kept per receiving unit by the ``top_k_edges`` signatures.
        precision: None (the predictor's own dtype policy), ``"float32"`` or
            ``"mixed_bfloat16"``: the policy the served graph computes in
            (:func:`glomo_tf.precision.with_dtype_policy`). The outputs are float32 either way;
            bfloat16 is fast on serving CPUs with bfloat16 matrix units and GPUs, and runs,
            emulated and slower, elsewhere. ``metadata.json`` records it as ``precision``.

    Returns:
        The path of the version directory.

    Raises:
        ValueError: the vocabulary does not have the model's ``vocabulary_size``; the version
            directory exists already; a bad argument (each message says what to change).
        FileNotFoundError: a model or vocabulary path does not exist.

    The SavedModel is written to a hidden temporary directory next to the version directory and
    renamed into place at the end, so a TensorFlow Serving instance polling ``export_dir`` never
    sees a half-written version.

    Example:

    >>> import tempfile, numpy as np
    >>> from glomo_tf import GraphPredictor
    >>> from glomo_tf.data import Tokenizer
    >>> tokenizer = Tokenizer.build(["the cat sat", "the dog sat down"])
    >>> predictor = GraphPredictor(vocabulary_size=tokenizer.vocabulary_size, hidden_dim=8,
    ...                            num_layers=1, num_heads=2, conv_layers=1)
    >>> _ = predictor(np.ones((1, 3), "int32"))
    >>> path = export_saved_model(predictor, tokenizer, tempfile.mkdtemp(), "glomo")
    >>> os.path.basename(path)
    '1'
    """
    predictor = resolve_graph_predictor(model)
    if precision is not None:
        predictor = with_dtype_policy(predictor, check_precision(precision))
    tokenizer = resolve_tokenizer(tokenizer)
    vocab_lib.check_vocabulary_matches(tokenizer.vocabulary, predictor)
    max_length = _positive_int(
        "max_length", max_length if max_length is not None
        else (tokenizer.max_length or DEFAULT_MAX_LENGTH))
    top_k = _positive_int("top_k", top_k)
    if top_k > max_length:
        raise ValueError(f"top_k={top_k} exceeds max_length={max_length}: a unit has fewer than "
                         f"max_length sources. Choose top_k <= {max_length}.")
    model_dir = model_directory(export_dir, model_name)
    version = _check_version(model_dir, version)
    final_path = os.path.join(model_dir, str(version))

    os.makedirs(model_dir, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{version}.incomplete-", dir=model_dir)
    files = tempfile.mkdtemp(prefix="glomo-export-assets-")
    try:
        tokenizer.save(files)
        metadata = _metadata(predictor, tokenizer, model_name, version, max_length, top_k)
        with open(os.path.join(files, METADATA_FILE), "w", encoding="utf-8") as f:
            json.dump(metadata, f, indent=2, sort_keys=True, default=str)
            f.write("\n")
        module = GlomoServingModule(predictor, tokenizer, files, max_length, top_k)
        signatures = module.signatures()
        tf.saved_model.save(module, staging, signatures=signatures)
        if os.path.exists(final_path):  # another process took the version meanwhile
            raise ValueError(_exists_message(model_dir, version))
        os.chmod(staging, 0o755)  # mkdtemp makes it private; a server user must read it
        os.rename(staging, final_path)
    finally:
        shutil.rmtree(files, ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)
    return final_path


def model_directory(export_dir, model_name):
    """``export_dir/model_name`` after checking the name (TensorFlow Serving's base path)."""
    if not isinstance(model_name, str) or not _MODEL_NAME.match(model_name):
        raise ValueError(
            f"Invalid model name {model_name!r}: use letters, digits, '_', '-' and '.', starting "
            "with a letter or digit (it becomes part of the URL /v1/models/<name>).")
    return os.path.join(os.fspath(export_dir), model_name)


def existing_versions(model_dir):
    """Sorted integer versions under a model's base path (what TensorFlow Serving would load)."""
    if not os.path.isdir(model_dir):
        return []
    return sorted(int(name) for name in os.listdir(model_dir)
                  if name.isdigit() and os.path.isdir(os.path.join(model_dir, name)))


def next_version(model_dir):
    """One more than the newest version under ``model_dir`` (1 when there is none)."""
    versions = existing_versions(model_dir)
    return versions[-1] + 1 if versions else 1


def resolve_graph_predictor(model):
    """The :class:`GraphPredictor` of a predictor, pretrainer, Keras model or ``.keras`` path."""
    if isinstance(model, (str, os.PathLike)):
        model = load_keras_model(model)
    if isinstance(model, GraphPredictor):
        predictor = model
    elif isinstance(getattr(model, "graph_predictor", None), GraphPredictor):
        predictor = model.graph_predictor
    elif isinstance(model, keras.Model):
        found = [layer for layer in _nested_layers(model) if isinstance(layer, GraphPredictor)]
        if len(found) != 1:
            raise ValueError(
                f"The Keras model {model.name!r} holds {len(found)} GraphPredictor layers; export "
                "needs exactly one. Pass the predictor itself (model.graph_predictor).")
        predictor = found[0]
    else:
        raise TypeError(f"Expected a GraphPredictor, a GlomoPretrainer or a .keras path, got "
                        f"{type(model).__name__}.")
    if not predictor.built:
        raise ValueError(
            "The graph predictor has no weights yet (it was never built or trained), so the "
            "export would serve random graphs. Pretrain it, or load it from a .keras file.")
    return predictor


def load_keras_model(path):
    """Loads a ``.keras`` file written by ``glomo pretrain`` (pretrainer or graph predictor)."""
    from glomo_tf.saving import load_keras_file

    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"No model file at {path!r}. Pass the .keras file written by glomo pretrain "
            "(RUN/pretrainer.keras or RUN/graph_predictor.keras).")
    if not path.endswith(".keras") or not os.path.isfile(path):
        raise ValueError(f"{path!r} is not a .keras file. Pass RUN/pretrainer.keras or "
                         "RUN/graph_predictor.keras as written by glomo pretrain.")
    try:
        return load_keras_file(path, compile=False)
    except Exception as error:  # a damaged file, or one from another library version
        raise ValueError(f"Could not load {path!r} as a Keras model ({type(error).__name__}: "
                         f"{error}). Pass a .keras file written by glomo pretrain.") from error


def _nested_layers(model):
    for layer in model.layers:
        yield layer
        if hasattr(layer, "layers"):
            yield from _nested_layers(layer)


def resolve_tokenizer(tokenizer):
    """A :class:`~glomo_tf.data.Tokenizer` from a tokenizer, a vocabulary or a saved directory."""
    if isinstance(tokenizer, vocab_lib.Tokenizer):
        return tokenizer
    if isinstance(tokenizer, vocab_lib.Vocabulary):
        settings = dict(vocab_lib.Tokenizer.DEFAULTS)
        settings.update({k: v for k, v in (tokenizer.settings or {}).items()
                         if k in vocab_lib.Tokenizer.DEFAULTS})
        return vocab_lib.Tokenizer(tokenizer, **settings)
    if isinstance(tokenizer, (str, os.PathLike)):
        return vocab_lib.Tokenizer.load(os.fspath(tokenizer))
    raise TypeError(f"Expected a Tokenizer, a Vocabulary or a tokenizer directory, got "
                    f"{type(tokenizer).__name__}.")


# ---------------------------------------------------------------------------------- the module
class _Untracked:
    """Holds the Keras layer outside the SavedModel's object graph (its variables are saved from
    the traced functions' captures instead; see ``GlomoServingModule.signatures``)."""

    def __init__(self, layer):
        self.layer = layer


class GlomoServingModule(tf.Module):
    """The exported object: tokenisation from the vocabulary asset, graphs, compact views.

    Args:
        graph_predictor: a built :class:`GraphPredictor`; run with ``training=False``.
        tokenizer: the :class:`~glomo_tf.data.Tokenizer` it was trained with; its settings are
            used, its vocabulary is read from ``asset_dir/vocab.txt``.
        asset_dir: directory holding ``vocab.txt`` and ``tokenizer.json`` (written by
            ``tokenizer.save``) and optionally ``glomo_export.json``; each becomes an asset.
        max_length: units kept per text.
        top_k: edges kept per receiving unit.
    """

    def __init__(self, graph_predictor, tokenizer, asset_dir, max_length, top_k):
        super().__init__(name="glomo_serving")
        self._predictor = _Untracked(graph_predictor)
        self._max_length = int(max_length)
        self._top_k = int(top_k)
        self._vocabulary_size = int(graph_predictor.vocabulary_size)
        self._splitter = tokenizer.splitter
        self._lowercase = tokenizer.lowercase
        vocab_path = os.path.join(asset_dir, vocab_lib.VOCAB_FILE)
        # The table reads the vocabulary from the SavedModel's assets/ when the model is loaded
        # (TextFileInitializer tracks the file as an asset); vocab_size checks the line count.
        self.vocab_table = tf.lookup.StaticHashTable(
            tf.lookup.TextFileInitializer(
                vocab_path, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64,
                tf.lookup.TextFileIndex.LINE_NUMBER, vocab_size=tokenizer.vocabulary_size),
            default_value=vocab_lib.UNK_ID)
        # Exactly the WordPiece settings of glomo_tf.data.Tokenizer, over the asset-backed table.
        self.wordpiece = tf_text.WordpieceTokenizer(
            self.vocab_table, suffix_indicator="##",
            max_bytes_per_word=tokenizer.max_bytes_per_word, token_out_type=tf.string,
            unknown_token=vocab_lib.UNK) if tokenizer.subword else None
        self.tokenizer_settings = tf.saved_model.Asset(
            os.path.join(asset_dir, vocab_lib.SETTINGS_FILE))
        metadata = os.path.join(asset_dir, METADATA_FILE)
        self.export_metadata = tf.saved_model.Asset(metadata) if os.path.exists(metadata) else None

        text_spec = [tf.TensorSpec([None], tf.string, name=TEXT_INPUT)]
        ids_spec = [tf.TensorSpec([None, None], tf.int32, name=IDS_INPUT)]
        self.serving_default = tf.function(self._serve_text, input_signature=text_spec,
                                           autograph=False)
        self.graphs_from_ids = tf.function(self._serve_ids, input_signature=ids_spec,
                                           autograph=False)
        self.top_k_edges = tf.function(self._top_k_text, input_signature=text_spec,
                                       autograph=False)
        self.top_k_edges_from_ids = tf.function(self._top_k_ids, input_signature=ids_spec,
                                                autograph=False)
        self.mean_graphs = tf.function(self._mean_text, input_signature=text_spec,
                                       autograph=False)

    def signatures(self):
        """``{name: concrete function}`` for ``tf.saved_model.save``.

        Also tracks the variables the functions read (the graph predictor's weights), so they are
        saved under the object graph and restored by TensorFlow 1 style loaders such as
        TensorFlow Serving and ``saved_model_cli run`` (tracking the Keras layer is not enough).
        """
        concrete = {name: getattr(self, name).get_concrete_function() for name in SIGNATURES}
        variables, seen = [], set()
        for function in concrete.values():
            for variable in function.variables:
                if id(variable) not in seen:
                    seen.add(id(variable))
                    variables.append(variable)
        self.predictor_variables = variables
        return concrete

    # -------------------------------------------------------------- tokenisation
    def tokenize(self, text):
        """``[B]`` strings -> ragged units ``[B, (units)]``, as ``Tokenizer.tokenize`` does."""
        words = vocab_lib.split_words(text, self._splitter, self._lowercase)
        if self.wordpiece is None:
            return words
        return self.wordpiece.tokenize(words).merge_dims(1, 2)

    def encode(self, text):
        """Tokens, ids, lengths and truncation flags of a ``[B]`` batch of strings."""
        units = self.tokenize(text)
        all_lengths = units.row_lengths()
        units = units[:, :self._max_length]
        ids = units.with_flat_values(tf.cast(self.vocab_table.lookup(units.flat_values), tf.int32))
        lengths = units.row_lengths()
        return {
            "tokens": units.to_tensor(default_value=""),
            "token_ids": ids.to_tensor(default_value=vocab_lib.PAD_ID),
            "lengths": tf.cast(lengths, tf.int32),
            "truncated": all_lengths > lengths,
        }

    def prepare_ids(self, token_ids):
        """Checks ids, truncates to ``max_length`` and drops trailing all-padding columns."""
        size = self._vocabulary_size
        smallest = tf.reduce_min(tf.concat([tf.reshape(token_ids, [-1]), [0]], axis=0))
        largest = tf.reduce_max(tf.concat([tf.reshape(token_ids, [-1]), [0]], axis=0))
        # The failing id in the message: a client learns which id and the vocabulary size.
        check_low = tf.debugging.Assert(smallest >= 0, [
            "token id", smallest, "is negative: token_ids must be >= 0 (0 is padding)."])
        check_high = tf.debugging.Assert(largest < size, [
            "token id", largest, f"is out of range: token_ids must be < vocabulary_size={size} "
            f"(ids 0 to {size - 1}); encode text with this export's vocabulary "
            "(assets/vocab.txt), or use the text signatures."])
        with tf.control_dependencies([check_low, check_high]):
            token_ids = tf.identity(token_ids)
        real = tf.not_equal(token_ids, vocab_lib.PAD_ID)
        all_lengths = tf.reduce_sum(tf.cast(real, tf.int32), axis=1)
        kept = token_ids[:, :self._max_length]
        positions = tf.range(1, tf.shape(kept)[1] + 1)
        ends = tf.where(tf.not_equal(kept, vocab_lib.PAD_ID), positions[None, :], 0)
        end = tf.reduce_max(tf.concat([tf.reshape(ends, [-1]), [0]], axis=0))
        kept = kept[:, :end]
        lengths = tf.reduce_sum(tf.cast(tf.not_equal(kept, vocab_lib.PAD_ID), tf.int32), axis=1)
        return {"token_ids": kept, "lengths": lengths, "truncated": all_lengths > lengths}

    # -------------------------------------------------------------- graphs
    def graphs(self, token_ids):
        """``[B, 2, L, K, T, T]`` float32 graphs in inference mode; padded rows/columns zero."""
        length = tf.shape(token_ids)[1]
        # The predictor needs at least one column; a batch of empty texts has none.
        padded = tf.pad(token_ids, [[0, 0], [0, tf.maximum(1 - length, 0)]])
        graphs = self._predictor.layer(padded, training=False)["graphs"]
        graphs = tf.cast(graphs, tf.float32)[:, :, :, :, :length, :length]
        receiving = tf.cast(tf.not_equal(token_ids, vocab_lib.PAD_ID), tf.float32)
        return graphs * receiving[:, None, None, None, :, None]

    def top_k(self, graphs):
        """The ``top_k`` heaviest sources of every row: ``(sources int32, weights float32)``.

        Sources with weight 0 are reported as ``-1`` (no edge); rows shorter than ``top_k`` are
        padded that way.
        """
        k = self._top_k
        rank = graphs.shape.rank
        short = tf.maximum(k - tf.shape(graphs)[-1], 0)
        graphs = tf.pad(graphs, [[0, 0]] * (rank - 1) + [[0, short]])
        weights, sources = tf.math.top_k(graphs, k=k, sorted=True)
        sources = tf.where(weights > 0, sources, -1)
        return tf.cast(sources, tf.int32), weights

    def _compact(self, graphs):
        sources, weights = self.top_k(graphs)
        mean_sources, mean_weights = self.top_k(tf.reduce_mean(graphs, axis=3))
        return {"edge_sources": sources, "edge_weights": weights,
                "mean_edge_sources": mean_sources, "mean_edge_weights": mean_weights}

    # -------------------------------------------------------------- signature bodies
    def _serve_text(self, text):
        out = self.encode(text)
        out["graphs"] = self.graphs(out["token_ids"])
        return out

    def _serve_ids(self, token_ids):
        out = self.prepare_ids(token_ids)
        out["graphs"] = self.graphs(out["token_ids"])
        return out

    def _top_k_text(self, text):
        out = self.encode(text)
        out.update(self._compact(self.graphs(out["token_ids"])))
        return out

    def _top_k_ids(self, token_ids):
        out = self.prepare_ids(token_ids)
        out.update(self._compact(self.graphs(out["token_ids"])))
        return out

    def _mean_text(self, text):
        out = self.encode(text)
        out["mean_graphs"] = tf.reduce_mean(self.graphs(out["token_ids"]), axis=3)
        return out


# ---------------------------------------------------------------------------------- helpers
def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    return value


def _exists_message(model_dir, version):
    return (f"{os.path.join(model_dir, str(version))} already exists, and a served version must "
            f"never change. Leave out the version to write the next one "
            f"({next_version(model_dir)}), or pass another one.")


def _check_version(model_dir, version):
    if version is None:
        return next_version(model_dir)
    version = _positive_int("version", version)
    if os.path.exists(os.path.join(model_dir, str(version))):
        raise ValueError(_exists_message(model_dir, version))
    return version


def _metadata(predictor, tokenizer, model_name, version, max_length, top_k):
    from glomo_tf import __version__

    L, K = predictor.num_layers, predictor.num_heads
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "glomo_tf_version": __version__,
        "tensorflow_version": tf.__version__,
        "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "model_name": model_name,
        "model_version": version,
        "max_length": max_length,
        "top_k": top_k,
        "precision": predictor.dtype_policy.name,
        "vocabulary_size": tokenizer.vocabulary_size,
        "tokenizer": tokenizer.get_config(),
        "graph_predictor": predictor.get_config(),
        "graphs_layout": (
            f"graphs[batch, direction, layer, head, t, s] with 2 directions, {L} layers, {K} "
            "heads: the weight that receiving unit t puts on source s; direction 0 is forward "
            "(s < t), 1 is backward (s > t); rows sum to 1 or are all zero"),
        "signatures": {name: {"input": spec[0], "outputs": list(spec[1])}
                       for name, spec in SIGNATURES.items()},
    }
