"""Sentence pairs for downstream classification: SICK, MRPC, SNLI and your own files.

Every loader returns a :class:`PairTask`: the task's class names and its splits, each a
:class:`PairSplit` ``(first, second, labels)``: the first and the second sentence of every pair (two
lists of str) and an int64 array of class indices into ``class_names``. A validation or test split
that is None has no official counterpart: carve a seeded one from the training split, e.g. with
:func:`glomo_tf.data.labeled.seeded_split`.

* :func:`load_sick`: SICK (Marelli et al., 2014), entailment / neutral / contradiction, with the
  official SemEval-2014 split: TRAIN (4,439 pairs), TRIAL (495, the validation split) and TEST
  (4,906).
* :func:`load_mrpc`: the Microsoft Research Paraphrase Corpus's training file (Dolan & Brockett,
  2005): 4,076 pairs, 2,753 of them paraphrases; no validation or test split.
* :func:`load_snli`: SNLI 1.0 (Bowman et al., 2015) at the scale kept in the shared folder: train =
  the 1% training subset and the development set, test = the official test set, and the extra test
  ``"test_hard"`` (the test pairs a hypothesis-only classifier gets wrong, Gururangan et al., 2018).
  Pairs without a gold label (``"-"``) are dropped.
* :func:`load_pairs_file`: your own pairs, in any of these formats (recognised by the header or, for
  JSON lines, the extension), each optionally gzipped (``.gz``):

  * SICK: tab-separated, columns ``sentence_A``, ``sentence_B``, ``entailment_label``
    (ENTAILMENT / NEUTRAL / CONTRADICTION);
  * MRPC: tab-separated, columns ``Quality`` (0 / 1), ``#1 String``, ``#2 String``;
  * a table with the columns ``sentence1``, ``sentence2`` and ``label`` (or ``gold_label``):
    ``.csv`` comma-separated with the usual quoting, any other extension (``.tsv``, ``.txt``)
    tab-separated without quoting;
  * SNLI's JSON lines (``.jsonl``): one object a line with the keys ``sentence1``, ``sentence2``
    and ``gold_label``.

  Pairs whose ``gold_label`` is ``"-"`` (SNLI's "no majority") are skipped, as are blank lines.

The datasets are read from the shared data folder by default (``sick/``, ``mrpc/`` and ``snli/`` in
:func:`glomo_tf.data.labeled.shared_data_dir`); pass ``data_dir`` for a copy elsewhere. Files are
decoded strictly as UTF-8 (a byte-order mark and CRLF line ends are fine). Every problem in a file
is a one-line ``ValueError`` naming the file, the line (1-based, as an editor counts: the header is
line 1) and the fix, raised while reading, before any training.

Example::

    task = load_sick()
    first, second, labels = task.train          # 4,439 pairs
    task.class_names                            # ['entailment', 'neutral', 'contradiction']

    train, class_names = load_pairs_file("my_train.tsv")
    test, _ = load_pairs_file("my_test.jsonl.gz", class_names=class_names)

    task = load_mrpc()                          # no official validation or test split
    fit, held_out = seeded_split(len(task.train.labels), test_fraction=0.1, seed=0)
"""

import collections
import csv
import dataclasses
import gzip
import json
import os
import zlib
from typing import Optional

import numpy as np

from glomo_tf.data.labeled import _dataset_dir, _decode_utf8_strictly

__all__ = ["PairSplit", "PairTask", "load_mrpc", "load_pairs_file", "load_sick", "load_snli"]

PairSplit = collections.namedtuple("PairSplit", ["first", "second", "labels"])
PairSplit.__doc__ = """Sentence pairs: ``first`` and ``second`` (lists of str) and ``labels`` (an
int64 array of class indices)."""


@dataclasses.dataclass
class PairTask:
    """A sentence-pair classification task and its splits.

    Attributes:
        name: the task's name, e.g. ``"sick"``.
        class_names: list of str; labels index into it.
        train: the training pairs (a :class:`PairSplit`).
        validation: the validation pairs, or None: carve a seeded part of ``train``.
        test: the test pairs, or None: carve a seeded part of ``train``.
        extra_tests: further test sets, name -> :class:`PairSplit` (e.g. ``"test_hard"``).
    """
    name: str
    class_names: list
    train: PairSplit
    validation: Optional[PairSplit] = None
    test: Optional[PairSplit] = None
    extra_tests: dict = dataclasses.field(default_factory=dict)


# A table format: the columns of the two sentences, the accepted label columns (the first found is
# used) and, for formats with a fixed class list, the label in the file -> class name.
_Format = collections.namedtuple("_Format", ["name", "first", "second", "labels", "label_map"])
SICK_FORMAT = _Format("SICK", "sentence_A", "sentence_B", ("entailment_label",),
                      {"ENTAILMENT": "entailment", "NEUTRAL": "neutral",
                       "CONTRADICTION": "contradiction"})
MRPC_FORMAT = _Format("MRPC", "#1 String", "#2 String", ("Quality",),
                      {"0": "not_paraphrase", "1": "paraphrase"})
GENERIC_FORMAT = _Format("generic", "sentence1", "sentence2", ("label", "gold_label"), None)
TABLE_FORMATS = (SICK_FORMAT, MRPC_FORMAT, GENERIC_FORMAT)
JSONL_FORMAT = _Format("SNLI jsonl", "sentence1", "sentence2", ("gold_label",), None)
NO_GOLD_LABEL = "-"  # SNLI: the annotators had no majority; the pair is skipped

SICK_CLASSES = list(SICK_FORMAT.label_map.values())
MRPC_CLASSES = list(MRPC_FORMAT.label_map.values())
SNLI_CLASSES = ["entailment", "neutral", "contradiction"]
SICK_SPLITS = {"TRAIN": "train", "TRIAL": "validation", "TEST": "test"}  # SemEval_set -> split
SNLI_FILES = {"train": ("snli_1.0_train_0.01.jsonl.gz", "snli_1.0_dev.jsonl.gz"),
              "test": ("snli_1.0_test.jsonl.gz",),
              "test_hard": ("snli_1.0_test_hard.jsonl.gz",)}
SEPARATOR_NAMES = {"\t": "tabs", ",": "commas"}

# One pair as read: its line number, sentences, class name and the value of an extra column.
_Pair = collections.namedtuple("_Pair", ["line", "first", "second", "label", "kept"])


# ---------------------------------------------------------------------------------- datasets
def load_sick(data_dir=None):
    """SICK: 9,840 pairs with the official SemEval-2014 split, TRAIN (4,439) as ``train``, TRIAL
    (495) as ``validation`` and TEST (4,906) as ``test``; classes entailment, neutral,
    contradiction (the ``entailment_label`` column).

    Args:
        data_dir: the folder holding ``SICK.txt``; default ``shared_data_dir()/sick``.
    """
    path, = _dataset_files(data_dir, "sick", ("SICK.txt",), "SICK")
    records, _ = _read_pairs(path, SICK_CLASSES, keep_column="SemEval_set")
    parts = {split: [] for split in SICK_SPLITS.values()}
    for record in records:
        if record.kept not in SICK_SPLITS:
            raise ValueError(f"{path!r}, line {record.line}: SemEval_set {record.kept!r} is not "
                             f"one of {list(SICK_SPLITS)}; use the SICK.txt file as distributed.")
        parts[SICK_SPLITS[record.kept]].append(record)
    for name, split in SICK_SPLITS.items():
        if not parts[split]:
            raise ValueError(f"{path!r} has no {name} pair (column SemEval_set); use the SICK.txt "
                             "file as distributed.")
    splits = {split: _split(part, SICK_CLASSES) for split, part in parts.items()}
    return PairTask("sick", list(SICK_CLASSES), **splits)


def load_mrpc(data_dir=None):
    """MRPC's training file: 4,076 pairs, 2,753 paraphrases; classes not_paraphrase (Quality 0)
    and paraphrase (1). ``validation`` and ``test`` are None: carve seeded ones from ``train``.

    Args:
        data_dir: the folder holding ``msr_paraphrase_train.txt`` (UTF-8 with a byte-order mark
            and CRLF line ends, as distributed); default ``shared_data_dir()/mrpc``.
    """
    path, = _dataset_files(data_dir, "mrpc", ("msr_paraphrase_train.txt",), "MRPC")
    records, _ = _read_pairs(path, MRPC_CLASSES)
    return PairTask("mrpc", list(MRPC_CLASSES), train=_split(records, MRPC_CLASSES))


def load_snli(data_dir=None):
    """SNLI 1.0, the parts kept in the shared folder; pairs whose gold label is ``"-"`` dropped.

    ``train`` is the 1% training subset followed by the development set (``validation`` is None:
    carve a seeded part of it), ``test`` the official test set and ``extra_tests["test_hard"]``
    its hard subset. Classes entailment, neutral, contradiction.

    Args:
        data_dir: the folder holding the ``snli_1.0_*.jsonl.gz`` files of :data:`SNLI_FILES`;
            default ``shared_data_dir()/snli``.
    """
    names = [name for files in SNLI_FILES.values() for name in files]
    paths = dict(zip(names, _dataset_files(data_dir, "snli", names, "SNLI")))
    splits = {}
    for split, files in SNLI_FILES.items():
        records = [record for name in files for record in _read_pairs(paths[name], SNLI_CLASSES)[0]]
        splits[split] = _split(records, SNLI_CLASSES)
    return PairTask("snli", list(SNLI_CLASSES), train=splits["train"], test=splits["test"],
                    extra_tests={"test_hard": splits["test_hard"]})


def _dataset_files(data_dir, folder, names, dataset):
    directory = _dataset_dir(data_dir, folder)
    missing = [name for name in names if not os.path.isfile(os.path.join(directory, name))]
    if missing:
        raise FileNotFoundError(
            f"{dataset}: {', '.join(missing)} not found in {directory!r}. Pass the folder holding "
            f"{', '.join(names)} as `data_dir`.")
    return [os.path.join(directory, name) for name in names]


# ---------------------------------------------------------------------------------- your own data
def load_pairs_file(path, class_names=None):
    """Your own sentence pairs, in the SICK, MRPC, sentence1/sentence2 table or SNLI jsonl format
    (see the module's docstring), optionally gzipped.

    Args:
        path: the file; ``.csv`` is comma-separated, ``.jsonl`` JSON lines, anything else
            tab-separated (a ``.gz`` suffix is decompressed first).
        class_names: the classes to expect, e.g. the training file's when reading a test file; a
            label outside them is an error. None: the SICK and MRPC formats' fixed classes, else
            the distinct labels sorted.

    Returns:
        ``(split, class_names)``: a :class:`PairSplit` whose labels index into ``class_names``.

    Raises:
        FileNotFoundError: ``path`` is not a file.
        ValueError: (naming the file and the line) an unknown header or missing column, a line with
            too few columns or that is not a JSON object, an empty sentence or label, an unknown
            label, bytes that are not UTF-8, no pairs, or (without ``class_names``) fewer than two
            classes.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No sentence pairs at {path!r}: pass a .tsv/.csv/.txt table or a "
                                ".jsonl file (optionally .gz) with a pair a line.")
    known = None if class_names is None else list(class_names)
    records, fixed_classes = _read_pairs(path, known)
    if known is None:
        present = sorted({record.label for record in records})
        if len(present) < 2:
            raise ValueError(
                f"{path!r}, lines {records[0].line}-{records[-1].line}: every pair has the label "
                f"{present[0]!r}; a classifier needs at least two classes: add pairs of another.")
        known = fixed_classes or present
    return _split(records, known), known


def _split(records, class_names):
    index = {name: i for i, name in enumerate(class_names)}
    return PairSplit([record.first for record in records], [record.second for record in records],
                     np.asarray([index[record.label] for record in records], np.int64))


def _read_pairs(path, class_names=None, keep_column=None):
    """``(pairs, fixed class names or None)``: every pair of the file at ``path``, checked."""
    lines = _file_lines(path)
    if _extension(path) == ".jsonl":
        records, fixed_classes = _jsonl_pairs(path, lines, class_names), None
    else:
        records, fixed_classes = _table_pairs(path, lines, class_names, keep_column)
    return records, fixed_classes


def _extension(path):
    """The extension of ``path`` in lower case, ``.gz`` skipped."""
    base, extension = os.path.splitext(path.lower())
    return os.path.splitext(base)[1] if extension == ".gz" else extension


def _file_lines(path):
    """The lines of a file (``.gz`` decompressed), decoded strictly as UTF-8, line ends dropped."""
    if path.lower().endswith(".gz"):
        try:
            with gzip.open(path, "rb") as handle:
                raw = handle.read()
        except (gzip.BadGzipFile, EOFError, zlib.error) as error:
            raise ValueError(f"{path!r} cannot be decompressed ({error}); compress it again with "
                             "gzip or pass the file uncompressed.") from None
    else:
        with open(path, "rb") as handle:
            raw = handle.read()
    lines = _decode_utf8_strictly(raw, path).split("\n")
    if lines[-1] == "":
        lines.pop()  # the end of the last line, not a line
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _checked_pair(path, line_number, first, second, label, form, label_column, class_names,
                  kept=None):
    """The pair at ``line_number`` with its label mapped to a class name, after checking that
    neither sentence nor the label is empty and that the label is known."""
    for sentence, which, column in ((first, "first", form.first), (second, "second", form.second)):
        if not sentence:
            raise ValueError(f"{path!r}, line {line_number}: empty {which} sentence ({column!r}); "
                             "write it or delete the line.")
    if not label:
        raise ValueError(f"{path!r}, line {line_number}: empty label ({label_column!r}); give the "
                         "pair its class or delete the line.")
    if form.label_map is not None:
        if label not in form.label_map:
            raise ValueError(f"{path!r}, line {line_number}: unknown {form.name} label {label!r} "
                             f"in column {label_column!r}; the {form.name} labels are "
                             f"{list(form.label_map)}. Use one of them.")
        label = form.label_map[label]
    if class_names is not None and label not in class_names:
        raise ValueError(f"{path!r}, line {line_number}: unknown label {label!r}; the known labels "
                         f"are {class_names} (the training data's). Use one of them.")
    return _Pair(line_number, first, second, label, kept)


def _table_rows(path, lines, delimiter):
    """``(line number, stripped cells)`` of each non-blank row of a table."""
    quoting = csv.QUOTE_MINIMAL if delimiter == "," else csv.QUOTE_NONE
    reader = csv.reader(lines, delimiter=delimiter, quoting=quoting)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            reason = str(error).split(" - ")[0]  # without csv's hint about file modes
            raise ValueError(f"{path!r}, line {reader.line_num}: cannot split the line into "
                             f"columns ({reason}); remove the stray line break or fix the "
                             "quoting.") from None
        if any(cell.strip() for cell in row):
            yield reader.line_num, [cell.strip() for cell in row]


def _table_format(path, line_number, header, delimiter):
    """``(format, label column)`` of the first of :data:`TABLE_FORMATS` whose columns the header
    names."""
    for form in TABLE_FORMATS:
        label_column = next((name for name in form.labels if name in header), None)
        if form.first in header and form.second in header and label_column:
            return form, label_column
    accepted = "; ".join(f"{', '.join((form.first, form.second, ' or '.join(form.labels)))} "
                         f"({form.name})" for form in TABLE_FORMATS)
    raise ValueError(f"{path!r}, line {line_number}: not a known sentence-pair format; its columns "
                     f"are {header}. Name the columns {accepted}, separated by "
                     f"{SEPARATOR_NAMES[delimiter]} (.csv files are comma-separated, others "
                     "tab-separated), or use a .jsonl file.")


def _table_pairs(path, lines, class_names, keep_column):
    delimiter = "," if _extension(path) == ".csv" else "\t"
    rows = _table_rows(path, lines, delimiter)
    header_line, header = next(rows, (None, None))
    if header is None:
        raise ValueError(f"{path!r} is empty: expected a header row naming the columns (line 1).")
    form, label_column = _table_format(path, header_line, header, delimiter)
    columns = [form.first, form.second, label_column] + ([keep_column] if keep_column else [])
    for name in columns[3:]:
        if name not in header:
            raise ValueError(f"{path!r}, line {header_line}: no column {name!r}; its columns are "
                             f"{header}. Use the file as distributed.")
    at = [header.index(name) for name in columns]
    records = []
    for line_number, row in rows:
        if len(row) <= max(at):
            raise ValueError(f"{path!r}, line {line_number}: {len(row)} column(s), expected "
                             f"{len(header)} as in the header; separate the columns with "
                             f"{SEPARATOR_NAMES[delimiter]}.")
        first, second, label = (row[i] for i in at[:3])
        if label_column == "gold_label" and label == NO_GOLD_LABEL:
            continue
        kept = row[at[3]] if keep_column else None
        records.append(_checked_pair(path, line_number, first, second, label, form, label_column,
                                     class_names, kept))
    if not records:
        raise ValueError(f"{path!r} has a header (line {header_line}) but no pairs: add pairs, one "
                         "a line.")
    return records, None if form.label_map is None else list(form.label_map.values())


def _jsonl_pairs(path, lines, class_names):
    keys = (JSONL_FORMAT.first, JSONL_FORMAT.second) + JSONL_FORMAT.labels
    records = []
    for line_number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path!r}, line {line_number}: not JSON ({error.msg}, column "
                             f"{error.colno}); write one JSON object a line.") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path!r}, line {line_number}: a JSON {type(record).__name__}, not "
                             f"an object; write one object a line with the keys {list(keys)}.")
        missing = [key for key in keys if key not in record]
        if missing:
            raise ValueError(f"{path!r}, line {line_number}: missing key(s) "
                             f"{', '.join(map(repr, missing))}; its keys are {sorted(record)}. "
                             f"Give each object the keys {list(keys)}.")
        values = [record[key] for key in keys]
        if not all(isinstance(value, str) for value in values):
            raise ValueError(f"{path!r}, line {line_number}: {list(keys)} must be strings, got "
                             f"{[type(value).__name__ for value in values]}; quote them.")
        first, second, label = (value.strip() for value in values)
        if label == NO_GOLD_LABEL:
            continue
        records.append(_checked_pair(path, line_number, first, second, label, JSONL_FORMAT,
                                     keys[2], class_names))
    if not records:
        raise ValueError(f"{path!r} holds no pair with a gold label other than {NO_GOLD_LABEL!r} "
                         f"(lines 1-{len(lines)}): add pairs, one JSON object a line.")
    return records
