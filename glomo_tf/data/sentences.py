"""Sentences of documents for self-supervised sentence encoders (Quick Thoughts, Self Prediction,
Global-to-Local): reading, consecutive pairs, ids with a ``[MASK]`` unit, and the corruption.

Two corpus formats are read into documents (each a list of sentences, each a str):

* ``"wikitext"``: WikiText's files, one paragraph per line; a line `` = Title = `` starts a new
  article (a document), section headings (`` = = Section = = ``) and blank lines are skipped, and
  each paragraph is split into sentences after the tokens ``.``, ``!`` and ``?`` (WikiText is
  tokenised, so a sentence ends with a token of its own; decimals are written ``3 @.@ 5``).
* ``"lines"``: any text file with one sentence per line and blank lines between documents.
* ``"books"``: untokenised prose, one paragraph per line and a blank line between books (the
  shared ``books/`` shards); each paragraph is split into sentences by :func:`split_prose`, a
  book is a document, so consecutive pairs never cross from one book into the next.

Files ending in ``.gz`` are read through gzip, line by line (:func:`iter_documents` yields one
document at a time).

:func:`consecutive_sentences` lists the neighbours the objectives train on: ``(source, next)`` for
Quick Thoughts (Eq. 3.3 of the thesis) and Global-to-Local (Eq. 3.5), or ``(previous, source,
next)`` for the Quick Thoughts variant where both neighbours are targets. :func:`corrupt` is Self
Prediction's corruption (Section 3.2.3), in TensorFlow ops so that every training step draws new
corruptions.

Example::

    documents = read_documents(["wikitext2/valid.txt", "wikitext2/test.txt"], "wikitext")
    tokenizer = with_mask_unit(Tokenizer.build(sentence_lines(documents), max_size=20_000))
    columns = consecutive_sentences(documents, neighbours="next")   # {"source": [...], ...}
    ids = encode_columns(columns, tokenizer, max_length=40)         # {"source": [N, 40], ...}
"""

import gzip
import re

import numpy as np

from glomo_tf import hparams

__all__ = ["CORPUS_FORMATS", "MASK", "NEIGHBOURS", "consecutive_sentences", "corrupt",
           "encode_columns", "encode_documents", "iter_documents", "mask_id", "read_documents", "sentence_lines",
           "split_prose", "split_sentences", "with_mask_unit"]

MASK = "[MASK]"
CORPUS_FORMATS = ("wikitext", "lines", "books")
# Which neighbours of a source sentence are targets: the next one, or both.
NEIGHBOURS = ("next", "both")
SENTENCE_ENDS = frozenset({".", "!", "?"})
_ARTICLE_TITLE = re.compile(r"^ ?= [^=].*[^=] = ?$")
_HEADING = re.compile(r"^ ?=( =)* .* (= )*= ?$")
# split_prose: a word ending a sentence (end marks, then closing quotes or brackets), the
# opening marks a sentence may start with, and the abbreviations a period does not end on.
_PROSE_END = re.compile(r"(?:[.!?]|\u2026)[\"'\u201d\u2019)\]]*$")
_OPENING = "\"'\u201c\u2018(["
_CLOSING = "\"'\u201d\u2019)]"
ABBREVIATIONS = frozenset(
    "mr mrs ms messrs mme mlle dr st mt prof gen col capt lt sgt rev hon esq jr sr vs etc cf "
    "no nos vol vols ch chap fig pp ed eds op viz ca approx dept jan feb mar apr jun jul aug sep "
    "sept oct nov dec".split())


# ---------------------------------------------------------------------------------- reading
def split_sentences(paragraph):
    """Sentences of a tokenised paragraph: a sentence ends after a ``.``, ``!`` or ``?`` token
    (the end token stays in it); trailing words without an end token form a last sentence."""
    sentences, words = [], []
    for word in paragraph.split():
        words.append(word)
        if word in SENTENCE_ENDS:
            sentences.append(" ".join(words))
            words = []
    if words:
        sentences.append(" ".join(words))
    return sentences


def split_prose(paragraph):
    """Sentences of an untokenised English paragraph (books), by a documented rule.

    A word ends a sentence when it ends with ``.``, ``!``, ``?`` or an ellipsis (then any closing
    quotes or brackets) and the next word begins, after any opening quotes or brackets, with a
    capital letter or a digit; a period does not end a sentence after an abbreviation
    (:data:`ABBREVIATIONS`: ``Mr.``, ``Dr.``, ``St.``, ``etc.``, ...), a single letter (the
    initials of ``H. G. Wells``) or a word with a period inside (``U.S.``, ``e.g.``). So
    ``"Go away!" he cried.`` is one sentence, ``"Go away." She left.`` two, and ``He paused...
    then went on.`` one. The paragraph's last words always close a sentence. White space is
    collapsed to single spaces.
    """
    words = paragraph.split()
    sentences, start = [], 0
    for i, word in enumerate(words[:-1]):
        if _PROSE_END.search(word) and _starts_sentence(words[i + 1]) and not _abbreviated(word):
            sentences.append(" ".join(words[start:i + 1]))
            start = i + 1
    if start < len(words):
        sentences.append(" ".join(words[start:]))
    return sentences


def _starts_sentence(word):
    word = word.lstrip(_OPENING)
    return bool(word) and (word[0].isupper() or word[0].isdigit())


def _abbreviated(word):
    """Whether a word ending in a single period is an abbreviation or an initial."""
    core = word.rstrip(_CLOSING)
    if not core.endswith(".") or core.endswith(".."):
        return False
    stem = core[:-1].lstrip(_OPENING)
    return (stem.lower() in ABBREVIATIONS or (len(stem) == 1 and stem.isalpha())
            or "." in stem)


def iter_documents(paths, corpus_format="wikitext"):
    """Yields the documents (lists of sentences) of one or more files, one at a time, reading
    each file line by line (``.gz`` through gzip); see the module's formats. Raises
    ``ValueError`` for an unknown format or a file that cannot be read."""
    hparams.check_choice("corpus_format", corpus_format, CORPUS_FORMATS)
    if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
        paths = [paths]
    reader = {"wikitext": _wikitext_documents, "lines": _line_documents,
              "books": _book_documents}[corpus_format]
    for path in paths:
        try:
            opener = gzip.open if str(path).endswith(".gz") else open
            with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
                for document in reader(handle):
                    if document:
                        yield document
        except (OSError, EOFError) as error:
            reason = getattr(error, "strerror", None) or error
            raise ValueError(f"cannot read the corpus file {path!r} ({reason}).") from None


def read_documents(paths, corpus_format="wikitext"):
    """Documents (lists of sentences) of one or more files (see the module's formats).

    Raises ``ValueError`` for an unknown format, a missing file, or files without a document of
    two sentences (no consecutive pair could be formed).
    """
    if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
        paths = [paths]
    documents = list(iter_documents(paths, corpus_format))
    if not any(len(d) >= 2 for d in documents):
        raise ValueError(
            f"{', '.join(map(str, paths))}: no document holds two sentences, so there is no "
            f"consecutive pair to train on. Check `format` ({corpus_format!r}): 'lines' reads one "
            "sentence per line with blank lines between documents, 'wikitext' one paragraph per "
            "line with ' = Title = ' lines between articles, 'books' one paragraph of prose per "
            "line with blank lines between books.")
    return documents


def _wikitext_documents(lines):
    current = []
    for line in lines:
        line = line.rstrip("\r\n")
        stripped = line.strip()
        if not stripped:
            continue
        if _ARTICLE_TITLE.match(line) and not stripped.startswith("= ="):
            yield current
            current = []
            continue
        if _HEADING.match(line):
            continue
        current += split_sentences(stripped)
    yield current


def _line_documents(lines, split=None):
    current = []
    for line in lines:
        if line.strip():
            current += split(line) if split else [" ".join(line.split())]
        else:
            yield current
            current = []
    yield current


def _book_documents(lines):
    return _line_documents(lines, split_prose)


def sentence_lines(documents):
    """Every sentence of the documents, in order (e.g. to build the vocabulary from)."""
    return [sentence for document in documents for sentence in document]


def consecutive_sentences(documents, neighbours="next"):
    """Columns of consecutive sentences within documents, never across a document's end.

    Args:
        documents: lists of sentences (:func:`read_documents`).
        neighbours: ``"next"``: ``{"source", "target"}`` with ``target`` the sentence after
            ``source`` (every sentence but a document's last is a source); ``"both"``:
            ``{"previous", "source", "target"}`` for sources with a sentence on either side.

    Returns:
        dict of equally long lists of str.
    """
    hparams.check_choice("neighbours", neighbours, NEIGHBOURS)
    columns = {"source": [], "target": []}
    if neighbours == "both":
        columns["previous"] = []
    for document in documents:
        first = 1 if neighbours == "both" else 0
        for i in range(first, len(document) - 1):
            columns["source"].append(document[i])
            columns["target"].append(document[i + 1])
            if neighbours == "both":
                columns["previous"].append(document[i - 1])
    if not columns["source"]:
        needed = 3 if neighbours == "both" else 2
        raise ValueError(f"no document holds {needed} sentences, so neighbours={neighbours!r} "
                         "finds no source with its targets.")
    return columns


# ---------------------------------------------------------------------------------- ids
def with_mask_unit(tokenizer):
    """``tokenizer`` itself when its vocabulary holds ``[MASK]``, else a copy with ``[MASK]``
    appended as the last id (same settings)."""
    from glomo_tf.data.vocabulary import Tokenizer, Vocabulary

    if MASK in tokenizer.vocabulary:
        return tokenizer
    vocabulary = Vocabulary(list(tokenizer.vocabulary.tokens) + [MASK])
    return Tokenizer(vocabulary, **tokenizer.get_config())


def mask_id(tokenizer):
    """The id of ``[MASK]``; ``ValueError`` when the vocabulary has none."""
    if MASK not in tokenizer.vocabulary:
        raise ValueError(f"the tokenizer's vocabulary has no {MASK} unit, which Self Prediction "
                         "needs; add it with glomo_tf.data.sentences.with_mask_unit(tokenizer).")
    return tokenizer.vocabulary.lookup(MASK)


def encode_columns(columns, tokenizer, max_length, batch_size=4096):
    """int32 ids ``[N, max_length]`` (truncated, padded with 0) of each column of sentences."""
    if max_length < 2:
        raise ValueError(f"max_length must be at least 2, got {max_length}.")
    out = {}
    for name, sentences in columns.items():
        parts = [tokenizer.encode(sentences[i:i + batch_size], max_length=max_length).numpy()
                 for i in range(0, len(sentences), batch_size)]
        out[name] = np.concatenate(parts).astype("int32") if parts else \
            np.zeros((0, max_length), "int32")
    return out


def encode_documents(documents, tokenizer, max_length, neighbours="next", chunk=65536):
    """:func:`encode_columns` of :func:`consecutive_sentences`, streamed: ``documents`` may be an
    iterator (:func:`iter_documents`), whose documents are turned into id columns ``chunk``
    pairs at a time, so only the ids are kept (a corpus of books need not sit in memory as
    text). Raises ``ValueError`` as :func:`consecutive_sentences` when no pair is found."""
    parts, pending, count = [], [], 0

    def flush():
        if pending:
            parts.append(encode_columns(consecutive_sentences(pending, neighbours), tokenizer,
                                        max_length))
            pending.clear()

    for document in documents:
        usable = len(document) - (2 if neighbours == "both" else 1)
        if usable <= 0:
            continue
        pending.append(document)
        count += usable
        if count >= chunk:
            flush()
            count = 0
    flush()
    if not parts:
        consecutive_sentences([], neighbours)  # raises its error
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


# ---------------------------------------------------------------------------------- corruption
def corrupt(token_ids, mask_token_id, vocabulary_size, seed, select_rate=0.5, mask_rate=0.8,
            random_rate=0.1, window=3, first_unit_id=2):
    """Self Prediction's corruption of a batch of sentences (Section 3.2.3 of the thesis).

    Step 1 (as in BERT): each real unit is chosen with probability ``select_rate`` (0.5); a chosen
    unit becomes ``[MASK]`` with probability ``mask_rate`` (0.8), a random unit with probability
    ``random_rate`` (0.1; drawn uniformly from the ids ``first_unit_id .. vocabulary_size - 1``
    other than ``[MASK]``), and stays itself otherwise (0.1).

    Step 2, the local shuffle: each unit moves to a position drawn uniformly from itself and its
    next ``window`` (k = 3) units. Draws can collide, so the positions are resolved as in Lample
    et al. (2018)'s word shuffle: unit ``i`` gets the key ``i + u_i`` with ``u_i`` uniform in
    ``[0, window + 1)`` and the units are sorted by key. A unit then never ends more than
    ``window`` positions from where it started, in either direction.

    Padding (id 0) is neither chosen nor moved; sentences must be padded at the end.

    Args:
        token_ids: int ``[B, T]``.
        mask_token_id: int, the id of ``[MASK]``.
        vocabulary_size: int, the ids are ``0 .. vocabulary_size - 1``.
        seed: anything ``keras.random`` takes as a seed (an int, or a ``SeedGenerator``).

    Returns:
        int ``[B, T]`` of the dtype of ``token_ids``.
    """
    import keras
    import tensorflow as tf

    ids = tf.convert_to_tensor(token_ids)
    dtype = ids.dtype
    ids = tf.cast(ids, tf.int32)
    shape = tf.shape(ids)
    real = ids != 0
    chosen = real & (keras.random.uniform(shape, seed=seed) < select_rate)
    action = keras.random.uniform(shape, seed=seed)
    to_mask = chosen & (action < mask_rate)
    to_random = chosen & (action >= mask_rate) & (action < mask_rate + random_rate)
    # A uniform draw over the first_unit_id .. vocabulary_size - 1 ids without [MASK].
    choices = vocabulary_size - first_unit_id - 1
    draw = tf.cast(tf.floor(keras.random.uniform(shape, seed=seed) * choices), tf.int32)
    draw = tf.minimum(draw, choices - 1) + first_unit_id
    draw = tf.where(draw >= mask_token_id, draw + 1, draw)
    ids = tf.where(to_mask, tf.fill(shape, tf.cast(mask_token_id, tf.int32)), ids)
    ids = tf.where(to_random, draw, ids)
    # The local shuffle: sort by i + U[0, window + 1); padding keeps keys beyond every real one.
    positions = tf.cast(tf.range(shape[1])[None, :], tf.float32)
    offsets = keras.random.uniform(shape, maxval=float(window + 1), seed=seed)
    keys = tf.where(real, positions + offsets, positions + 4.0 * tf.cast(shape[1], tf.float32)
                    + float(window + 1))
    order = tf.argsort(keys, axis=1, stable=True)
    return tf.cast(tf.gather(ids, order, batch_dims=1), dtype)
