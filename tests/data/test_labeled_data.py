"""Labelled-text loaders (MR/SUBJ, your own files, tfds) and the seeded / k-fold splits."""

import os

import numpy as np
import pytest

from glomo_tf.data import labeled
from glomo_tf.data import (kfold_splits, load_labeled_text, load_mr, load_sst, load_subj,
                           load_tfds_text, seeded_split, shared_data_dir)
from _paths import REPO

SHARED = os.path.normpath(os.path.join(REPO, os.pardir, "shared",
                                       "data"))
needs_shared = pytest.mark.skipif(not os.path.isdir(os.path.join(SHARED, "mr")),
                                  reason=f"no shared data at {SHARED}")


# ---------------------------------------------------------------------------------- MR / SUBJ
@needs_shared
def test_mr_from_the_shared_folder_counts_and_balance():
    assert shared_data_dir() == SHARED
    texts, labels, class_names = load_mr()
    assert class_names == ["negative", "positive"]
    assert len(texts) == len(labels) == 5331 + 5331
    assert np.bincount(labels).tolist() == [5331, 5331]
    assert labels.dtype == np.int64
    assert all(isinstance(t, str) and t == t.strip() and t for t in texts)
    # The first positive line of the file is the first example of class 1.
    with open(os.path.join(SHARED, "mr", "rt-polarity.pos"), "rb") as handle:
        first = handle.readline().decode("utf-8", "replace").strip()
    assert texts[int(np.argmax(labels == 1))] == first


@needs_shared
@pytest.mark.parametrize("fine, counts, classes", [
    (False, {"train": 6920, "dev": 872, "test": 1821}, 2),
    (True, {"train": 8544, "dev": 1101, "test": 2210}, 5),
])
def test_sst_from_the_shared_folder_official_splits(fine, counts, classes):
    kind = "fine" if fine else "binary"
    for split, count in counts.items():
        texts, labels, class_names = load_sst(split, fine_grained=fine)
        assert len(texts) == len(labels) == count
        assert len(class_names) == classes and set(labels.tolist()) == set(range(classes))
        # The first line of the file, label and sentence split at the first space.
        with open(os.path.join(SHARED, "sst", f"stsa.{kind}.{split}"), encoding="utf-8") as handle:
            label, sentence = handle.readline().strip().split(" ", 1)
        assert (labels[0], texts[0]) == (int(label), sentence)


def test_sst_errors_name_the_file_and_the_line(tmp_path):
    (tmp_path / "stsa.binary.train").write_text("1 a fine film\n7 out of range\n")
    with pytest.raises(ValueError, match=r"stsa.binary.train:2 is not 'LABEL sentence'"):
        load_sst("train", data_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="stsa.binary.dev not found"):
        load_sst("dev", data_dir=tmp_path)
    with pytest.raises(ValueError, match="split must be one of"):
        load_sst("validation", data_dir=tmp_path)


@needs_shared
def test_subj_from_the_shared_folder_counts():
    texts, labels, class_names = load_subj()
    assert class_names == ["objective", "subjective"]
    assert np.bincount(labels).tolist() == [5000, 5000]


def test_mr_in_a_folder_with_latin1_bytes_and_blank_lines(tmp_path):
    (tmp_path / "rt-polarity.pos").write_bytes(b"a caf\xe9 film\n\ngood fun \n")
    (tmp_path / "rt-polarity.neg").write_bytes(b"dull\n")
    texts, labels, class_names = load_mr(tmp_path)
    assert texts == ["dull", "a caf\ufffd film", "good fun"]
    assert labels.tolist() == [0, 1, 1]
    assert class_names == ["negative", "positive"]


def test_missing_files_and_missing_shared_folder_are_clear(tmp_path, monkeypatch):
    (tmp_path / "rt-polarity.pos").write_text("good\n")
    with pytest.raises(FileNotFoundError, match="rt-polarity.neg not found"):
        load_mr(tmp_path)
    with pytest.raises(FileNotFoundError, match="subj.subjective"):
        load_subj(tmp_path)
    monkeypatch.setattr(labeled, "repository_root", lambda: str(tmp_path / "checkout"))
    expected = os.path.join(str(tmp_path), "shared", "data")
    with pytest.raises(FileNotFoundError) as error:
        load_mr()
    assert expected in str(error.value) and "`data_dir`" in str(error.value)


# ---------------------------------------------------------------------------------- own data
def test_tsv_and_csv_with_named_columns(tmp_path):
    tsv = tmp_path / "d.tsv"
    tsv.write_text('id\tsentence\tstars\n1\tgood "film"\tpos\n2\tbad one\tneg\n\n3\tfine\tpos\n',
                   encoding="utf-8")
    texts, labels, class_names = load_labeled_text(tsv, text_column="sentence",
                                                   label_column="stars")
    assert texts == ['good "film"', "bad one", "fine"]
    assert class_names == ["neg", "pos"] and labels.tolist() == [1, 0, 1]
    csv_file = tmp_path / "d.csv"
    csv_file.write_text('text,label\n"good, really",1\nbad,0\n', encoding="utf-8")
    texts, labels, class_names = load_labeled_text(csv_file)
    assert texts == ["good, really", "bad"] and class_names == ["0", "1"]
    assert labels.tolist() == [1, 0]
    semicolons = tmp_path / "d.txt"
    semicolons.write_text("text;label\na;x\nb;y\n")
    assert load_labeled_text(semicolons, delimiter=";")[0] == ["a", "b"]
    with pytest.raises(ValueError, match="column separator"):
        load_labeled_text(semicolons)


def test_directory_of_class_files_and_of_class_folders(tmp_path):
    files = tmp_path / "files"
    files.mkdir()
    (files / "pos.txt").write_text("great film\n\nloved it\n")
    (files / "neg.txt").write_text("awful\n")
    texts, labels, class_names = load_labeled_text(files)
    assert class_names == ["neg", "pos"]
    assert list(zip(texts, labels.tolist())) == [("awful", 0), ("great film", 1), ("loved it", 1)]
    folders = tmp_path / "folders"
    for name, docs in {"spam": ["buy now\nplease", "cheap pills"], "ham": ["hi mum"]}.items():
        (folders / name).mkdir(parents=True)
        for i, doc in enumerate(docs):
            (folders / name / f"{i}.txt").write_text(doc)
    texts, labels, class_names = load_labeled_text(folders)
    assert class_names == ["ham", "spam"]
    assert list(zip(texts, labels.tolist())) == [("hi mum", 0), ("buy now please", 1),
                                                  ("cheap pills", 1)]


def test_own_data_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="No labelled data"):
        load_labeled_text(tmp_path / "nope.tsv")
    table = tmp_path / "t.tsv"
    table.write_text("text\tlabel\nx\ta\ny\tb\n")
    with pytest.raises(ValueError, match=r"no column 'review'.*\['text', 'label'\]"):
        load_labeled_text(table, text_column="review")
    table.write_text("text\tlabel\nx\ta\ny\ta\n")
    with pytest.raises(ValueError, match="single class"):
        load_labeled_text(table)
    table.write_text("text\tlabel\nx\ta\n \tb\n")
    with pytest.raises(ValueError, match="line 3: empty text"):
        load_labeled_text(table)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="one per class"):
        load_labeled_text(empty)
    (empty / "a").mkdir()
    (empty / "b").mkdir()
    (empty / "a" / "1.txt").write_text("text")
    (empty / "b" / "1.txt").write_text("  \n")
    with pytest.raises(ValueError, match="empty text"):
        load_labeled_text(empty)
    one = tmp_path / "one"
    one.mkdir()
    (one / "only.txt").write_text("a\nb\n")
    with pytest.raises(ValueError, match="single class"):
        load_labeled_text(one)


def test_a_test_file_read_with_the_training_classes(tmp_path):
    """``class_names=``: labels index into the given classes; one class is fine in a test file."""
    test = tmp_path / "test.tsv"
    test.write_text("text\tlabel\nfine\tpos\n\nawful\tpos\n")
    texts, labels, class_names = load_labeled_text(test, class_names=("neg", "neutral", "pos"))
    assert texts == ["fine", "awful"]
    assert class_names == ["neg", "neutral", "pos"] and labels.tolist() == [2, 2]
    test.write_text("text\tlabel\nfine\tpos\n\nso-so\tmixed\n")
    with pytest.raises(ValueError) as error:
        load_labeled_text(test, class_names=["neg", "pos"])
    message = str(error.value)
    assert "\n" not in message and str(test) in message and "line 4" in message
    assert "'mixed'" in message and "['neg', 'pos']" in message
    folders = tmp_path / "folders"
    for name in ("pos", "spam"):
        (folders / name).mkdir(parents=True)
        (folders / name / "1.txt").write_text("text")
    with pytest.raises(ValueError, match=r"class 'spam'.*\['neg', 'pos'\]"):
        load_labeled_text(folders, class_names=["neg", "pos"])
    (folders / "spam" / "1.txt").unlink()
    (folders / "spam").rmdir()
    texts, labels, class_names = load_labeled_text(folders, class_names=["neg", "pos"])
    assert labels.tolist() == [1] and class_names == ["neg", "pos"]


def test_a_table_that_is_not_utf8_names_the_line(tmp_path):
    table = tmp_path / "latin1.csv"
    table.write_bytes("\ufefftext,label\r\ngood,pos\r\n".encode("utf-8") + b"caf\xe9,neg\r\n")
    with pytest.raises(ValueError) as error:
        load_labeled_text(table)
    message = str(error.value)
    assert "\n" not in message and str(table) in message and "line 3" in message
    assert "not valid UTF-8" in message and "re-save the file as UTF-8" in message
    # A byte-order mark and CRLF line ends are fine.
    table.write_bytes("\ufefftext,label\r\ngood,pos\r\ncaf\u00e9,neg\r\n".encode("utf-8"))
    texts, labels, class_names = load_labeled_text(table)
    assert texts == ["good", "caf\u00e9"] and class_names == ["neg", "pos"]


# ---------------------------------------------------------------------------------- tfds
@pytest.mark.parametrize("name, split", [("imdb_reviews", "train"), ("glue/sst2", "validation")])
def test_tfds_loader_on_mock_data(name, split):
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=9):
        texts, labels, class_names = load_tfds_text(name, split)
    assert len(texts) == len(labels) == 9
    assert all(isinstance(t, str) for t in texts)
    assert class_names == (["neg", "pos"] if name == "imdb_reviews" else ["negative", "positive"])
    assert labels.dtype == np.int64 and set(labels.tolist()) <= {0, 1}


def test_tfds_loader_names_a_missing_feature():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=3):
        with pytest.raises(ValueError, match="no feature 'review'"):
            load_tfds_text("imdb_reviews", "train", text_key="review")


# ---------------------------------------------------------------------------------- splits
def test_kfold_splits_partition_the_indices():
    folds = kfold_splits(23, folds=5, seed=3)
    assert len(folds) == 5
    tests = np.concatenate([test for _, test in folds])
    assert sorted(tests.tolist()) == list(range(23))
    for train, test in folds:
        assert sorted(np.concatenate([train, test]).tolist()) == list(range(23))
        assert len(test) in (4, 5) and not set(train) & set(test)
    again = kfold_splits(23, folds=5, seed=3)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(folds, again))
    other = kfold_splits(23, folds=5, seed=4)
    assert not all(np.array_equal(a[1], b[1]) for a, b in zip(folds, other))
    with pytest.raises(ValueError):
        kfold_splits(3, folds=5)


def test_seeded_split_is_deterministic_and_disjoint():
    train, test = seeded_split(100, test_fraction=0.1, seed=0)
    assert len(test) == 10 and len(train) == 90
    assert sorted(np.concatenate([train, test]).tolist()) == list(range(100))
    again = seeded_split(100, test_fraction=0.1, seed=0)
    assert np.array_equal(test, again[1]) and np.array_equal(train, again[0])
    assert not np.array_equal(test, seeded_split(100, 0.1, seed=1)[1])
    assert len(seeded_split(5, 0.1)[1]) == 1
    with pytest.raises(ValueError):
        seeded_split(1)


def test_glomo_transfer_sst2_uses_the_official_train_dev_test_files(tmp_path):
    """``--dataset sst2``: every training sentence trains, dev validates, test tests."""
    import json

    from glomo_tf import cli

    sst = tmp_path / "sst"
    sst.mkdir()
    rng = np.random.default_rng(0)
    words = {0: ["dull", "flat", "boring"], 1: ["great", "warm", "funny"]}
    for split, n in (("train", 24), ("dev", 6), ("test", 8)):
        labels = np.arange(n) % 2
        lines = [f"{y} the film is {' '.join(rng.choice(words[y], 3))}" for y in labels]
        (sst / f"stsa.binary.{split}").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert cli.main(["transfer", "--dataset", "sst2", "--data-dir", str(sst), "--variants",
                     "baseline", "--seeds", "0", "--epochs", "1", "--batch-size", "8",
                     "--embedding-dim", "4", "--rnn-units", "2", "--attention-heads", "1",
                     "--verbose", "0", "--output-dir", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    run, = results["runs"]
    assert (run["train_examples"], run["validation_examples"], run["test_examples"]) == (24, 6, 8)
    assert results["config"]["class_names"] == ["negative", "positive"]
    assert "official train/dev/test split" in (out / "results.md").read_text()


@pytest.mark.slow
def test_glomo_transfer_trains_on_tfds_with_its_official_test_split(tmp_path):
    """``--dataset sst2_tfds``: GLUE train for training/validation, GLUE validation as the test set."""
    import json

    from glomo_tf import cli

    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=20):
        assert cli.main(["transfer", "--dataset", "sst2_tfds", "--variants", "baseline", "--seeds",
                         "0", "--epochs", "1", "--batch-size", "9", "--embedding-dim", "4",
                         "--rnn-units", "2", "--attention-heads", "1", "--verbose", "0",
                         "--output-dir", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    run, = results["runs"]
    assert (run["train_examples"], run["validation_examples"], run["test_examples"]) == (18, 2, 20)
    assert results["config"]["class_names"] == ["negative", "positive"]
