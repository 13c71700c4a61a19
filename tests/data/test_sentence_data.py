"""Sentences for the self-supervised sentence encoders: reading both corpus formats, consecutive
pairs (the target is the next sentence, never the source), the [MASK] unit, and Self Prediction's
corruption checked by its statistics over many samples."""

import os

import keras
import numpy as np
import pytest

from glomo_tf.data import sentences
from glomo_tf.data.vocabulary import Tokenizer
from _paths import REPO

WIKITEXT = os.path.join(REPO, os.pardir,
                        "shared", "data", "wikitext2", "valid.txt")
BOOKS_VALID = os.path.join(os.path.dirname(WIKITEXT), os.pardir, "books", "valid.txt.gz")


def test_split_sentences_keeps_the_end_token():
    assert sentences.split_sentences("a b . c ? d e ! f") == ["a b .", "c ?", "d e !", "f"]
    assert sentences.split_sentences("3 @.@ 5 cm .") == ["3 @.@ 5 cm ."]


def test_wikitext_articles_are_documents_and_headings_are_skipped(tmp_path):
    path = tmp_path / "wiki.txt"
    path.write_text(" \n = First = \n \n a b . c d . \n \n = = Part = = \n \n e f . \n"
                    " = Second = \n \n g h . i j . \n")
    documents = sentences.read_documents(str(path), "wikitext")
    assert documents == [["a b .", "c d .", "e f ."], ["g h .", "i j ."]]


def test_line_files_split_documents_at_blank_lines(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("one\ntwo\n\nthree\nfour\nfive\n\n\n")
    assert sentences.read_documents(str(path), "lines") == [["one", "two"],
                                                            ["three", "four", "five"]]


@pytest.mark.parametrize("paragraph, expected", [
    ("Mr. Brown met Dr. Smith at St. Paul's. They talked.",          # abbreviations
     ["Mr. Brown met Dr. Smith at St. Paul's.", "They talked."]),
    ('"Go away!" he cried. "Now!"', ['"Go away!" he cried.', '"Now!"']),  # dialogue
    ('"I am tired." She sat  down.', ['"I am tired."', "She sat down."]),
    ("He paused... then went on. Wait... What was that?",             # ellipses
     ["He paused... then went on.", "Wait...", "What was that?"]),
    ("H. G. Wells wrote it. It sold.", ["H. G. Wells wrote it.", "It sold."]),  # initials
    ("It was 3.5 miles, e.g. a long walk. Yes!", ["It was 3.5 miles, e.g. a long walk.", "Yes!"]),
    ("(He left.) She stayed.", ["(He left.)", "She stayed."]),       # brackets
    ("\u201cIs it?\u201d asked Tom. \u2018Yes.\u2019",              # curly quotes
     ["\u201cIs it?\u201d asked Tom.", "\u2018Yes.\u2019"]),
    ("The U.S. Navy sailed. 12 ships came.", ["The U.S. Navy sailed.", "12 ships came."]),
    ("A heading without an end", ["A heading without an end"]),
])
def test_split_prose_hard_cases(paragraph, expected):
    assert sentences.split_prose(paragraph) == expected


def test_books_are_documents_and_gzip_is_read_line_by_line(tmp_path):
    import gzip

    path = tmp_path / "books.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("CHAPTER I\nIt began. Mr. Hale came in.\n\nOther book. Its end.\n\n")
    documents = sentences.read_documents(str(path), "books")
    assert documents == [["CHAPTER I", "It began.", "Mr. Hale came in."],
                         ["Other book.", "Its end."]]
    columns = sentences.consecutive_sentences(documents, "next")
    assert ("Mr. Hale came in.", "Other book.") not in zip(columns["source"], columns["target"])
    assert next(sentences.iter_documents([str(path)], "books")) == documents[0]


@pytest.mark.skipif(not os.path.isfile(BOOKS_VALID), reason="the shared books copy is absent")
def test_shared_books_shard_gives_one_document_per_book_of_its_manifest():
    manifest = os.path.join(os.path.dirname(BOOKS_VALID), "MANIFEST.tsv")
    with open(manifest, encoding="utf-8") as handle:
        books = [line.split("\t") for line in handle.read().splitlines()[1:]]
    expected = [int(row[3]) for row in books if row[0] == "valid.txt.gz"]
    documents = list(sentences.iter_documents(BOOKS_VALID, "books"))
    assert len(documents) == len(expected) == 30
    words = [sum(len(s.split()) for s in d) for d in documents]
    assert all(abs(w - e) <= 0.01 * e for w, e in zip(words, expected))  # the same books, in order


def test_reading_errors_are_one_line_value_errors(tmp_path):
    path = tmp_path / "single.txt"
    path.write_text("alone\n\nalso alone\n")
    with pytest.raises(ValueError, match="no document holds two sentences"):
        sentences.read_documents(str(path), "lines")
    with pytest.raises(ValueError, match="corpus_format"):
        sentences.read_documents(str(path), "csv")
    with pytest.raises(ValueError, match="cannot read"):
        sentences.read_documents(str(tmp_path / "missing.txt"), "lines")


def test_targets_are_the_next_sentence_never_the_source_nor_across_documents():
    documents = [[f"d{d} s{i}" for i in range(n)] for d, n in enumerate([4, 1, 3])]
    columns = sentences.consecutive_sentences(documents, "next")
    assert len(columns["source"]) == 3 + 0 + 2
    for source, target in zip(columns["source"], columns["target"]):
        doc, i = source.split()
        assert target == f"{doc} s{int(i[1:]) + 1}"
        assert target != source
    both = sentences.consecutive_sentences(documents, "both")
    assert both["source"] == ["d0 s1", "d0 s2", "d2 s1"]
    assert both["previous"] == ["d0 s0", "d0 s1", "d2 s0"]
    assert both["target"] == ["d0 s2", "d0 s3", "d2 s2"]


@pytest.mark.skipif(not os.path.isfile(WIKITEXT), reason="the shared WikiText-2 copy is absent")
def test_wikitext2_pairs_are_consecutive_in_the_paragraphs():
    documents = sentences.read_documents(WIKITEXT, "wikitext")
    columns = sentences.consecutive_sentences(documents)
    assert len(columns["source"]) > 5000
    text = open(WIKITEXT, encoding="utf-8").read()
    paragraph_text = " ".join(line.strip() for line in text.splitlines()
                              if line.strip() and not line.strip().startswith("= "))
    for k in range(0, len(columns["source"]), 97):  # the pair is adjacent in the text
        assert f" {columns['source'][k]} {columns['target'][k]} " in f" {paragraph_text} "


def test_mask_unit_is_added_once_and_encoding_pads():
    tokenizer = Tokenizer.build(["a b c", "b c d"])
    masked = sentences.with_mask_unit(tokenizer)
    assert masked.vocabulary.tokens[-1] == sentences.MASK
    assert sentences.with_mask_unit(masked) is masked
    assert sentences.mask_id(masked) == len(masked.vocabulary) - 1
    with pytest.raises(ValueError, match="MASK"):
        sentences.mask_id(tokenizer)
    ids = sentences.encode_columns({"source": ["a b", "[MASK] c d b a"]}, masked, 4)["source"]
    assert ids.shape == (2, 4) and ids.dtype == np.int32
    assert ids[0, 2:].tolist() == [0, 0]
    assert ids[1, 0] == sentences.mask_id(masked)


def _corrupted(ids, seed=0, **kwargs):
    return np.asarray(sentences.corrupt(ids, MASK_ID, VOCAB, keras.random.SeedGenerator(seed),
                                        **kwargs))


VOCAB, MASK_ID = 60, 59


def _distinct_sentences(rng, n, length, pad_from):
    """Sentences of distinct ids (so each unit can be traced), padded after ``pad_from[b]``."""
    ids = np.zeros((n, length), "int32")
    for b in range(n):
        ids[b, :pad_from[b]] = rng.choice(np.arange(2, MASK_ID), pad_from[b], replace=False)
    return ids


def test_corruption_statistics_over_many_sentences(rng):
    n, length = 4000, 12
    lengths = rng.integers(3, length + 1, n)
    ids = _distinct_sentences(rng, n, length, lengths)
    # Without the shuffle (window 0) each position can be compared with its original unit.
    out = _corrupted(ids, window=0)
    real = ids != 0
    masked = (out == MASK_ID) & real
    changed = (out != ids) & real
    random_word = changed & ~masked
    total = real.sum()
    # Chosen = masked + random + kept-but-chosen: 50% chosen, 80% of those masked, 10% random.
    assert abs(masked.sum() / total - 0.5 * 0.8) < 0.01
    # A random draw equals the original with probability 1/(V-3); correct the expectation for it.
    p_same = 1.0 / (VOCAB - 3)
    assert abs(random_word.sum() / total - 0.5 * 0.1 * (1 - p_same)) < 0.006
    drawn = out[random_word]
    assert drawn.min() >= 2 and drawn.max() < VOCAB and not np.any(drawn == MASK_ID)
    # About 1 - 0.5 * 0.9 of the units come through unchanged.
    assert abs((out == ids)[real].mean() - (1 - 0.5 * 0.8 - 0.5 * 0.1 * (1 - p_same))) < 0.01
    np.testing.assert_array_equal(out[~real], 0)  # padding untouched


def test_local_shuffle_moves_units_at_most_three_positions_and_leaves_padding(rng):
    n, length = 3000, 14
    lengths = rng.integers(1, length + 1, n)
    ids = _distinct_sentences(rng, n, length, lengths)
    out = _corrupted(ids, seed=3, select_rate=0.0)  # the shuffle alone
    displacements = []
    for b in range(n):
        assert sorted(out[b, :lengths[b]]) == sorted(ids[b, :lengths[b]])  # a permutation
        assert np.all(out[b, lengths[b]:] == 0)
        where = {unit: i for i, unit in enumerate(out[b])}
        displacements += [where[unit] - i for i, unit in enumerate(ids[b, :lengths[b]])]
    displacements = np.asarray(displacements)
    assert np.abs(displacements).max() == 3  # reached, never exceeded
    assert (displacements != 0).mean() > 0.5  # most units move
    assert abs(displacements.mean()) < 0.05  # as many forward as backward, on average


def test_two_corruptions_differ_and_keep_the_dtype(rng):
    ids = _distinct_sentences(rng, 8, 10, np.full(8, 10)).astype("int64")
    generator = keras.random.SeedGenerator(0)
    first = sentences.corrupt(ids, MASK_ID, VOCAB, generator)
    second = sentences.corrupt(ids, MASK_ID, VOCAB, generator)
    assert first.dtype.name == "int64"
    assert np.mean(np.asarray(first) != np.asarray(second)) > 0.3


@pytest.mark.parametrize("neighbours", ["next", "both"])
def test_encode_documents_streams_the_columns_of_consecutive_sentences(neighbours):
    """Chunked over an iterator (chunk boundaries inside the corpus), the same id columns as
    encoding the pairs of all documents at once."""
    documents = [[f"w{d} s{i} x" for i in range(n)] for d, n in enumerate([4, 1, 3, 5, 2, 6])]
    tokenizer = Tokenizer.build([s for d in documents for s in d])
    expected = sentences.encode_columns(sentences.consecutive_sentences(documents, neighbours),
                                        tokenizer, 5)
    got = sentences.encode_documents(iter(documents), tokenizer, 5, neighbours, chunk=3)
    assert got.keys() == expected.keys()
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])
    with pytest.raises(ValueError, match="no document holds"):
        sentences.encode_documents(iter([["alone"]]), tokenizer, 5, neighbours)
