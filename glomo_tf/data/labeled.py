"""Labelled text for downstream classification: MR, SUBJ, your own files, tensorflow-datasets.

Every loader returns ``(texts, labels, class_names)``: a list of str, an int64 array of class
indices into ``class_names`` (a list of str). Splits are index arrays (:func:`seeded_split`,
:func:`kfold_splits`), deterministic given the seed.

* :func:`load_mr` / :func:`load_subj`: the sentence polarity (Pang & Lee, 2005) and subjectivity
  (Pang & Lee, 2004) datasets, one sentence per line. By default they are read from the project's
  shared data folder (``<repository root>/../shared/data``, see :func:`shared_data_dir`); pass
  ``data_dir`` (``glomo transfer --data-dir``) for a copy elsewhere.
* :func:`load_sst`: the Stanford Sentiment Treebank's sentences (SST-2 binary, SST-5 fine-grained)
  with their official train/dev/test splits, read from the same shared folder (``sst/``).
* :func:`load_labeled_text`: your own data, as a TSV/CSV file with a header row, a directory with one
  ``.txt`` file per class (one example per line) or a directory with one sub-directory per class
  (one example per file).
* :func:`load_tfds_text`: a tensorflow-datasets classification set such as ``imdb_reviews`` or
  ``glue/sst2`` (needs ``pip install glomo_tf[datasets]``).

In the MR, SUBJ and SST files and in class directories, bytes that are not valid UTF-8 (the
original MR files are latin-1) are replaced by U+FFFD, as in pretraining, never fatal. A TSV/CSV
file of your own must be UTF-8 (a byte-order mark and CRLF line ends are fine): a line holding
other bytes is an error naming the file and the line, raised before any training.

Example::

    texts, labels, class_names = load_mr()
    train, test = seeded_split(len(texts), test_fraction=0.1, seed=0)
    for train, test in kfold_splits(len(texts), folds=10, seed=0):
        ...
"""

import csv
import os

import numpy as np

from glomo_tf import hparams

__all__ = ["MR_FILES", "SUBJ_FILES", "TFDS_TEXT_DATASETS", "kfold_splits", "load_labeled_text",
           "load_mr", "load_sst", "load_subj", "load_tfds_text", "seeded_split", "shared_data_dir"]

# class name -> file, in class-index order.
MR_FILES = (("negative", "rt-polarity.neg"), ("positive", "rt-polarity.pos"))
SUBJ_FILES = (("objective", "subj.objective"), ("subjective", "subj.subjective"))
# SST sentence files: one ``LABEL sentence`` a line; the class names in label order.
SST_SPLITS = ("train", "dev", "test")
SST_CLASSES = {"binary": ("negative", "positive"),
               "fine": ("very negative", "negative", "neutral", "positive", "very positive")}
# tensorflow-datasets name -> (text feature, label feature, train split, test split).
TFDS_TEXT_DATASETS = {
    "imdb_reviews": ("text", "label", "train", "test"),
    "glue/sst2": ("sentence", "label", "train", "validation"),  # the test split has no labels
}
DELIMITERS = {".tsv": "\t", ".csv": ","}


# ---------------------------------------------------------------------------------- shared data
def repository_root():
    """The directory holding the ``glomo_tf`` package (the repository root of a checkout)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def shared_data_dir():
    """``<repository root>/../shared/data``, where a project checkout keeps MR and SUBJ.

    Raises ``FileNotFoundError`` naming the path when it does not exist: an installed copy of the
    library has no such folder, so pass the data's location instead (``data_dir=...``,
    ``glomo transfer --data-dir DIR``).
    """
    path = os.path.normpath(os.path.join(repository_root(), os.pardir, "shared", "data"))
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"No shared data folder at {path!r}. Download the dataset and pass the folder holding "
            "its files as `data_dir`.")
    return path


def _dataset_dir(data_dir, name):
    return os.path.join(shared_data_dir(), name) if data_dir is None else os.fspath(data_dir)


def _read_lines(path):
    """Non-blank lines of a text file, stripped; invalid UTF-8 replaced by U+FFFD."""
    with open(path, "rb") as handle:
        text = handle.read().decode("utf-8", errors="replace")
    return [line.strip() for line in text.splitlines() if line.strip()]


def _decode_utf8_strictly(raw, path):
    """``raw`` (the bytes of a user's file at ``path``) as text; a leading byte-order mark dropped.

    Raises ``ValueError`` naming the file and the line (1-based, as an editor counts) of the first
    bytes that are not valid UTF-8.
    """
    bom = b"\xef\xbb\xbf" if raw.startswith(b"\xef\xbb\xbf") else b""
    try:
        return raw[len(bom):].decode("utf-8")
    except UnicodeDecodeError as error:
        start = len(bom) + error.start
        line_number = raw.count(b"\n", 0, start) + 1
        bad = raw[start:len(bom) + error.end]
        raise ValueError(f"{path!r}, line {line_number}: bytes that are not valid UTF-8 ({bad!r}); "
                         "re-save the file as UTF-8.") from None


def _load_line_files(directory, files, dataset):
    missing = [name for _, name in files if not os.path.isfile(os.path.join(directory, name))]
    if missing:
        raise FileNotFoundError(
            f"{dataset}: {', '.join(missing)} not found in {directory!r}. Pass the folder holding "
            f"{' and '.join(name for _, name in files)} as `data_dir`.")
    texts, labels = [], []
    for index, (_, name) in enumerate(files):
        lines = _read_lines(os.path.join(directory, name))
        if not lines:
            raise ValueError(f"{dataset}: {os.path.join(directory, name)!r} holds no text.")
        texts += lines
        labels += [index] * len(lines)
    return texts, np.asarray(labels, np.int64), [label for label, _ in files]


def load_mr(data_dir=None):
    """Movie-review polarity (MR): 5,331 negative (label 0) and 5,331 positive (1) snippets.

    Args:
        data_dir: the folder holding ``rt-polarity.pos`` and ``rt-polarity.neg``; default
            ``shared_data_dir()/mr``.
    """
    return _load_line_files(_dataset_dir(data_dir, "mr"), MR_FILES, "MR")


def load_subj(data_dir=None):
    """Subjectivity (SUBJ): 5,000 objective (label 0) and 5,000 subjective (1) sentences.

    Args:
        data_dir: the folder holding ``subj.subjective`` and ``subj.objective``; default
            ``shared_data_dir()/subj``.
    """
    return _load_line_files(_dataset_dir(data_dir, "subj"), SUBJ_FILES, "SUBJ")


def load_sst(split="train", fine_grained=False, data_dir=None):
    """Stanford Sentiment Treebank sentences: SST-2 (6,920 / 872 / 1,821) or SST-5 (8,544 /
    1,101 / 2,210), with the official train/dev/test split.

    Args:
        split: ``"train"``, ``"dev"`` or ``"test"``.
        fine_grained: False for SST-2 (``stsa.binary.*``, labels 0-1), True for SST-5
            (``stsa.fine.*``, labels 0-4).
        data_dir: the folder holding the ``stsa.*`` files; default ``shared_data_dir()/sst``.
    """
    hparams.check_choice("split", split, SST_SPLITS)
    kind = "fine" if fine_grained else "binary"
    name = f"stsa.{kind}.{split}"
    path = os.path.join(_dataset_dir(data_dir, "sst"), name)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"SST: {name} not found in {os.path.dirname(path)!r}. Pass the folder holding the "
            "stsa.* files as `data_dir`.")
    classes = SST_CLASSES[kind]
    texts, labels = [], []
    for number, line in enumerate(_read_lines(path), start=1):
        label, _, text = line.partition(" ")
        if not label.isdigit() or int(label) >= len(classes) or not text.strip():
            raise ValueError(f"SST: {path}:{number} is not 'LABEL sentence' with a label in "
                             f"0..{len(classes) - 1}: {line[:60]!r}.")
        texts.append(text.strip())
        labels.append(int(label))
    return texts, np.asarray(labels, np.int64), list(classes)


# ---------------------------------------------------------------------------------- your own data
def load_labeled_text(path, text_column="text", label_column="label", delimiter=None,
                      class_names=None):
    """Your own labelled texts.

    Args:
        path: one of
            * a ``.tsv`` / ``.csv`` file with a header row naming the columns (any other extension
              needs ``delimiter``); TSV is read without quoting, CSV with the usual quoting;
            * a directory of ``.txt`` files, one per class (class = file name without ``.txt``),
              one example per non-blank line;
            * a directory of sub-directories, one per class (class = sub-directory name), one
              example per file.
        text_column, label_column: header names of the text and label columns (table files).
        delimiter: column separator; by default from the extension (``\\t`` for .tsv, ``,`` for
            .csv).
        class_names: the classes to expect, e.g. those of the training file when reading a test
            file; a label outside them is an error. None: the classes are the labels found.

    Returns:
        ``(texts, labels, class_names)``; class names are ``class_names`` when given, else the
        distinct labels sorted (as strings); labels index into them.

    Raises:
        FileNotFoundError: ``path`` does not exist, or a directory holds no class.
        ValueError: a missing column, a row without text or label, a line that is not UTF-8, a
            class directory/file without examples, a label outside ``class_names``, or (without
            ``class_names``) fewer than two classes.
    """
    path = os.fspath(path)
    known = None if class_names is None else list(class_names)
    if os.path.isdir(path):
        texts, label_names = _read_class_directory(path)
        unknown = [] if known is None else sorted(set(label_names) - set(known))
        if unknown:
            raise ValueError(f"{path!r} holds class {unknown[0]!r} (a .txt file or sub-directory), "
                             f"not one of the known classes {known}; rename it to one of them.")
    elif os.path.isfile(path):
        texts, label_names = _read_table(path, text_column, label_column, delimiter, known)
    else:
        raise FileNotFoundError(f"No labelled data at {path!r}: pass a .tsv/.csv file or a "
                                "directory with one .txt file or sub-directory per class.")
    if known is None:
        known = sorted(set(label_names))
        if len(known) < 2:
            raise ValueError(f"{path!r} holds a single class ({known[0]!r}): a classifier needs "
                             "at least two.")
    class_names = known
    index = {name: i for i, name in enumerate(class_names)}
    return texts, np.asarray([index[name] for name in label_names], np.int64), class_names


def _read_table(path, text_column, label_column, delimiter, class_names=None):
    if delimiter is None:
        extension = os.path.splitext(path)[1].lower()
        if extension not in DELIMITERS:
            raise ValueError(f"Cannot tell the column separator of {path!r} from its extension; "
                             "use .tsv or .csv, or pass the delimiter.")
        delimiter = DELIMITERS[extension]
    with open(path, "rb") as handle:
        text = _decode_utf8_strictly(handle.read(), path)
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    rows = csv.reader(text.splitlines(), delimiter=delimiter, quoting=quoting)
    header = next(rows, None)
    if not header:
        raise ValueError(f"{path!r} is empty: expected a header row naming the columns.")
    header = [name.strip() for name in header]
    missing = [c for c in (text_column, label_column) if c not in header]
    if missing:
        raise ValueError(f"{path!r} has no column {' or '.join(map(repr, missing))}; its columns "
                         f"are {header}. Name the columns with `text_column` and "
                         "`label_column`.")
    text_at, label_at = header.index(text_column), header.index(label_column)
    texts, labels = [], []
    for line_number, row in enumerate(rows, start=2):
        if not any(cell.strip() for cell in row):
            continue  # blank line
        if len(row) <= max(text_at, label_at):
            raise ValueError(f"{path!r}, line {line_number}: {len(row)} columns, expected "
                             f"{len(header)} (separator {delimiter!r}).")
        text_value, label_value = row[text_at].strip(), row[label_at].strip()
        if not text_value:
            raise ValueError(f"{path!r}, line {line_number}: empty text.")
        if not label_value:
            raise ValueError(f"{path!r}, line {line_number}: empty label.")
        if class_names is not None and label_value not in class_names:
            raise ValueError(f"{path!r}, line {line_number}: unknown label {label_value!r}; the "
                             f"known labels are {class_names}. Use one of them.")
        texts.append(text_value)
        labels.append(label_value)
    if not texts:
        raise ValueError(f"{path!r} has a header but no examples.")
    return texts, labels


def _read_class_directory(path):
    entries = sorted(name for name in os.listdir(path) if not name.startswith("."))
    subdirectories = [name for name in entries if os.path.isdir(os.path.join(path, name))]
    text_files = [name for name in entries
                  if name.endswith(".txt") and os.path.isfile(os.path.join(path, name))]
    if subdirectories and text_files:
        raise ValueError(f"{path!r} mixes .txt files and sub-directories: use one .txt file per "
                         "class or one sub-directory per class, not both.")
    texts, labels = [], []
    if text_files:
        for name in text_files:
            lines = _read_lines(os.path.join(path, name))
            if not lines:
                raise ValueError(f"{os.path.join(path, name)!r} holds no example (empty text).")
            texts += lines
            labels += [name[:-len(".txt")]] * len(lines)
    elif subdirectories:
        for name in subdirectories:
            directory = os.path.join(path, name)
            files = sorted(f for f in os.listdir(directory)
                           if not f.startswith(".") and os.path.isfile(os.path.join(directory, f)))
            if not files:
                raise ValueError(f"Class directory {directory!r} holds no file.")
            for file_name in files:
                with open(os.path.join(directory, file_name), "rb") as handle:
                    text = handle.read().decode("utf-8", errors="replace").strip()
                if not text:
                    raise ValueError(f"{os.path.join(directory, file_name)!r}: empty text.")
                texts.append(" ".join(text.split()))
                labels.append(name)
    else:
        raise FileNotFoundError(f"{path!r} holds no .txt file and no sub-directory: expected one "
                                "per class.")
    return texts, labels


# ---------------------------------------------------------------------------------- tfds
def load_tfds_text(name, split, text_key=None, label_key="label", data_dir=None, download=True):
    """A tensorflow-datasets text classification split, read into memory.

    Args:
        name: e.g. ``"imdb_reviews"`` (keys ``text``/``label``) or ``"glue/sst2"``
            (``sentence``/``label``).
        split: tfds split, e.g. ``"train"``, ``"test"``, ``"train[:10%]"``.
        text_key, label_key: the features holding text and class; ``text_key`` defaults to the
            known one of the datasets in :data:`TFDS_TEXT_DATASETS`.
        data_dir: tfds data directory (tfds' default when None).
        download: let tfds download and prepare the data when missing.

    Returns:
        ``(texts, labels, class_names)``; class names from the label feature's names.
    """
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise ImportError(
            "Reading tensorflow-datasets data needs tensorflow-datasets: pip install "
            "glomo_tf[datasets]  (or: pip install tensorflow-datasets==4.9.10).") from None
    if text_key is None:
        if name not in TFDS_TEXT_DATASETS:
            raise ValueError(f"Say which feature of {name!r} holds the text: text_key=...")
        text_key = TFDS_TEXT_DATASETS[name][0]
    try:
        dataset, info = tfds.load(name, split=split, data_dir=data_dir, download=download,
                                  as_supervised=False, with_info=True, shuffle_files=False)
    except tfds.core.registered.DatasetNotFoundError:
        raise ValueError(f"tensorflow-datasets has no dataset named {name!r}.") from None
    features = dataset.element_spec
    for key in (text_key, label_key):
        if key not in features:
            raise ValueError(f"{name!r} has no feature {key!r}; its features are "
                             f"{sorted(features)}.")
    texts, labels = [], []
    for example in dataset.as_numpy_iterator():
        texts.append(example[text_key].decode("utf-8", errors="replace"))
        labels.append(int(example[label_key]))
    labels = np.asarray(labels, np.int64)
    if labels.size and labels.min() < 0:
        raise ValueError(f"Split {split!r} of {name!r} has no labels (label -1); use a labelled "
                         "split.")
    label_feature = info.features[label_key]
    class_names = list(getattr(label_feature, "names", None) or
                       [str(i) for i in range(int(labels.max()) + 1 if labels.size else 0)])
    return texts, labels, class_names


# ---------------------------------------------------------------------------------- splits
def seeded_split(n, test_fraction=0.1, seed=0):
    """``(train, test)`` sorted index arrays partitioning ``range(n)``; ``test`` holds
    ``round(n * test_fraction)`` (at least 1) indices drawn with ``seed``."""
    if n < 2:
        raise ValueError(f"Cannot split {n} example(s) into a training and a test part.")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}.")
    size = min(n - 1, max(1, int(round(n * test_fraction))))
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[size:]), np.sort(order[:size])


def kfold_splits(n, folds=10, seed=0):
    """``folds`` pairs ``(train, test)`` of sorted index arrays: the test parts partition
    ``range(n)`` (a permutation drawn with ``seed`` cut into near-equal folds)."""
    if folds < 2:
        raise ValueError(f"folds must be >= 2, got {folds}.")
    if n < folds:
        raise ValueError(f"Cannot cut {n} examples into {folds} folds.")
    order = np.random.default_rng(seed).permutation(n)
    parts = np.array_split(order, folds)
    return [(np.sort(np.concatenate(parts[:i] + parts[i + 1:])), np.sort(part))
            for i, part in enumerate(parts)]
