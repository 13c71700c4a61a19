"""Units and their ids: the :class:`Vocabulary`, its reserved ids and the tokenizer's saved files.

A :class:`Vocabulary` is a list of unit strings whose line index is the id (``0 = "<pad>"``,
``1 = "<unk>"``), built from unit counts (words, or WordPiece units learned from word counts).

Saved form (``Tokenizer.save(directory)``, kept next to the model as an asset)::

    directory/vocab.txt        one unit per line, UTF-8, line index = id
    directory/tokenizer.json   the tokenizer settings (splitter, lowercase, subword, ...)
"""

import collections
import json
import os

import numpy as np
import tensorflow as tf

PAD = "<pad>"
UNK = "<unk>"
PAD_ID = 0
UNK_ID = 1
RESERVED = (PAD, UNK)

VOCAB_FILE = "vocab.txt"
SETTINGS_FILE = "tokenizer.json"
FORMAT = "glomo_tf.tokenizer"
FORMAT_VERSION = 1

# The tokenizer's settings when tokenizer.json does not give them (Tokenizer.DEFAULTS).
DEFAULT_SETTINGS = dict(splitter="whitespace", lowercase=False, subword=False, max_length=None,
                        max_bytes_per_word=100)


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
        settings = dict(self.settings or DEFAULT_SETTINGS)
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



def learn_wordpiece(counts, max_size, min_count):
    """The WordPiece :class:`Vocabulary` (at most ``max_size`` units, ``<pad>`` and ``<unk>``
    included) learned from ``word -> count`` with tensorflow-text's learner, words seen fewer
    than ``min_count`` times left out."""
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



def _flatten_strings(element):
    if isinstance(element, tf.RaggedTensor):
        return element.flat_values
    return tf.reshape(element, [-1])


def _unique_with_counts(units):
    unique, _, count = tf.unique_with_counts(units)
    return unique, count



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
