"""The tokenizer: raw UTF-8 strings -> int32 ids, with TensorFlow ops only.

A :class:`Tokenizer` turns raw strings into the ids of a :class:`glomo_tf.data.units.Vocabulary`
inside ``tf.data``, a ``tf.function`` and an exported SavedModel whose serving signature takes raw
strings. Units are **words** by default, as in the paper (its windows are 200 words), split by
:mod:`glomo_tf.data.word_splitting`; ``subword=True`` splits words further into WordPiece units
over a vocabulary learned from the corpus.

Ops used beyond the word splitting's: ``RegexReplace``, core lookup tables
(``StaticHashTable``) and tensorflow-text's ``WordpieceTokenizeWithOffsets``, which the stock
TensorFlow Serving model server links in.
"""

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from glomo_tf import hparams, presets
from glomo_tf.data.units import (DEFAULT_SETTINGS, PAD_ID, UNK, UNK_ID, Vocabulary, count_units,
                                 learn_wordpiece)
from glomo_tf.data.word_splitting import SPLITTERS, split_words


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

    DEFAULTS = DEFAULT_SETTINGS
    #: The built-in presets with a tokenizer, ``{name: metadata}`` (keras-hub's ``presets``).
    presets = presets.BuiltinPresets(needs_tokenizer=True)

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
            vocabulary = learn_wordpiece(counts, max_size, min_count)
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
        """The tokenizer of ``preset`` (a built-in name, see ``Tokenizer.presets``, a directory
        written by :meth:`save_to_preset` or :func:`glomo_tf.save_preset`, or an ``hf://`` /
        ``kaggle://`` handle, the ``hub`` extra): the ids its predictor reads."""
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
