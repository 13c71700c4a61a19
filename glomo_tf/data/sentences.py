"""Sentences of documents for self-supervised sentence encoders (Quick Thoughts, Self Prediction,
Global-to-Local): reading, consecutive pairs, ids with a ``[MASK]`` unit, and the corruption.

Two corpus formats are read into documents (each a list of sentences, each a str):

* ``"wikitext"``: WikiText's files, one paragraph per line; a line `` = Title = `` starts a new
  article (a document), section headings (`` = = Section = = ``) and blank lines are skipped, and
  each paragraph is split into sentences after the tokens ``.``, ``!`` and ``?`` (WikiText is
  tokenised, so a sentence ends with a token of its own; decimals are written ``3 @.@ 5``).
* ``"lines"``: any text file with one sentence per line and blank lines between documents.

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

import re

import numpy as np

__all__ = ["CORPUS_FORMATS", "MASK", "NEIGHBOURS", "consecutive_sentences", "corrupt",
           "encode_columns", "mask_id", "read_documents", "sentence_lines", "split_sentences",
           "with_mask_unit"]

MASK = "[MASK]"
CORPUS_FORMATS = ("wikitext", "lines")
# Which neighbours of a source sentence are targets: the next one, or both.
NEIGHBOURS = ("next", "both")
SENTENCE_ENDS = frozenset({".", "!", "?"})
_ARTICLE_TITLE = re.compile(r"^ ?= [^=].*[^=] = ?$")
_HEADING = re.compile(r"^ ?=( =)* .* (= )*= ?$")


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


def read_documents(paths, corpus_format="wikitext"):
    """Documents (lists of sentences) of one or more files (see the module's formats).

    Raises ``ValueError`` for an unknown format, a missing file, or files without a document of
    two sentences (no consecutive pair could be formed).
    """
    if corpus_format not in CORPUS_FORMATS:
        raise ValueError(f"corpus_format must be one of {CORPUS_FORMATS}, got {corpus_format!r}.")
    if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
        paths = [paths]
    documents = []
    for path in paths:
        try:
            with open(path, "rb") as handle:
                text = handle.read().decode("utf-8", errors="replace")
        except OSError as error:
            raise ValueError(f"cannot read the corpus file {path!r} ({error.strerror}).") \
                from None
        documents += (_wikitext_documents(text) if corpus_format == "wikitext"
                      else _line_documents(text))
    documents = [d for d in documents if d]
    if not any(len(d) >= 2 for d in documents):
        raise ValueError(
            f"{', '.join(map(str, paths))}: no document holds two sentences, so there is no "
            f"consecutive pair to train on. Check --format ({corpus_format!r}): 'lines' reads one "
            "sentence per line with blank lines between documents, 'wikitext' one paragraph per "
            "line with ' = Title = ' lines between articles.")
    return documents


def _wikitext_documents(text):
    documents, current = [], []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if _ARTICLE_TITLE.match(line.rstrip("\n")) and not stripped.startswith("= ="):
            documents.append(current)
            current = []
            continue
        if _HEADING.match(line.rstrip("\n")):
            continue
        current += split_sentences(stripped)
    documents.append(current)
    return documents


def _line_documents(text):
    documents, current = [], []
    for line in text.splitlines():
        if line.strip():
            current.append(" ".join(line.split()))
        else:
            documents.append(current)
            current = []
    documents.append(current)
    return documents


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
    if neighbours not in NEIGHBOURS:
        raise ValueError(f"neighbours must be one of {NEIGHBOURS}, got {neighbours!r}.")
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
