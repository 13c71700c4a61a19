"""Vocabulary and tokenizer: the same tokenisation at pretraining, transfer and serving time.

A :class:`Vocabulary` is a list of unit strings whose line index is the id (``0 = "<pad>"``,
``1 = "<unk>"``). A :class:`Tokenizer` turns raw UTF-8 strings into those ids with TensorFlow ops
only, so it runs inside ``tf.data``, a ``tf.function`` and an exported SavedModel whose serving
signature takes raw strings.

Units are **words** by default, as in the paper (its windows are 200 words); ``subword=True`` splits
words further into WordPiece units over a vocabulary learned from the corpus.

Saved form (``Tokenizer.save(directory)``, kept next to the model as an asset)::

    directory/vocab.txt        one unit per line, UTF-8, line index = id
    directory/tokenizer.json   the tokenizer settings (splitter, lowercase, subword, ...)

Ops used by the tokenisation (the graph a serving signature contains): core TensorFlow string ops
(``UnicodeTranscode``, ``StringLower``, ``UnicodeDecode``, ``UnicodeEncode``, ``RegexReplace``),
core lookup tables (``StaticHashTable``), and only these tensorflow-text kernels, which the stock
TensorFlow Serving model server links in: ``WhitespaceTokenizeWithOffsets``,
``UnicodeScriptTokenizeWithOffsets`` and ``WordpieceTokenizeWithOffsets``. tf_text's public
``WhitespaceTokenizer`` class now runs a newer kernel, ``WhitespaceTokenizeWithOffsetsV2``, which
TensorFlow Serving lacks and which keeps the leading bytes of a multi-byte whitespace character
(U+00A0, U+3000, ...) that follows a word, so the two splitting kernels are called directly: loaded
with ``tf.load_op_library`` from the installed tensorflow-text's shared libraries
(:func:`glomo_tf.export.serving_ops.serving_op_libraries`, the libraries TensorFlow Serving's
kernels come from), not through tensorflow-text's private Python modules (see :func:`split_words`;
the whitespace kernel crashes on a batch without any word, which a sentinel row prevents).
No ``NormalizeUTF8`` / ``case_fold_utf8``: lowercasing uses ``tf.strings.lower(encoding="utf-8")``.
"""

import collections
import functools
import json
import os

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from glomo_tf import hparams, presets
from glomo_tf.export import serving_ops

PAD = "<pad>"
UNK = "<unk>"
PAD_ID = 0
UNK_ID = 1
RESERVED = (PAD, UNK)

VOCAB_FILE = "vocab.txt"
SETTINGS_FILE = "tokenizer.json"
FORMAT = "glomo_tf.tokenizer"
FORMAT_VERSION = 1

SPLITTERS = ("whitespace", "unicode_script")
REPLACEMENT_CHARACTER = 0xFFFD


# ---------------------------------------------------------------------------------- vocabulary
class Vocabulary:
    """An ordered list of units; the position of a unit is its id.

    Id 0 is ``"<pad>"`` (padding, never produced by the tokenizer) and id 1 is ``"<unk>"`` (any unit
    not in the list). The remaining units are sorted by decreasing corpus count, ties broken
    alphabetically, so building is deterministic.

    Args:
        tokens: list of str, the units; must start with ``["<pad>", "<unk>"]`` and hold no
            duplicates, empty strings or line breaks.
        counts: optional dict ``unit -> corpus count`` (kept for inspection, not saved).
        settings: optional dict of tokenizer settings, written to ``tokenizer.json`` by
            :meth:`save` (a :class:`Tokenizer` fills it in).

    Example:

    >>> vocab = Vocabulary.build(["a b", "b c b"], max_size=10)
    >>> vocab.tokens
    ['<pad>', '<unk>', 'b', 'a', 'c']
    >>> vocab.lookup(["b", "zzz"])
    [2, 1]
    """

    def __init__(self, tokens, counts=None, settings=None):
        tokens = [_as_str(token) for token in tokens]
        _validate_tokens(tokens, source="the token list")
        self.tokens = tokens
        self.counts = dict(counts) if counts else {}
        self.settings = dict(settings) if settings else None
        self._index = {token: i for i, token in enumerate(tokens)}

    # -------------------------------------------------------------- building
    @classmethod
    def build(cls, tokens, max_size=None, min_count=1):
        """Counts units and keeps the most frequent ones.

        Args:
            tokens: the units to count: a ``tf.data.Dataset`` of string tensors (any shape, ragged
                or dense; every element is counted), or a Python iterable whose items are units
                (str/bytes) or sequences of units. A plain str item counts as whitespace-separated
                units, so a list of pre-tokenised lines works too.
            max_size: int or None, the most ids, ``<pad>`` and ``<unk>`` included.
            min_count: int, units seen fewer times are left out (they map to ``<unk>``).
        """
        return cls.from_counts(count_units(tokens), max_size=max_size, min_count=min_count)

    @classmethod
    def from_counts(cls, counts, max_size=None, min_count=1):
        """The vocabulary of a ``unit -> count`` mapping (see :meth:`build`)."""
        if max_size is not None and max_size < len(RESERVED) + 1:
            raise ValueError(
                f"max_size={max_size} leaves no room for units: it counts <pad> and <unk>, so it "
                f"must be at least {len(RESERVED) + 1}.")
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}.")
        kept = {_as_str(token): int(count) for token, count in counts.items()}
        for token in RESERVED:
            kept.pop(token, None)
        kept = {t: c for t, c in kept.items() if c >= min_count and t and not _has_line_break(t)}
        ordered = sorted(kept, key=lambda token: (-kept[token], token))
        if max_size is not None:
            ordered = ordered[:max_size - len(RESERVED)]
        if not ordered:
            raise ValueError(
                "The corpus gave no unit seen at least min_count="
                f"{min_count} times, so the vocabulary would hold only <pad> and <unk>. Check that "
                "the corpus is not empty, or lower min_count.")
        return cls(list(RESERVED) + ordered, counts={t: kept[t] for t in ordered})

    # -------------------------------------------------------------- access
    def __len__(self):
        return len(self.tokens)

    def __contains__(self, token):
        return _as_str(token) in self._index

    def __eq__(self, other):
        return isinstance(other, Vocabulary) and self.tokens == other.tokens

    def __repr__(self):
        return f"Vocabulary({len(self)} units: {self.tokens[2:7]}...)"

    @property
    def pad_id(self):
        return PAD_ID

    @property
    def unk_id(self):
        return UNK_ID

    def lookup(self, tokens):
        """The id of a unit (str -> int) or of each unit of a list (-> list); unknown -> 1."""
        if isinstance(tokens, (str, bytes)):
            return self._index.get(_as_str(tokens), UNK_ID)
        return [self.lookup(token) for token in tokens]

    def tokens_for(self, ids):
        """The unit of an id (int -> str) or of each id of a (nested) list/array (-> list)."""
        if isinstance(ids, (int, np.integer)):
            ids = int(ids)
            return self.tokens[ids] if 0 <= ids < len(self.tokens) else UNK
        if isinstance(ids, (np.ndarray, tf.Tensor)):
            ids = np.asarray(ids).tolist()
        return [self.tokens_for(i) for i in ids]

    # -------------------------------------------------------------- files
    def save(self, directory):
        """Writes ``directory/vocab.txt`` (one unit per line) and ``directory/tokenizer.json``
        (``self.settings``, or the default word-level settings); returns the vocab.txt path."""
        tf.io.gfile.makedirs(str(directory))
        vocab_path = os.path.join(str(directory), VOCAB_FILE)
        with tf.io.gfile.GFile(vocab_path, "w") as f:
            f.write("\n".join(self.tokens) + "\n")
        settings = dict(self.settings or Tokenizer.DEFAULTS)
        settings.update(format=FORMAT, version=FORMAT_VERSION, vocabulary_size=len(self),
                        vocab_file=VOCAB_FILE)
        with tf.io.gfile.GFile(os.path.join(str(directory), SETTINGS_FILE), "w") as f:
            f.write(json.dumps(settings, indent=2, sort_keys=True) + "\n")
        return vocab_path

    @classmethod
    def load(cls, path):
        """Reads a vocabulary from a directory written by :meth:`save` or from a vocab.txt file.

        ``tokenizer.json`` next to the file, when present, is read into ``settings``.
        """
        path = str(path)
        vocab_path = os.path.join(path, VOCAB_FILE) if tf.io.gfile.isdir(path) else path
        if not tf.io.gfile.exists(vocab_path):
            raise FileNotFoundError(
                f"No vocabulary at {vocab_path!r}. Pass the directory written by "
                "Tokenizer.save() (it holds vocab.txt and tokenizer.json), or build one with "
                "Tokenizer.build(corpus).")
        with tf.io.gfile.GFile(vocab_path, "rb") as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(
                f"{vocab_path} is not UTF-8 text (byte {error.start}); a vocabulary file holds one "
                "UTF-8 unit per line.") from None
        tokens = text.split("\n")
        if tokens and tokens[-1] == "":
            tokens.pop()
        _validate_tokens(tokens, source=vocab_path)
        settings = None
        settings_path = os.path.join(os.path.dirname(vocab_path), SETTINGS_FILE)
        if tf.io.gfile.exists(settings_path):
            settings = _read_settings(settings_path)
            expected = settings.get("vocabulary_size")
            if expected is not None and expected != len(tokens):
                raise ValueError(
                    f"{vocab_path} holds {len(tokens)} units but {settings_path} says "
                    f"vocabulary_size={expected}: the two files do not belong together. Save them "
                    "again with Tokenizer.save().")
        return cls(tokens, settings=settings)


def count_units(tokens):
    """``collections.Counter`` of the units (str) of a dataset or iterable, as in
    :meth:`Vocabulary.build`."""
    counts = collections.Counter()
    if isinstance(tokens, tf.data.Dataset):
        flat = tokens.map(_flatten_strings, num_parallel_calls=tf.data.AUTOTUNE)
        for units, unit_counts in flat.map(_unique_with_counts).as_numpy_iterator():
            counts.update(dict(zip(units.tolist(), unit_counts.tolist())))
    else:
        for item in tokens:
            if isinstance(item, str):
                counts.update(item.split())
            elif isinstance(item, bytes):
                counts.update(item.decode("utf-8", errors="replace").split())
            else:
                counts.update(_as_str(unit) for unit in item)
    return collections.Counter({_as_str(unit): count for unit, count in counts.items()})


# ---------------------------------------------------------------------------------- tokenizer
class Tokenizer(tf.Module):
    """Raw UTF-8 strings -> units -> int32 ids, with TensorFlow ops only (tf.data, SavedModel).

    Steps, all inside the TensorFlow graph: invalid UTF-8 is replaced by U+FFFD; optional
    lowercasing (``tf.strings.lower(encoding="utf-8")``); splitting into words on Unicode whitespace
    (``splitter="whitespace"``, right for pre-tokenised corpora such as WikiText) or additionally
    where the Unicode script changes (``"unicode_script"``: ``"don't."`` -> ``don ' t .``);
    optionally WordPiece (``subword=True``, continuation pieces prefixed ``"##"``); id lookup in a
    static hash table (unknown units -> 1, ``"<unk>"``).

    Build one from a corpus with :meth:`build`, save it next to the model with :meth:`save` and
    restore it with :meth:`load`.

    Args:
        vocabulary: :class:`Vocabulary` (its ``settings`` are ignored; the arguments below rule).
        splitter: ``"whitespace"`` or ``"unicode_script"``.
        lowercase: bool, lowercase before splitting.
        subword: bool, the vocabulary holds WordPiece units and words are split into them.
        max_length: int or None, default truncation length of :meth:`encode`.
        max_bytes_per_word: int, with ``subword``: longer words become ``"<unk>"``.

    Example:

    >>> tokenizer = Tokenizer.build(["the cat sat", "the dog sat down"], max_size=100)
    >>> tokenizer.vocabulary.tokens
    ['<pad>', '<unk>', 'sat', 'the', 'cat', 'dog', 'down']
    >>> tokenizer.encode(["the cat ran"]).to_list()
    [[3, 4, 1]]
    >>> tokenizer.encode(["the cat ran"], max_length=5).numpy().tolist()
    [[3, 4, 1, 0, 0]]
    >>> tokenizer.decode([3, 4, 1]).numpy()
    b'the cat <unk>'
    """

    DEFAULTS = dict(splitter="whitespace", lowercase=False, subword=False, max_length=None,
                    max_bytes_per_word=100)

    def __init__(self, vocabulary, splitter="whitespace", lowercase=False, subword=False,
                 max_length=None, max_bytes_per_word=100):
        super().__init__(name="glomo_tokenizer")
        if not isinstance(vocabulary, Vocabulary):
            raise TypeError(f"Expected a Vocabulary, got {type(vocabulary).__name__}.")
        hparams.check_choice("splitter", splitter, SPLITTERS)
        if max_length is not None and (not isinstance(max_length, (int, np.integer))
                                       or max_length < 1):
            raise ValueError(f"max_length must be a positive int or None, got {max_length!r}.")
        self.splitter = splitter
        self.lowercase = bool(lowercase)
        self.subword = bool(subword)
        self.max_length = None if max_length is None else int(max_length)
        self.max_bytes_per_word = int(max_bytes_per_word)
        self.vocabulary = vocabulary
        vocabulary.settings = self.get_config()
        tokens = tf.constant(vocabulary.tokens, dtype=tf.string)
        self._tokens = tokens
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tokens, tf.range(len(vocabulary), dtype=tf.int64)), default_value=UNK_ID)
        self._wordpiece = tf_text.WordpieceTokenizer(
            self._table, suffix_indicator="##", max_bytes_per_word=self.max_bytes_per_word,
            token_out_type=tf.string, unknown_token=UNK) if self.subword else None

    # -------------------------------------------------------------- building and files
    @classmethod
    def build(cls, lines, max_size=100_000, min_count=1, splitter="whitespace", lowercase=False,
              subword=False, max_length=None, max_bytes_per_word=100, batch_size=1024):
        """Builds the vocabulary from a corpus, streamed (only the unit counts are kept in memory).

        Args:
            lines: a ``tf.data.Dataset`` of scalar strings (e.g. from
                :func:`glomo_tf.data.corpus.text_lines`) or a Python iterable of strings.
            max_size: int, the most ids (``<pad>`` and ``<unk>`` included); the reference code
                uses 100k words. With ``subword`` it is the WordPiece vocabulary's target size.
            min_count: int, words seen fewer times are left out (word level) or not used to learn
                pieces (subword).
            splitter: see the class.
            lowercase: see the class.
            subword: see the class.
            max_length: see the class.
            max_bytes_per_word: see the class.
            batch_size: lines split per step while counting.

        Subword vocabularies are learned with tensorflow-text's WordPiece learner (the BERT vocab
        algorithm in ``tensorflow_text.tools.wordpiece_vocab``, run offline on the word counts):
        every character of the kept words is a unit (alone and as a ``##`` continuation), then the
        most frequent substrings are added until ``max_size`` is reached.
        """
        def split(batch):
            return split_words(batch, splitter, lowercase)

        words = _as_lines_dataset(lines, batch_size).map(split, num_parallel_calls=tf.data.AUTOTUNE)
        counts = count_units(words)
        if subword:
            vocabulary = _learn_wordpiece(counts, max_size, min_count)
        else:
            vocabulary = Vocabulary.from_counts(counts, max_size=max_size, min_count=min_count)
        return cls(vocabulary, splitter=splitter, lowercase=lowercase, subword=subword,
                   max_length=max_length, max_bytes_per_word=max_bytes_per_word)

    def get_config(self):
        return dict(splitter=self.splitter, lowercase=self.lowercase, subword=self.subword,
                    max_length=self.max_length, max_bytes_per_word=self.max_bytes_per_word)

    def save(self, directory):
        """Writes ``directory/vocab.txt`` and ``directory/tokenizer.json``; returns
        ``directory``."""
        self.vocabulary.settings = self.get_config()
        self.vocabulary.save(directory)
        return str(directory)

    @classmethod
    def load(cls, path):
        """The tokenizer saved in a directory (or given its vocab.txt; settings from the
        tokenizer.json beside it, defaults when there is none)."""
        vocabulary = Vocabulary.load(path)
        settings = dict(cls.DEFAULTS)
        settings.update({k: v for k, v in (vocabulary.settings or {}).items() if k in cls.DEFAULTS})
        return cls(vocabulary, **settings)

    @classmethod
    def from_preset(cls, preset):
        """The tokenizer of ``preset`` (a built-in name, see :func:`glomo_tf.list_presets`, or a
        directory written by :func:`glomo_tf.save_preset`): the ids its predictor reads."""
        path = presets.tokenizer_directory(preset)
        try:
            return cls.load(path)
        except (OSError, ValueError) as error:
            raise presets.PresetError(f"could not read the preset's tokenizer in {path}: "
                                      f"{str(error).strip().splitlines()[0][:300]}") from None

    def save_to_preset(self, preset_dir):
        """Writes this tokenizer into the preset ``preset_dir``, whose predictor is written
        first (:meth:`glomo_tf.GraphPredictor.save_to_preset`; :func:`glomo_tf.save_preset`
        writes both): ``assets/tokenizer`` and its settings in ``metadata.json``. Returns
        ``preset_dir``."""
        return presets.save_tokenizer(preset_dir, self)

    @property
    def vocabulary_size(self):
        """Number of ids, ``<pad>`` and ``<unk>`` included (the model's ``vocabulary_size``)."""
        return len(self.vocabulary)

    def __len__(self):
        return len(self.vocabulary)

    def __repr__(self):
        return (f"Tokenizer({self.vocabulary_size} units, splitter={self.splitter!r}, "
                f"lowercase={self.lowercase}, subword={self.subword}, "
                f"max_length={self.max_length})")

    # -------------------------------------------------------------- tokenisation
    def tokenize(self, strings):
        """Units of each string: a string tensor ``[batch, (units)]`` (ragged; ``[units]`` for one
        string). Words missing from the vocabulary stay as they are at word level; with
        ``subword`` a word that cannot be spelled with the pieces becomes ``"<unk>"``."""
        strings, scalar = _as_strings(strings)
        units = self._units(strings)
        return units[0] if scalar else units

    def encode(self, strings, max_length=None):
        """int32 ids of each string.

        Without a length (``max_length`` here or at construction): a ragged ``[batch, (units)]``
        tensor (``[units]`` for a scalar string). With one: a dense ``[batch, max_length]`` tensor,
        truncated and padded with 0 (``[max_length]`` for a scalar string).
        """
        max_length = self.max_length if max_length is None else max_length
        if max_length is not None and max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}.")
        strings, scalar = _as_strings(strings)
        ids = self.encode_ragged(strings)
        if max_length is not None:
            ids = ids[:, :max_length].to_tensor(default_value=PAD_ID,
                                                shape=[None, max_length])
        return ids[0] if scalar else ids

    def decode(self, ids):
        """Text of id sequences: padding (0) dropped, units joined by spaces, ``##`` pieces glued
        to the previous unit. ``[batch, T]`` (dense or ragged) -> ``[batch]``; ``[T]`` -> scalar."""
        tokens = self.ids_to_tokens(ids)
        ids = integer_ids(ids, "ids")
        keep = tf.not_equal(ids, PAD_ID)
        if isinstance(tokens, tf.Tensor) and tokens.shape.rank == 1:
            tokens = tf.boolean_mask(tokens, keep)
        else:
            tokens = tf.ragged.boolean_mask(tokens, keep)
        text = tf.strings.reduce_join(tokens, axis=-1, separator=" ")
        if self.subword:
            text = tf.strings.regex_replace(text, r" ##", "")
        return text

    def ids_to_tokens(self, ids):
        """The unit string of every id, same shape (dense or ragged); out-of-range ids -> <unk>.
        Handy for labelling plots."""
        ids = integer_ids(ids, "ids")
        size = tf.constant(len(self.vocabulary), ids.dtype)
        def gather(flat):
            valid = (flat >= 0) & (flat < size)
            return tf.gather(self._tokens, tf.where(valid, flat, tf.cast(UNK_ID, flat.dtype)))
        if isinstance(ids, tf.RaggedTensor):
            return ids.with_flat_values(gather(ids.flat_values))
        return gather(ids)

    def encode_ragged(self, strings):
        """``[batch]`` strings -> ragged int32 ``[batch, (units)]``, never truncated (ignores
        ``max_length``; what corpus pipelines use before cutting windows)."""
        strings, scalar = _as_strings(strings)
        if scalar:
            raise ValueError(
                "encode_ragged takes a batch [batch] of strings; use encode() for one string.")
        units = self._units(strings)
        ids = self._table.lookup(units.flat_values)
        return units.with_flat_values(tf.cast(ids, tf.int32))

    def lookup_units(self, units):
        """int32 ids of unit strings (any shape, dense or ragged); unknown units -> 1."""
        if isinstance(units, tf.RaggedTensor):
            return units.with_flat_values(self.lookup_units(units.flat_values))
        return tf.cast(self._table.lookup(tf.convert_to_tensor(units, tf.string)), tf.int32)

    def _units(self, strings):
        words = self._split(strings)
        if not self.subword:
            return words
        pieces = self._wordpiece.tokenize(words)  # [batch, (words), (pieces)]
        return pieces.merge_dims(1, 2)

    def _split(self, strings):
        return split_words(strings, self.splitter, self.lowercase)


def split_words(strings, splitter="whitespace", lowercase=False):
    """``[batch]`` strings -> ragged ``[batch, (words)]``: the tokenizer's word splitting.

    Invalid UTF-8 is replaced by U+FFFD, then the text is optionally lowercased and split by the
    tensorflow-text kernel of ``splitter`` (whitespace is dropped).
    """
    strings = tf.strings.unicode_transcode(
        strings, "UTF-8", "UTF-8", errors="replace", replacement_char=REPLACEMENT_CHARACTER)
    if lowercase:
        strings = tf.strings.lower(strings, encoding="utf-8")
    return _split_with_offsets(strings, splitter, offsets=False)


def split_words_with_offsets(strings, splitter="whitespace", lowercase=False):
    """``(words, starts, ends)``: :func:`split_words`' words of ``[batch]`` strings and each
    word's ``[start, end)`` in characters (Unicode code points, Python ``str`` indices) of its
    string, all ragged ``[batch, (words)]``. The split runs on the text as given and the words
    are lowercased after it, so the offsets point into the original strings (the words equal
    :func:`split_words`' wherever lowercasing keeps a text's length in code points)."""
    strings = tf.strings.unicode_transcode(
        tf.convert_to_tensor(strings, tf.string), "UTF-8", "UTF-8", errors="replace",
        replacement_char=REPLACEMENT_CHARACTER)
    words, starts, ends = _split_with_offsets(strings, splitter, offsets=True)
    if lowercase:
        words = tf.ragged.map_flat_values(tf.strings.lower, words, encoding="utf-8")
    return words, starts, ends


def _split_with_offsets(strings, splitter, offsets):
    """The kernel's words of ``strings`` and, with ``offsets``, their ``(starts, ends)``; without,
    the words alone (the tokenizer's graph, in serving too, builds nothing it discards)."""
    hparams.check_choice("splitter", splitter, SPLITTERS)
    # The whitespace kernel crashes the process when a batch yields no word at all (an empty batch,
    # or only blank strings): a sentinel row holding one word is appended, and dropped below.
    strings = tf.concat([strings, tf.constant(["_"])], axis=0)
    codepoints = tf.strings.unicode_decode(strings, "UTF-8")
    if splitter == "whitespace":
        kernel = _splitting_kernel("WhitespaceTokenizeWithOffsets")
        outputs = kernel.whitespace_tokenize_with_offsets(
            input_values=codepoints.flat_values, input_splits=codepoints.row_splits)
    else:
        kernel = _splitting_kernel("UnicodeScriptTokenizeWithOffsets")
        outputs = kernel.unicode_script_tokenize_with_offsets(
            input_values=codepoints.flat_values, input_splits=codepoints.row_splits,
            keep_whitespace=False)
    values, inner_splits, starts, ends, outer_splits = outputs
    words = tf.RaggedTensor.from_nested_row_splits(values, [outer_splits, inner_splits],
                                                   validate=False)
    words = tf.strings.unicode_encode(words, "UTF-8")[:-1]
    if not offsets:
        return words
    starts, ends = (tf.RaggedTensor.from_row_splits(x, outer_splits, validate=False)[:-1]
                    for x in (starts, ends))
    return words, starts, ends


@functools.cache
def _splitting_kernel(op_name):
    """The Python wrappers of a tensorflow-text splitting kernel (``op_name``, one of
    :data:`glomo_tf.export.serving_ops.TF_TEXT_SERVING_OPS`), from ``tf.load_op_library`` on the
    installed tensorflow-text's shared library; loading a library tensorflow-text has loaded
    already registers nothing twice."""
    library = serving_ops.TF_TEXT_SERVING_OPS[op_name]
    path, = (path for path in serving_ops.serving_op_libraries()
             if os.path.basename(path) == library + ".so")
    return tf.load_op_library(path)


def check_vocabulary_matches(vocabulary, model):
    """Raises ``ValueError`` unless the vocabulary has exactly the model's ``vocabulary_size`` ids.

    Args:
        vocabulary: :class:`Tokenizer`, :class:`Vocabulary`, a saved tokenizer directory / vocab.txt
            path, or an int size.
        model: a ``GlomoPretrainer`` (its ``graph_predictor``), a ``GraphPredictor``, anything
            with a ``vocabulary_size`` attribute or config entry, or an int size.

    Returns:
        The common size.
    """
    if isinstance(vocabulary, (str, os.PathLike)):
        source = f"the vocabulary at {os.fspath(vocabulary)!r}"
        vocabulary = Vocabulary.load(os.fspath(vocabulary))
    else:
        source = "the vocabulary"
    size = vocabulary if isinstance(vocabulary, (int, np.integer)) else len(vocabulary)
    expected = _model_vocabulary_size(model)
    if int(size) != int(expected):
        raise ValueError(
            f"Vocabulary mismatch: {source} has {size} ids but the model "
            f"{getattr(model, 'name', type(model).__name__)!r} was built with "
            f"vocabulary_size={expected}, so its ids would mean different units. Load the "
            "tokenizer saved with this model (Tokenizer.load(<its directory>)), or build the model "
            f"with vocabulary_size={size}.")
    return int(size)


def _model_vocabulary_size(model):
    if isinstance(model, (int, np.integer)) and not isinstance(model, bool):
        return int(model)
    for candidate in (getattr(model, "graph_predictor", None), model):
        if candidate is None:
            continue
        size = getattr(candidate, "vocabulary_size", None)
        if size is None and hasattr(candidate, "get_config"):
            size = candidate.get_config().get("vocabulary_size")
        if size is not None:
            return int(size)
    raise TypeError(f"Cannot tell the vocabulary size of {type(model).__name__}: expected a "
                    "GlomoPretrainer, a GraphPredictor or an object with vocabulary_size.")


# ---------------------------------------------------------------------------------- helpers
def _learn_wordpiece(counts, max_size, min_count):
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner
    if max_size is None or max_size < len(RESERVED) + 1:
        raise ValueError(f"A subword vocabulary needs max_size >= {len(RESERVED) + 1}, "
                         f"got {max_size}.")
    words = {w: c for w, c in counts.items() if c >= min_count and w not in RESERVED}
    if not words:
        raise ValueError(
            f"The corpus gave no word seen at least min_count={min_count} times to learn "
            "WordPiece units from. Check that the corpus is not empty, or lower min_count.")
    tokens = learner.learn(words, vocab_size=max_size, reserved_tokens=list(RESERVED),
                           upper_thresh=max(words.values()) + 1, lower_thresh=1,
                           max_input_tokens=-1)
    tokens = [t for t in tokens if t and not _has_line_break(t)][:max_size]
    return Vocabulary(tokens)


def _as_lines_dataset(lines, batch_size):
    """Batches of lines ``[batch]`` from a dataset of scalar strings or an iterable of strings."""
    if isinstance(lines, tf.data.Dataset):
        spec = lines.element_spec
        if not isinstance(spec, tf.TensorSpec) or spec.dtype != tf.string:
            raise TypeError(f"Expected a dataset of strings, got elements {spec}.")
        if spec.shape.rank == 0:
            return lines.batch(batch_size)
        if spec.shape.rank == 1:
            return lines
        raise ValueError(f"Expected a dataset of scalar strings, got shape {spec.shape}.")
    if isinstance(lines, (str, bytes)):
        raise TypeError("Expected lines of text (a dataset or a list of strings), got one string;"
                        " wrap it in a list, or read files with glomo_tf.data.corpus.text_lines.")
    def chunks():
        chunk = []
        for line in lines:
            chunk.append(line.encode("utf-8") if isinstance(line, str) else bytes(line))
            if len(chunk) == batch_size:
                yield np.array(chunk, dtype=object)
                chunk = []
        if chunk:
            yield np.array(chunk, dtype=object)
    return tf.data.Dataset.from_generator(
        chunks, output_signature=tf.TensorSpec([None], tf.string))


def _flatten_strings(element):
    if isinstance(element, tf.RaggedTensor):
        return element.flat_values
    return tf.reshape(element, [-1])


def _unique_with_counts(units):
    unique, _, count = tf.unique_with_counts(units)
    return unique, count


def _as_strings(strings):
    """A ``[batch]`` string tensor and whether the input was one string."""
    strings = tf.convert_to_tensor(strings)
    if strings.dtype != tf.string:
        raise TypeError(f"The tokenizer takes strings, got dtype {strings.dtype}.")
    rank = strings.shape.rank
    if rank == 0:
        return tf.reshape(strings, [1]), True
    if rank != 1:
        raise ValueError(f"The tokenizer takes one string or a batch [batch] of strings, got "
                         f"shape {strings.shape}; reshape to [-1] first.")
    return strings, False


def integer_ids(ids, what="token ids"):
    """``ids`` as an integer tensor (a ``tf.RaggedTensor`` passes as it is); a ``TypeError``
    naming ``what`` for any other dtype."""
    if isinstance(ids, tf.RaggedTensor):
        return ids
    ids = tf.convert_to_tensor(ids)
    if not ids.dtype.is_integer:
        raise TypeError(f"Expected integer {what}, got dtype {ids.dtype}.")
    return ids


def _as_str(token):
    if isinstance(token, bytes):
        return token.decode("utf-8", errors="replace")
    if isinstance(token, np.bytes_):
        return bytes(token).decode("utf-8", errors="replace")
    if not isinstance(token, str):
        raise TypeError(f"A unit must be a string, got {type(token).__name__}: {token!r}.")
    return token


def _has_line_break(token):
    return "\n" in token or "\r" in token


def _validate_tokens(tokens, source):
    if list(tokens[:len(RESERVED)]) != list(RESERVED):
        raise ValueError(
            f"{source} must start with {list(RESERVED)} (ids 0 and 1), got {tokens[:2]}. Build "
            "vocabularies with Vocabulary.build / Tokenizer.build.")
    seen = set()
    for i, token in enumerate(tokens):
        if not token or _has_line_break(token):
            raise ValueError(f"{source}: unit {i} is empty or holds a line break ({token!r}); a "
                             "vocabulary file holds one non-empty unit per line.")
        if token in seen:
            raise ValueError(f"{source}: unit {token!r} appears twice (second time at id {i}); "
                             "every unit must have exactly one id.")
        seen.add(token)


def _read_settings(path):
    with tf.io.gfile.GFile(path, "r") as f:
        try:
            settings = json.loads(f.read())
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not valid JSON ({error}). Save the tokenizer again with "
                             "Tokenizer.save().") from None
    if not isinstance(settings, dict) or settings.get("format") != FORMAT:
        raise ValueError(f"{path} is not a glomo_tf tokenizer file (expected \"format\": "
                         f"\"{FORMAT}\"). Save the tokenizer with Tokenizer.save().")
    if settings.get("version", 0) > FORMAT_VERSION:
        raise ValueError(f"{path} was written by a newer glomo_tf (format version "
                         f"{settings['version']} > {FORMAT_VERSION}); upgrade glomo_tf.")
    return settings
