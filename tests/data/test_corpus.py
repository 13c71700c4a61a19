"""Corpora: text files (globs, gzip), tensorflow-datasets (mock data), windows, splits, bad
input."""

import gzip
import pathlib
import sys

import numpy as np
import pytest
import tensorflow as tf

from glomo_tf.data import corpus
from glomo_tf.data.corpus import (count_undecodable, pretraining_datasets, text_lines, tfds_lines,
                                  windows)
from glomo_tf.data.vocabulary import Tokenizer
from _paths import REPO

SHARED_DATA = pathlib.Path(REPO).parent / "shared" / "data"
WIKITEXT_VALID = SHARED_DATA / "wikitext2" / "valid.txt"


def _lines(dataset):
    return [line.decode("utf-8") for line in dataset.as_numpy_iterator()]


def _numpy_windows(stream, length, shift):
    stream = np.asarray(stream, np.int32)
    starts = range(0, len(stream) - length + 1, shift)
    return np.array([stream[s:s + length] for s in starts], np.int32).reshape(-1, length)


def _numbered_corpus(num_lines, words_per_line=7):
    """Lines whose words are unique per line ("l3w0 l3w1 ..."), so any window tells its lines."""
    return [" ".join(f"l{i}w{j}" for j in range(words_per_line)) for i in range(num_lines)]


@pytest.fixture
def text_dir(tmp_path):
    (tmp_path / "b.txt").write_text("second file\nline two\n", encoding="utf-8")
    (tmp_path / "a.txt").write_text("first file\r\nwindows line end\n\nlast", encoding="utf-8")
    with gzip.open(tmp_path / "c.txt.gz", "wt", encoding="utf-8") as f:
        f.write("gzipped line\nnaïve café\n")
    return tmp_path


# ---------------------------------------------------------------------------------- text files
def test_text_lines_reads_globs_in_sorted_order_with_gzip(text_dir):
    expected = []
    for name in ("a.txt", "b.txt"):
        expected += (text_dir / name).read_text(encoding="utf-8").splitlines()
    with gzip.open(text_dir / "c.txt.gz", "rt", encoding="utf-8") as f:
        expected += f.read().splitlines()
    assert _lines(text_lines(str(text_dir / "*"))) == expected
    assert _lines(text_lines([text_dir / "c.txt.gz", str(text_dir / "[ab].txt")])) == (
        expected[-2:] + expected[:-2])
    assert corpus.list_files([str(text_dir / "*.txt"), str(text_dir / "a.txt")]) == [
        str(text_dir / "a.txt"), str(text_dir / "b.txt")]


def test_undecodable_bytes_are_replaced_and_counted(tmp_path):
    raw = [b"caf\xe9 ok", b"fine line", b"\xff\xfe two bad", b"truncated \xe2\x82",
           "ünï".encode()]
    (tmp_path / "bad.txt").write_bytes(b"\n".join(raw) + b"\n")
    expected = [line.decode("utf-8", errors="replace") for line in raw]
    assert _lines(text_lines(tmp_path / "bad.txt")) == expected
    count = count_undecodable(tmp_path / "bad.txt")
    assert count.lines == len(raw)
    assert count.lines_with_errors == 3
    assert count.replaced_characters == sum(line.count("\ufffd") for line in expected) == 4
    tokenizer = Tokenizer.build(text_lines(tmp_path / "bad.txt"))
    assert "caf\ufffd" in tokenizer.vocabulary


@pytest.mark.parametrize("make,error,message", [
    (lambda d: str(d / "missing*.txt"), FileNotFoundError, r"No file matches '.*missing\*\.txt'"),
    (lambda d: (d / "empty.txt").write_text("") and None or d / "empty.txt", ValueError,
     r"empty.txt' is empty"),
    (lambda d: gzip.open(d / "empty.txt.gz", "wb").close() or d / "empty.txt.gz", ValueError,
     r"is empty once decompressed"),
    (lambda d: (d / "plain.gz").write_text("not gzip") and d / "plain.gz", ValueError,
     r"ends in .gz but is not gzip-compressed"),
    (lambda d: (d / "sub").mkdir() or d / "sub", ValueError, r"is a directory"),
    (lambda d: [], ValueError, r"No corpus file given"),
])
def test_bad_files_raise_clear_errors(tmp_path, make, error, message):
    with pytest.raises(error, match=message):
        text_lines(make(tmp_path))


# ---------------------------------------------------------------------------------- tfds
def test_tfds_lines_on_mock_data():
    import tensorflow_datasets as tfds  # the [datasets] extra, installed for the test suite
    with tfds.testing.mock_data(num_examples=6):
        lines = tfds_lines("lm1b", "train")
        assert lines.element_spec == tf.TensorSpec([], tf.string)
        texts = list(lines.as_numpy_iterator())
        reference = [ex["text"] for ex in tfds.load("lm1b", split="train").as_numpy_iterator()]
        assert texts == reference and len(texts) == 6
        # Labelled dataset with one text feature: found without text_key.
        assert len(list(tfds_lines("imdb_reviews", "test").as_numpy_iterator())) == 6
        with pytest.raises(ValueError, match=r"2 text features \['description', 'title'\]; "
                                             r"choose one with text_key"):
            tfds_lines("ag_news_subset", "train")
        titles = list(tfds_lines("ag_news_subset", "train", text_key="title").as_numpy_iterator())
        reference = [ex["title"] for ex in
                     tfds.load("ag_news_subset", split="train").as_numpy_iterator()]
        assert titles == reference
        with pytest.raises(ValueError, match=r"no scalar text feature 'label'"):
            tfds_lines("ag_news_subset", "train", text_key="label")
        with pytest.raises(ValueError, match="has no dataset named 'no_such_corpus_xyz'"):
            tfds_lines("no_such_corpus_xyz", "train")
        # The lines feed the whole pipeline.
        lines = tfds_lines("lm1b", "train")
        tokenizer = Tokenizer.build(lines, splitter="unicode_script")
        train, _ = pretraining_datasets(lines, tokenizer, window=2, shift=1, batch_size=2)
        assert next(iter(train)).shape == (2, 2)


def test_tfds_missing_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # import fails
    with pytest.raises(ImportError, match=r"pip install glomo_tf\[datasets\]"):
        tfds_lines("lm1b", "train")


# ---------------------------------------------------------------------------------- windows
@pytest.mark.parametrize("length,shift", [(5, 5), (6, 3), (4, 1), (7, None)])
def test_windows_match_numpy_slicing(rng, length, shift):
    pieces = [rng.integers(1, 100, size=n).astype("int64") for n in (0, 3, 11, 1, 0, 9, 2, 20)]
    dataset = tf.data.Dataset.from_generator(
        lambda: iter(pieces), output_signature=tf.TensorSpec([None], tf.int64))
    got = np.array(list(windows(dataset, length, shift).as_numpy_iterator()))
    expected = _numpy_windows(np.concatenate(pieces), length, shift or length)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got.reshape(-1, length), expected)


def test_windows_accept_ragged_elements():
    ragged = tf.data.Dataset.from_tensors(tf.ragged.constant([[1, 2, 3], [4], [5, 6, 7, 8]]))
    got = list(windows(ragged, 4, 2).as_numpy_iterator())
    np.testing.assert_array_equal(got, [[1, 2, 3, 4], [3, 4, 5, 6], [5, 6, 7, 8]])


@pytest.mark.parametrize("length,shift,message", [
    (0, None, "length must be a positive int"), (4, 0, "shift must be a positive int"),
    (4, 5, "shift=5 is larger than the window length=4")])
def test_windows_bad_arguments(length, shift, message):
    with pytest.raises(ValueError, match=message):
        windows(tf.data.Dataset.range(3), length, shift)


# ---------------------------------------------------------------------------------- datasets
def test_pretraining_datasets_windows_equal_independent_tokenisation():
    lines = _numbered_corpus(30)
    tokenizer = Tokenizer.build(lines)
    stream = [i for line in lines for i in tokenizer.vocabulary.lookup(line.split())]
    expected = _numpy_windows(stream, 10, 4)
    train, val = pretraining_datasets(tf.data.Dataset.from_tensor_slices(lines), tokenizer,
                                      window=10, shift=4, batch_size=8, shuffle_buffer=0,
                                      lines_per_batch=7)
    assert val is None
    assert train.element_spec == tf.TensorSpec([8, 10], tf.int32)
    got = np.concatenate(list(train.as_numpy_iterator()))
    num_full = len(expected) // 8 * 8  # the last partial batch is dropped
    np.testing.assert_array_equal(got, expected[:num_full])
    assert len(train) == len(expected) // 8  # counted: a known number of batches


def test_without_counting_the_number_of_batches_is_unknown():
    lines = _numbered_corpus(30)
    tokenizer = Tokenizer.build(lines)
    train, val = pretraining_datasets(tf.data.Dataset.from_tensor_slices(lines), tokenizer,
                                      window=10, shift=5, batch_size=8, validation_fraction=0.3,
                                      count_windows=False)
    assert train.cardinality() == tf.data.UNKNOWN_CARDINALITY == val.cardinality()
    counted, counted_val = pretraining_datasets(
        tf.data.Dataset.from_tensor_slices(lines), tokenizer, window=10, shift=5, batch_size=8,
        validation_fraction=0.3)
    batches = list(train.as_numpy_iterator())
    assert len(batches) == len(counted) and len(batches) == len(list(counted))
    num_val_windows = sum(len(b) for b in val.as_numpy_iterator())
    assert len(counted_val) == -(-num_val_windows // 8)


def test_shuffling_is_deterministic_with_the_seed():
    lines = tf.data.Dataset.from_tensor_slices(_numbered_corpus(40))
    tokenizer = Tokenizer.build(lines)

    def epochs(seed, count=2):
        train, _ = pretraining_datasets(lines, tokenizer, window=7, shift=7, batch_size=4,
                                        seed=seed, shuffle_buffer=100)
        return [np.concatenate(list(train.as_numpy_iterator())) for _ in range(count)]

    first, second = epochs(seed=3), epochs(seed=3)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)  # same seed, same batches, epoch by epoch
    assert not np.array_equal(first[0], first[1])  # each epoch reshuffled
    assert not np.array_equal(first[0], epochs(seed=4, count=1)[0])
    # A permutation of the unshuffled windows (40 lines of 7 words = 40 disjoint windows).
    unshuffled = sorted(map(tuple, first[0]))
    assert len(unshuffled) == 40 and unshuffled == sorted(
        map(tuple, _numpy_windows([i for line in _numbered_corpus(40)
                                   for i in tokenizer.vocabulary.lookup(line.split())], 7, 7)))


def test_validation_fraction_holds_out_whole_lines():
    lines = _numbered_corpus(200, words_per_line=5)
    tokenizer = Tokenizer.build(lines)
    train, val = pretraining_datasets(tf.data.Dataset.from_tensor_slices(lines), tokenizer,
                                      window=5, shift=5, batch_size=4, validation_fraction=0.25,
                                      seed=0, shuffle_buffer=0)

    def line_ids(dataset):
        words = tokenizer.ids_to_tokens(np.concatenate(list(dataset.as_numpy_iterator())))
        return {int(w.decode().split("w")[0][1:]) for w in words.numpy().ravel()}

    train_lines, val_lines = line_ids(train), line_ids(val)
    assert not train_lines & val_lines
    assert len(train_lines | val_lines) >= 196  # all lines but the dropped partial batch
    assert 30 <= len(val_lines) <= 70  # ~25% of 200
    # The draw depends on the seed only: same seed, same held-out lines.
    _, val_again = pretraining_datasets(tf.data.Dataset.from_tensor_slices(lines), tokenizer,
                                        window=5, shift=5, batch_size=4,
                                        validation_fraction=0.25, seed=0)
    assert line_ids(val_again) == val_lines


def test_validation_lines_and_files(text_dir):
    tokenizer = Tokenizer.build(text_lines(str(text_dir / "*")))
    train, val = pretraining_datasets(str(text_dir / "*.txt"), tokenizer, window=2, shift=1,
                                      batch_size=3, validation_lines=[text_dir / "c.txt.gz"])
    val_windows = np.concatenate(list(val.as_numpy_iterator()))
    expected = tokenizer.vocabulary.lookup("gzipped line naïve café".split())
    np.testing.assert_array_equal(val_windows, _numpy_windows(expected, 2, 1))
    assert next(iter(train)).shape == (3, 2)


def test_corpus_too_small_for_one_batch():
    lines = tf.data.Dataset.from_tensor_slices(["a b c d e f g h i j"])
    tokenizer = Tokenizer.build(lines)
    for count_windows in (True, False):
        with pytest.raises(ValueError, match=r"too small for one batch: it gives 2 window\(s\) "
                                             r"of 6 units .* batch_size=4 needs 4, i\.e\. at "
                                             r"least 15"):
            pretraining_datasets(lines, tokenizer, window=6, shift=3, batch_size=4,
                                 count_windows=count_windows)
    with pytest.raises(ValueError, match="validation split gives no window of 6 units"):
        pretraining_datasets(lines, tokenizer, window=6, shift=3, batch_size=1,
                             validation_lines=tf.data.Dataset.from_tensor_slices(["a b"]))
    with pytest.raises(ValueError, match="either validation_fraction or validation_lines"):
        pretraining_datasets(lines, tokenizer, window=2, validation_fraction=0.5,
                             validation_lines=lines)
    with pytest.raises(TypeError, match="dataset of scalar strings"):
        pretraining_datasets(tf.data.Dataset.range(3), tokenizer)


@pytest.mark.slow
def test_fit_glomo_pretrainer_on_the_datasets(tmp_path):
    import keras

    from glomo_tf import GlomoPretrainer
    from glomo_tf.data.corpus import check_vocabulary_matches
    lines = tf.data.Dataset.from_tensor_slices(_numbered_corpus(8, words_per_line=4) * 2)
    tokenizer = Tokenizer.build(lines)
    tokenizer.save(tmp_path / "tokenizer")
    train, _ = pretraining_datasets(lines, tokenizer, window=8, shift=8, batch_size=4, seed=1)
    model = GlomoPretrainer.from_sizes(vocabulary_size=len(tokenizer), hidden_dim=8, num_layers=1,
                                       num_heads=2, conv_layers=1, num_positions=2)
    check_vocabulary_matches(Tokenizer.load(tmp_path / "tokenizer"), model)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), run_eagerly=True)  # no tracing: fast
    seen = []
    counter = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: seen.append(1))
    history = model.fit(train, epochs=1, verbose=0, callbacks=[counter], shuffle=False)
    assert np.isfinite(history.history["loss"][0])
    assert len(seen) == len(train) == (16 * 4 // 8) // 4  # every batch, once


# ---------------------------------------------------------------------------------- wikitext-2
@pytest.mark.skipif(not WIKITEXT_VALID.exists(),
                    reason=f"WikiText-2 not found at {WIKITEXT_VALID} (shared test data absent)")
def test_wikitext2_valid_vocabulary_and_windows():
    text = WIKITEXT_VALID.read_text(encoding="utf-8").splitlines()
    words = [w for line in text for w in line.split()]
    lines = text_lines(WIKITEXT_VALID)
    tokenizer = Tokenizer.build(lines, max_size=100_000)
    distinct = set(words) - {"<unk>"}
    assert len(tokenizer) == len(distinct) + 2  # all words fit: WikiText has its own <unk>
    counts = {w: 0 for w in distinct}
    for w in words:
        if w != "<unk>":
            counts[w] += 1
    top = sorted(counts, key=lambda w: (-counts[w], w))[:20]
    assert tokenizer.vocabulary.tokens[2:22] == top
    capped = Tokenizer.build(lines, max_size=1000)
    assert capped.vocabulary.tokens == tokenizer.vocabulary.tokens[:1000]
    train, _ = pretraining_datasets(lines, tokenizer, window=200, shift=100, batch_size=32,
                                    shuffle_buffer=0)
    batches = list(train.as_numpy_iterator())
    num_windows = (len(words) - 200) // 100 + 1
    assert len(batches) == len(train) == num_windows // 32
    np.testing.assert_array_equal(batches[0][0], tokenizer.vocabulary.lookup(words[:200]))
    np.testing.assert_array_equal(batches[-1][-1], tokenizer.vocabulary.lookup(
        words[(len(batches) * 32 - 1) * 100:][:200]))
    assert count_undecodable(WIKITEXT_VALID).replaced_characters == 0
