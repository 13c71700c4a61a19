"""Sentence-pair loaders: SICK, MRPC and SNLI from the shared folder, your own pair files in every
format, and an error naming the file and the line for every problem a file can have."""

import csv
import gzip
import json
import os

import numpy as np
import pytest

from glomo_tf.data import labeled
from glomo_tf.data.pairs import (PairSplit, PairTask, load_mrpc, load_pairs_file, load_sick,
                                 load_snli)


def _shared_data_dir():
    try:
        return labeled.shared_data_dir()
    except FileNotFoundError:
        return None


SHARED = _shared_data_dir()
needs_shared = pytest.mark.skipif(
    SHARED is None, reason="no shared data folder (../shared/data next to the repository root)")
NLI = ["entailment", "neutral", "contradiction"]


def assert_error(call, path, line, *fragments, error=ValueError):
    """``call()`` raises a one-line ``error`` naming ``path``, ``line N`` and every fragment."""
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert "\n" not in message, message
    assert str(path) in message, message
    if line is not None:
        assert f"line {line}" in message or f"lines {line}" in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def write(path, text, compress=False):
    """Write ``text`` as UTF-8 (gzipped when ``compress``); returns the path."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    if compress:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def jsonl(*records):
    return "".join((json.dumps(r) if isinstance(r, dict) else r) + "\n" for r in records)


def snli(first, second, label):
    return {"sentence1": first, "sentence2": second, "gold_label": label, "pairID": "x"}


# ---------------------------------------------------------------------------------- shared data
def _read_tsv(path, encoding="utf-8"):
    with open(path, encoding=encoding, newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))


def _read_jsonl_gz(path):
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@needs_shared
def test_sick_official_split_counts_and_labels():
    task = load_sick()
    assert isinstance(task, PairTask) and task.name == "sick" and task.class_names == NLI
    assert task.extra_tests == {}
    rows = _read_tsv(os.path.join(SHARED, "sick", "SICK.txt"))
    for split, semeval, count in (("train", "TRAIN", 4439), ("validation", "TRIAL", 495),
                                  ("test", "TEST", 4906)):
        pairs = getattr(task, split)
        expected = [row for row in rows if row["SemEval_set"] == semeval]
        assert len(expected) == count
        assert len(pairs.first) == len(pairs.second) == len(pairs.labels) == count
        assert pairs.labels.dtype == np.int64
        counts = np.bincount(pairs.labels, minlength=3).tolist()
        assert counts == [sum(row["entailment_label"] == name.upper() for row in expected)
                          for name in NLI]
        assert (pairs.first[0], pairs.second[0]) == (expected[0]["sentence_A"],
                                                      expected[0]["sentence_B"])
        assert NLI[pairs.labels[-1]] == expected[-1]["entailment_label"].lower()


@needs_shared
def test_mrpc_training_file_counts():
    task = load_mrpc()
    assert task.name == "mrpc" and task.class_names == ["not_paraphrase", "paraphrase"]
    assert task.validation is None and task.test is None and task.extra_tests == {}
    rows = _read_tsv(os.path.join(SHARED, "mrpc", "msr_paraphrase_train.txt"), "utf-8-sig")
    assert len(task.train.first) == len(rows) == 4076
    assert int(task.train.labels.sum()) == sum(row["Quality"] == "1" for row in rows) == 2753
    assert (task.train.first[0], task.train.second[-1]) == (rows[0]["#1 String"],
                                                            rows[-1]["#2 String"])
    assert not any(s.startswith("\ufeff") or s.endswith("\r")
                   for s in task.train.first + task.train.second)


@needs_shared
def test_snli_train_dev_test_and_hard_subset():
    task = load_snli()
    assert task.name == "snli" and task.class_names == NLI and task.validation is None
    folder = os.path.join(SHARED, "snli")

    def gold(*names):
        return [r for name in names for r in _read_jsonl_gz(os.path.join(folder, name))
                if r["gold_label"] != "-"]

    expected = {"train": gold("snli_1.0_train_0.01.jsonl.gz", "snli_1.0_dev.jsonl.gz"),
                "test": gold("snli_1.0_test.jsonl.gz"),
                "test_hard": gold("snli_1.0_test_hard.jsonl.gz")}
    # The data README's counts: 5,502 training pairs (4 without a gold label), 9,842 dev and
    # 9,824 test pairs with one, 3,261 hard ones.
    assert {name: len(rows) for name, rows in expected.items()} == {
        "train": 5498 + 9842, "test": 9824, "test_hard": 3261}
    assert set(task.extra_tests) == {"test_hard"}
    splits = {"train": task.train, "test": task.test, "test_hard": task.extra_tests["test_hard"]}
    for name, rows in expected.items():
        pairs = splits[name]
        assert len(pairs.first) == len(pairs.second) == len(pairs.labels) == len(rows)
        assert [NLI[i] for i in pairs.labels] == [r["gold_label"] for r in rows]
        assert pairs.first[0] == rows[0]["sentence1"].strip()
        assert pairs.second[-1] == rows[-1]["sentence2"].strip()
    # The hard pairs are test pairs.
    test_pairs = set(zip(task.test.first, task.test.second))
    assert all(pair in test_pairs for pair in zip(*splits["test_hard"][:2]))


@needs_shared
def test_the_shared_files_read_as_your_own():
    split, class_names = load_pairs_file(os.path.join(SHARED, "sick", "SICK.txt"))
    assert class_names == NLI and len(split.first) == 4439 + 495 + 4906
    split, class_names = load_pairs_file(os.path.join(SHARED, "mrpc", "msr_paraphrase_train.txt"))
    assert class_names == ["not_paraphrase", "paraphrase"] and int(split.labels.sum()) == 2753
    split, class_names = load_pairs_file(
        os.path.join(SHARED, "snli", "snli_1.0_test_hard.jsonl.gz"))
    assert class_names == sorted(NLI) and len(split.first) == 3261


# ---------------------------------------------------------------------------------- your own files
@pytest.mark.parametrize("compress", [False, True])
def test_sick_format(tmp_path, compress):
    path = write(tmp_path / "SICK.txt",
                 "pair_ID\tsentence_A\tsentence_B\tentailment_label\trelatedness_score\r\n"
                 "1\tA dog runs\tAn animal runs\tENTAILMENT\t4.5\r\n"
                 "2\tA cat sleeps \t A dog runs\tNEUTRAL\t2\r\n"
                 "\r\n"
                 "3\tA man sings\tNobody sings\tCONTRADICTION\t3\r\n", compress)
    split, class_names = load_pairs_file(path)
    assert isinstance(split, PairSplit) and class_names == NLI
    assert split.first == ["A dog runs", "A cat sleeps", "A man sings"]
    assert split.second == ["An animal runs", "A dog runs", "Nobody sings"]
    assert split.labels.tolist() == [0, 1, 2] and split.labels.dtype == np.int64


@pytest.mark.parametrize("compress", [False, True])
def test_mrpc_format_with_byte_order_mark_and_crlf(tmp_path, compress):
    text = ("\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\r\n"
            '1\t11\t12\tHe said "yes".\tHe agreed.\r\n'
            "0\t13\t14\tIt rained — a lot.\tThe sun shone.\r\n")
    split, class_names = load_pairs_file(write(tmp_path / "mrpc.txt", text, compress))
    assert class_names == ["not_paraphrase", "paraphrase"]
    assert split.first == ['He said "yes".', "It rained — a lot."]
    assert split.second == ["He agreed.", "The sun shone."]
    assert split.labels.tolist() == [1, 0]


def test_mrpc_format_of_a_single_class_keeps_its_classes_when_a_test_file(tmp_path):
    path = write(tmp_path / "mrpc_test.txt",
                 "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\ta b\tb a\n")
    split, class_names = load_pairs_file(path, class_names=["not_paraphrase", "paraphrase"])
    assert class_names == ["not_paraphrase", "paraphrase"] and split.labels.tolist() == [1]


@pytest.mark.parametrize("compress", [False, True])
def test_generic_tsv_without_quoting_and_gold_label_dashes(tmp_path, compress):
    path = write(tmp_path / "pairs.tsv",
                 'gold_label\tsentence1\tsentence2\tid\n'
                 'yes\t"Quoted" start\tplain, with comma\t1\n'
                 '\n'
                 '-\tno majority\there\t2\n'
                 'no\tx\ty\t3\n', compress)
    split, class_names = load_pairs_file(path)
    assert class_names == ["no", "yes"]
    assert split.first == ['"Quoted" start', "x"] and split.second == ["plain, with comma", "y"]
    assert split.labels.tolist() == [1, 0]


@pytest.mark.parametrize("compress", [False, True])
def test_generic_csv_with_quoted_commas(tmp_path, compress):
    path = write(tmp_path / "pairs.csv",
                 'sentence1,sentence2,label\n'
                 '"One, two",three,b\n'
                 'four,"five ""quoted""",a\n', compress)
    split, class_names = load_pairs_file(path)
    assert class_names == ["a", "b"]
    assert split.first == ["One, two", "four"]
    assert split.second == ["three", 'five "quoted"']
    assert split.labels.tolist() == [1, 0]


@pytest.mark.parametrize("compress", [False, True])
def test_snli_jsonl(tmp_path, compress):
    path = write(tmp_path / "snli.jsonl",
                 jsonl(snli("A man.", "A person. ", "entailment"), "",
                       snli("A dog.", "A cat.", "-"),
                       snli("Kids play.", "Kids sleep.", "contradiction")), compress)
    split, class_names = load_pairs_file(path)
    assert class_names == ["contradiction", "entailment"]
    assert split.first == ["A man.", "Kids play."] and split.second == ["A person.", "Kids sleep."]
    assert split.labels.tolist() == [1, 0]


def test_a_test_file_uses_the_training_classes(tmp_path):
    train = write(tmp_path / "train.tsv", "sentence1\tsentence2\tlabel\na\tb\tx\nc\td\ty\n"
                                          "e\tf\tz\n")
    test = write(tmp_path / "test.jsonl", jsonl(snli("p", "q", "z")))
    _, class_names = load_pairs_file(train)
    split, test_classes = load_pairs_file(test, class_names=class_names)
    assert test_classes == ["x", "y", "z"] and split.labels.tolist() == [2]
    # SICK's labels map to its class names, which index into the given classes.
    sick = write(tmp_path / "sick.tsv", "sentence_A\tsentence_B\tentailment_label\n"
                                        "a\tb\tNEUTRAL\n")
    split, names = load_pairs_file(sick, class_names=sorted(NLI))
    assert names == sorted(NLI) and split.labels.tolist() == [2]
    unknown = write(tmp_path / "unknown.csv", "sentence1,sentence2,label\na,b,x\nc,d,w\n")
    assert_error(lambda: load_pairs_file(unknown, class_names=class_names), unknown, 3,
                 "unknown label 'w'", "['x', 'y', 'z']")


# ---------------------------------------------------------------------------------- errors
def test_unknown_format_lists_the_columns_found_and_accepted(tmp_path):
    path = write(tmp_path / "odd.tsv", "premise\thypothesis\tlabel\na\tb\tc\n")
    message = assert_error(lambda: load_pairs_file(path), path, 1,
                           "['premise', 'hypothesis', 'label']", "sentence_A", "#1 String",
                           "sentence1", "gold_label")
    assert "tabs" in message
    # A missing label column, and a tab-separated header in a .csv file.
    path = write(tmp_path / "nolabel.csv", "sentence1,sentence2\na,b\n")
    assert_error(lambda: load_pairs_file(path), path, 1, "['sentence1', 'sentence2']", "label")
    path = write(tmp_path / "tabs.csv", "sentence1\tsentence2\tlabel\na\tb\tc\n")
    assert_error(lambda: load_pairs_file(path), path, 1, "commas")


def test_too_few_columns(tmp_path):
    path = write(tmp_path / "short.tsv", "sentence1\tsentence2\tlabel\na\tb\tx\n\nc d y\n")
    assert_error(lambda: load_pairs_file(path), path, 4, "1 column(s), expected 3", "tabs")


@pytest.mark.parametrize("name, text, line, fragment", [
    ("empty_first.tsv", "sentence1\tsentence2\tlabel\na\tb\tx\n \tb\ty\n", 3,
     "empty first sentence ('sentence1')"),
    ("empty_second.txt", "sentence_A\tsentence_B\tentailment_label\na\t\tNEUTRAL\n", 2,
     "empty second sentence ('sentence_B')"),
    ("empty_label.csv", 'sentence1,sentence2,label\na,b,x\nc,d,""\n', 3, "empty label ('label')"),
    ("sick_label.txt", "sentence_A\tsentence_B\tentailment_label\na\tb\tMAYBE\n", 2,
     "unknown SICK label 'MAYBE'"),
    ("mrpc_label.txt", "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n2\t1\t2\ta\tb\n", 2,
     "unknown MRPC label '2'"),
    ("empty_json.jsonl", jsonl(snli("a", "b", "neutral"), snli("a", "", "neutral")), 2,
     "empty second sentence ('sentence2')"),
    ("empty_json_label.jsonl", jsonl(snli("a", "b", "neutral"), snli("a", "b", " ")), 2,
     "empty label ('gold_label')"),
])
def test_empty_and_unknown_fields(tmp_path, name, text, line, fragment):
    path = write(tmp_path / name, text)
    assert_error(lambda: load_pairs_file(path), path, line, fragment)


@pytest.mark.parametrize("compress", [False, True])
def test_bytes_that_are_not_utf8(tmp_path, compress):
    raw = ("\ufeffsentence1\tsentence2\tlabel\r\na\tb\tx\r\n".encode("utf-8")
           + b"caf\xe9\tb\ty\r\n")
    path = write(tmp_path / "latin1.tsv", raw, compress)
    assert_error(lambda: load_pairs_file(path), path, 3, "not valid UTF-8", "re-save")
    path = write(tmp_path / "latin1.jsonl", jsonl(snli("a", "b", "x")).encode() + b'{"\xff": 1}\n')
    assert_error(lambda: load_pairs_file(path), path, 2, "not valid UTF-8")


def test_no_pairs_and_empty_files(tmp_path):
    path = write(tmp_path / "header.tsv", "sentence1\tsentence2\tlabel\n\n\n")
    assert_error(lambda: load_pairs_file(path), path, 1, "header", "no pairs")
    path = write(tmp_path / "dashes.tsv", "sentence1\tsentence2\tgold_label\na\tb\t-\n")
    assert_error(lambda: load_pairs_file(path), path, 1, "no pairs")
    path = write(tmp_path / "empty.csv", "\n")
    assert_error(lambda: load_pairs_file(path), path, 1, "empty", "header")
    path = write(tmp_path / "dashes.jsonl", jsonl(snli("a", "b", "-"), snli("c", "d", "-")))
    assert_error(lambda: load_pairs_file(path), path, "1-2", "no pair with a gold label")


def test_a_single_class_is_an_error_in_a_training_file(tmp_path):
    path = write(tmp_path / "one.tsv", "sentence1\tsentence2\tlabel\na\tb\tx\n\nc\td\tx\n")
    assert_error(lambda: load_pairs_file(path), path, "2-4", "'x'", "at least two classes")
    path = write(tmp_path / "one.txt", "sentence_A\tsentence_B\tentailment_label\na\tb\tNEUTRAL\n")
    assert_error(lambda: load_pairs_file(path), path, "2-2", "'neutral'", "at least two")
    split, names = load_pairs_file(path, class_names=NLI)  # fine in a test file
    assert names == NLI and split.labels.tolist() == [1]


def test_jsonl_errors(tmp_path):
    path = write(tmp_path / "broken.jsonl", jsonl(snli("a", "b", "x"), "{not json"))
    assert_error(lambda: load_pairs_file(path), path, 2, "not JSON", "one JSON object a line")
    path = write(tmp_path / "list.jsonl", jsonl(snli("a", "b", "x"), "[1, 2]"))
    assert_error(lambda: load_pairs_file(path), path, 2, "list, not an object")
    path = write(tmp_path / "keys.jsonl", jsonl({"premise": "a", "hypothesis": "b", "label": 0}))
    assert_error(lambda: load_pairs_file(path), path, 1, "missing key(s) 'sentence1', "
                 "'sentence2', 'gold_label'", "['hypothesis', 'label', 'premise']")
    path = write(tmp_path / "types.jsonl", jsonl(snli("a", "b", "x"), snli("a", "b", 1)))
    assert_error(lambda: load_pairs_file(path), path, 2, "must be strings")


def test_csv_quoting_error_and_bad_gzip_and_missing_file(tmp_path):
    path = write(tmp_path / "return.csv", "sentence1,sentence2,label\na,b,x\nc\rc,d,y\n")
    assert_error(lambda: load_pairs_file(path), path, 3, "cannot split the line into columns",
                 "stray line break")
    path = tmp_path / "fake.tsv.gz"
    path.write_bytes(b"not gzip at all")
    assert_error(lambda: load_pairs_file(path), path, None, "cannot be decompressed")
    truncated = tmp_path / "cut.jsonl.gz"
    truncated.write_bytes(gzip.compress(jsonl(snli("a", "b", "x")).encode())[:-12])
    assert_error(lambda: load_pairs_file(truncated), truncated, None, "cannot be decompressed")
    missing = tmp_path / "nope.tsv"
    assert_error(lambda: load_pairs_file(missing), missing, None, "No sentence pairs",
                 error=FileNotFoundError)


# ---------------------------------------------------------------------------------- dataset folders
def test_dataset_loaders_on_small_folders(tmp_path):
    sick = tmp_path / "sick"
    sick.mkdir()
    rows = [("TRAIN", "ENTAILMENT"), ("TRAIN", "CONTRADICTION"), ("TRIAL", "NEUTRAL"),
            ("TEST", "NEUTRAL"), ("TEST", "ENTAILMENT")]
    write(sick / "SICK.txt", "pair_ID\tsentence_A\tsentence_B\tentailment_label\tSemEval_set\r\n"
          + "".join(f"{i}\ts{i}\tt{i}\t{label}\t{split}\r\n"
                    for i, (split, label) in enumerate(rows)))
    task = load_sick(sick)
    assert task.train.first == ["s0", "s1"] and task.train.labels.tolist() == [0, 2]
    assert task.validation.second == ["t2"] and task.test.labels.tolist() == [1, 0]
    write(sick / "SICK.txt", "sentence_A\tsentence_B\tentailment_label\tSemEval_set\n"
          "a\tb\tNEUTRAL\tTRAIN\na\tb\tNEUTRAL\tDEV\n")
    assert_error(lambda: load_sick(sick), sick / "SICK.txt", 3, "SemEval_set 'DEV'")
    write(sick / "SICK.txt", "sentence_A\tsentence_B\tentailment_label\na\tb\tNEUTRAL\n")
    assert_error(lambda: load_sick(sick), sick / "SICK.txt", 1, "no column 'SemEval_set'")

    mrpc = tmp_path / "mrpc"
    mrpc.mkdir()
    write(mrpc / "msr_paraphrase_train.txt", "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String"
          "\r\n1\t1\t2\ta\tb\r\n0\t3\t4\tc\td\r\n")
    task = load_mrpc(mrpc)
    assert task.train.labels.tolist() == [1, 0] and task.test is None

    folder = tmp_path / "snli"
    folder.mkdir()
    for name, labels in (("train_0.01", ["entailment", "-"]), ("dev", ["neutral"]),
                         ("test", ["contradiction", "-", "entailment"]),
                         ("test_hard", ["entailment"])):
        write(folder / f"snli_1.0_{name}.jsonl",
              jsonl(*(snli(f"{name}{i}", "h", label) for i, label in enumerate(labels))), True)
    task = load_snli(folder)
    assert task.train.first == ["train_0.010", "dev0"] and task.train.labels.tolist() == [0, 1]
    assert task.test.labels.tolist() == [2, 0] and task.validation is None
    assert task.extra_tests["test_hard"].first == ["test_hard0"]


def test_missing_dataset_files_name_the_folder_and_the_fix(tmp_path, monkeypatch):
    for loader, name in ((load_sick, "SICK.txt"), (load_mrpc, "msr_paraphrase_train.txt"),
                         (load_snli, "snli_1.0_test_hard.jsonl.gz")):
        assert_error(lambda: loader(tmp_path), tmp_path, None, name, "`data_dir`",
                     error=FileNotFoundError)
    monkeypatch.setattr(labeled, "repository_root", lambda: str(tmp_path / "checkout"))
    assert_error(load_sick, os.path.join(str(tmp_path), "shared", "data"), None, "`data_dir`",
                 error=FileNotFoundError)
