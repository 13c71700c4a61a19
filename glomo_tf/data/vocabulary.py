"""Vocabulary and tokenizer: the same tokenisation at pretraining, transfer and serving time.

A :class:`Vocabulary` is a list of unit strings whose line index is the id (``0 = "<pad>"``,
``1 = "<unk>"``). A :class:`Tokenizer` turns raw UTF-8 strings into those ids with TensorFlow ops
only, so it runs inside ``tf.data``, a ``tf.function`` and an exported SavedModel whose serving
signature takes raw strings.

This module gathers the names of three and checks a vocabulary against a model:

- :mod:`glomo_tf.data.units`: :class:`Vocabulary`, the reserved ids (``PAD_ID``, ``UNK_ID``) and
  the saved files (``vocab.txt``, ``tokenizer.json``);
- :mod:`glomo_tf.data.word_splitting`: :func:`split_words` and
  :func:`split_words_with_offsets`, on the tensorflow-text kernels TensorFlow Serving links in;
- :mod:`glomo_tf.data.tokenizer`: :class:`Tokenizer`, strings -> units -> ids.
"""

import os

import numpy as np

from glomo_tf.data.tokenizer import Tokenizer, integer_ids
from glomo_tf.data.units import (FORMAT, FORMAT_VERSION, PAD, PAD_ID, RESERVED, SETTINGS_FILE, UNK,
                                 UNK_ID, VOCAB_FILE, Vocabulary, count_units)
from glomo_tf.data.word_splitting import (REPLACEMENT_CHARACTER, SPLITTERS, split_words,
                                          split_words_with_offsets)

__all__ = [
    "FORMAT", "FORMAT_VERSION", "PAD", "PAD_ID", "REPLACEMENT_CHARACTER", "RESERVED",
    "SETTINGS_FILE", "SPLITTERS", "UNK", "UNK_ID", "VOCAB_FILE", "Tokenizer", "Vocabulary",
    "check_vocabulary_matches", "count_units", "integer_ids", "split_words",
    "split_words_with_offsets",
]


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
