"""Word splitting: UTF-8 strings -> words, with the tensorflow-text kernels TensorFlow Serving has.

The tokenizer (:class:`glomo_tf.data.tokenizer.Tokenizer`), the SQuAD reader and the exported
serving signature split text here, so that words are the same at pretraining, transfer and
serving time.

Ops used (the graph a serving signature contains): core TensorFlow string ops
(``UnicodeTranscode``, ``StringLower``, ``UnicodeDecode``, ``UnicodeEncode``) and only these
tensorflow-text kernels, which the stock TensorFlow Serving model server links in:
``WhitespaceTokenizeWithOffsets`` and ``UnicodeScriptTokenizeWithOffsets``. tf_text's public
``WhitespaceTokenizer`` class now runs a newer kernel, ``WhitespaceTokenizeWithOffsetsV2``, which
TensorFlow Serving lacks and which keeps the leading bytes of a multi-byte whitespace character
(U+00A0, U+3000, ...) that follows a word, so the two splitting kernels are called directly: loaded
with ``tf.load_op_library`` from the installed tensorflow-text's shared libraries
(:func:`glomo_tf.export.serving_ops.serving_op_libraries`, the libraries TensorFlow Serving's
kernels come from), not through tensorflow-text's private Python modules (the whitespace kernel
crashes on a batch without any word, which a sentinel row prevents).
No ``NormalizeUTF8`` / ``case_fold_utf8``: lowercasing uses ``tf.strings.lower(encoding="utf-8")``.
"""

import functools
import os

import tensorflow as tf

from glomo_tf import hparams
from glomo_tf.export import serving_ops

SPLITTERS = ("whitespace", "unicode_script")
REPLACEMENT_CHARACTER = 0xFFFD


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
