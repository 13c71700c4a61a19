"""Downstream experiments: text classifiers with and without transferred GLoMo graphs.

:func:`run_transfer` trains the classifier variants of :func:`glomo_tf.models.build_classifier`
(``baseline``, ``glomo_embeddings``, ``glomo_rnn``, ``uniform``, ``uniform_rnn``, and the related
models ``cn3`` and ``shared_private``) on a labelled dataset for several seeds, with
``model.fit`` (early stopping on validation accuracy, best weights restored), and writes the test
accuracy of every run and the paired comparisons (:mod:`glomo_tf.evaluation`) to
``results.json`` and ``results.md``. It is what ``glomo transfer`` runs; :class:`TransferConfig`
holds its settings.

Splits: ``split="seeded"`` (default) holds out a seeded 10% test set and carves a 10% validation
set from the rest; ``split="kfold"`` runs every fold (the seed shuffles the folds and draws the
validation set; a seed's accuracy is the mean over its folds). ``sst2``/``sst5`` use the official
train/dev/test files, ``imdb`` and ``sst2_tfds`` tensorflow-datasets' official test sets.
"""

import dataclasses
import functools
import os
import time
from typing import Optional

import numpy as np

from glomo_tf import evaluation, hparams
from glomo_tf.data.batching import bucketed_training_batches, encode, length_sorted_batches
from glomo_tf.experiments.settings import precision_setting, setting, verbose_setting
from glomo_tf.precision import check_precision, precision_scope

# Sentence-pair tasks (glomo_tf.models.build_pair_classifier; glomo_tf.data.pairs).
PAIR_DATASETS = ("sick", "mrpc", "snli", "pairs")
# Reading comprehension (glomo_tf.experiments.reading, glomo_tf.models.build_reader,
# glomo_tf.data.squad).
READING_DATASETS = ("squad",)
DATASETS = (("mr", "subj", "sst2", "sst5", "file", "listops", "imdb", "sst2_tfds") + PAIR_DATASETS
            + READING_DATASETS)
# Datasets read from --file (and an optional --test-file).
FILE_DATASETS = ("file", "listops", "pairs")
# Datasets with a default file of their own that --file / --test-file may replace.
OPTIONAL_FILE_DATASETS = READING_DATASETS
TFDS_NAMES = {"imdb": "imdb_reviews", "sst2_tfds": "glue/sst2"}
# Datasets whose texts carry their structure: the gold variants' graphs (ListOps' trees).
GOLD_DATASETS = ("listops",)
# Datasets read from files with an official split: train for training, dev for validation.
SST_DATASETS = {"sst2": False, "sst5": True}  # name -> fine_grained
SPLITS = ("seeded", "kfold")
INIT_EMBEDDINGS = (None, "predictor")  # --init-embeddings
VALIDATION_FRACTION = 0.1
TEST_FRACTION = 0.1


@dataclasses.dataclass(kw_only=True)
class TransferConfig:
    """The settings of one downstream experiment (``glomo transfer``'s flags, one field each).

    ``model`` and ``tokenizer`` are a pretrained graph predictor's ``.keras`` file and its
    tokenizer directory; without them only ``baseline``, ``uniform``, ``uniform_rnn``, ``cn3`` and
    ``shared_private`` can run (the tokenizer is then built from each split's training texts).

    ``graph_cache`` (default False): the GLoMo variants (frozen predictor) read the predictor's
    graphs computed once per sentence (:mod:`glomo_tf.data.graph_cache`; dense graphs as the
    candidate matrices their mixtures read) instead of running it on every batch of every
    epoch. Outputs and gradients agree with the online path to float round-off (about 1e-7: the
    graphs come from batches of other shapes), not bit for bit, and a trained run amplifies
    round-off like any change of batch shapes: off by default so that results stay comparable
    with earlier runs. ``top_k``: None (dense graphs) or the sources kept per receiving unit
    (:func:`glomo_tf.ops.top_k_sources`), in the cache and in the GLoMo layers alike. ``graph_temperature``: None (the predictor's graphs as
    they are) or a float above 0 that sharpens (below 1) or flattens (above 1) them
    (:func:`glomo_tf.ops.sharpen_graphs`), in the cache and the GLoMo layers alike.
    ``init_embeddings``: None (the models' word embeddings start random) or ``"predictor"``: every
    variant's, the baseline's included, start from the predictor's embedding table (the same ids;
    ``embedding_dim`` must be the predictor's width) and are trained from there, as the paper's
    models all start from GloVe.

    ``resume`` (default False): ``output_dir`` may already hold a ``results.json`` of the same
    settings (seeds and variants aside); its runs are kept and only the missing (variant, seed,
    fold) runs are trained, each seeded as in a run from scratch, so a long comparison can be
    interrupted and continued, or extended with more seeds. Without it an ``output_dir`` that
    already holds runs is refused rather than overwritten.

    ``save_models`` (default False): each trained model is saved as
    ``output_dir/models/<variant>-seed<seed>[-fold<k>].keras`` (a GLoMo variant's file holds
    its frozen predictor too), to be evaluated later on other data.
    """

    model: Optional[str] = setting(None, "a pretrained graph predictor's .keras file",
                                   command_line=False)
    tokenizer: Optional[str] = setting(None, "its tokenizer directory", command_line=False)
    # data
    dataset: str = setting(
        help="mr, subj (Pang & Lee), sst2, sst5 (SST sentences, official train/dev/test), file "
        "(your own, `file`), listops (a ListOps file, `file`), imdb, sst2_tfds (tfds); sentence "
        "pairs: sick (SemEval split), mrpc, snli (1% train + dev, official test and its hard "
        "subset), pairs (your own, `file`); reading comprehension: squad (SQuAD v1.1, split by "
        "article)", group="data", metavar="|".join(DATASETS))
    data_dir: Optional[str] = setting(None, "mr/subj/sst2/sst5: the folder holding the files "
                                      "(default: the project's ../shared/data); imdb/sst2_tfds: "
                                      "tfds data_dir", group="data")
    file: Optional[str] = setting(
        None, "`dataset` file: a .tsv/.csv file with a header, or a directory with one .txt file "
        "or sub-directory per class; `dataset` listops: label<TAB>expression lines; `dataset` "
        "pairs: a SICK or MRPC file as distributed, a .tsv/.csv with sentence1, sentence2 and "
        "label columns, or SNLI .jsonl; `dataset` squad: a SQuAD v1.1 .json file (default the "
        "shared dev-v1.1.json)", group="data")
    test_file: Optional[str] = setting(None, "`dataset` file/listops/pairs/squad: a test file "
                                       "in `file`'s format (default: a seeded 10% of `file`; "
                                       "squad: a seeded share of its articles)", group="data")
    text_column: str = setting("text", "text column of `file`", group="data")
    label_column: str = setting("label", "label column of `file`", group="data")
    max_length: int = setting(64, "units kept per text (squad: per passage, use about 300)",
                              group="data")
    # experiment
    variants: list = setting(
        help=f"any of {' '.join(hparams.VARIANTS)}; {' and '.join(hparams.PREDICTOR_VARIANTS)} "
        "need a pretrained predictor (`run`, or `model` and `tokenizer`)", group="experiment",
        metavar="VARIANT", default_factory=lambda: list(hparams.DEFAULT_VARIANTS))
    seeds: list = setting(help="seeds to run (each: initial weights, shuffles, and for `split` "
                          "seeded the split)", group="experiment", parse=int,
                          default_factory=lambda: [0, 1, 2, 3, 4])
    split: str = setting("seeded", "seeded 90/10 test split or k-fold cross-validation",
                         group="experiment", choices=SPLITS)
    folds: int = setting(10, "folds of `split` kfold", group="experiment")
    # model and training
    embedding_dim: int = setting(128, "width of the classifier's word embeddings",
                                 group="model and training")
    rnn_units: int = setting(128, "units of each direction of the classifier's GRU",
                             group="model and training")
    attention_heads: int = setting(4, "heads of the classifier's self-attention",
                                   group="model and training")
    dropout: float = setting(0.3, "dropout of the classifier", group="model and training")
    num_mixtures: int = setting(2, "graph mixtures of each GlomoTransfer layer",
                                group="model and training")
    transfer_dropout: float = setting(0.0, "dropout on GlomoTransfer's fused input [H ; M H "
                                      "...] (GLoMo and uniform variants)",
                                      group="model and training")
    transfer_form: str = setting(
        "fusion", "how the GLoMo, uniform and gold variants use their graphs: fusion (the "
        "paper's one gated fusion, GlomoTransfer) or propagation (the states composed along the "
        "graphs for `propagation_steps` steps, GraphPropagation)", group="model and training",
        choices=hparams.TRANSFER_FORMS)
    propagation_steps: int = setting(3, "steps of `transfer_form` propagation",
                                     group="model and training")
    propagation_aggregation: str = setting(
        "mean", "how `transfer_form` propagation gathers a unit's sources: mean (the graphs' "
        "rows as they are) or sum (each row times its number of sources)",
        group="model and training", choices=("mean", "sum"))
    propagation_update: str = setting(
        "gru", "how `transfer_form` propagation updates a unit each step: gru (a GRU cell on its "
        "state and messages) or mlp (a two-layer perceptron of its input and messages)",
        group="model and training", choices=("gru", "mlp"))
    epochs: int = setting(10, "most training epochs per run", group="model and training")
    patience: int = setting(2, "epochs without a better validation accuracy before stopping",
                            group="model and training")
    batch_size: int = setting(50, "examples per training step", group="model and training")
    learning_rate: float = setting(1e-3, "Adam learning rate", group="model and training")
    init_embeddings: Optional[str] = setting(
        None, "predictor: every variant's word embeddings (the baseline's too) start from the "
        "pretrained predictor's table (`embedding_dim` must be its width; default: random)",
        group="model and training", choices=INIT_EMBEDDINGS[1:])
    graph_temperature: Optional[float] = setting(
        None, "GLoMo variants: raise every row of the predictor's graphs to the power 1/TAU and "
        "renormalise (below 1 sharper, above 1 flatter; a softmax temperature for a softmax "
        "predictor; default: the graphs as they are)", group="model and training",
        metavar="TAU")
    # speed
    graph_cache: bool = setting(
        False, "GLoMo variants: compute the frozen predictor's graphs once per sentence and "
        "reuse them every epoch instead of running the predictor on every batch (outputs and "
        "gradients equal up to float round-off, about 1e-7, so trained runs are not bit for bit "
        "the online ones)", group="speed")
    top_k: Optional[int] = setting(
        None, "GLoMo variants: keep the K heaviest sources of every receiving unit and mix the "
        "graphs in that sparse form (gather + weighted sum); exact when K covers every row's "
        "sources (default: dense graphs)", group="speed", metavar="K")
    precision: str = precision_setting("speed")
    # output
    output_dir: str = setting(help="where results.json/.md are written")
    save_models: bool = setting(False, "save every trained model as "
                                "OUTPUT_DIR/models/VARIANT-seedS.keras (GLoMo variants with "
                                "their frozen predictor)")
    resume: bool = setting(False, "keep the runs of `output_dir`'s results.json (same "
                           "settings; more seeds or variants may be added) and run only the "
                           "missing ones; without it a directory that holds runs is refused, "
                           "not overwritten")
    verbose: int = verbose_setting()

    def validated(self):
        """A copy with variants and seeds deduplicated; raises ``ValueError`` naming the setting
        to change."""
        c = dataclasses.replace(self, variants=list(dict.fromkeys(self.variants)),
                                seeds=list(dict.fromkeys(self.seeds)))
        if c.dataset not in DATASETS:
            raise ValueError(f"Unknown `dataset` {c.dataset!r}; choose one of "
                             f"{', '.join(DATASETS)}.")
        unknown = [v for v in c.variants if v not in hparams.VARIANTS]
        if unknown:
            raise ValueError(f"Unknown variant(s) {', '.join(unknown)}; choose from "
                             f"{' '.join(hparams.VARIANTS)}.")
        if c.dataset in FILE_DATASETS and not c.file:
            raise ValueError(f"`dataset` {c.dataset} needs `file` PATH ({FILE_HELP[c.dataset]}).")
        readers = FILE_DATASETS + OPTIONAL_FILE_DATASETS
        if c.file and c.dataset not in readers:
            raise ValueError(f"`file` is read with `dataset` {' / '.join(readers)} only.")
        if c.test_file and c.dataset not in readers:
            raise ValueError(f"`test_file` is read with `dataset` {' / '.join(readers)} "
                             "only (the other datasets have their own split).")
        if c.dataset in PAIR_DATASETS + READING_DATASETS:
            from glomo_tf.models.pair_classifier import PAIR_VARIANTS

            kind = ("a sentence-pair task" if c.dataset in PAIR_DATASETS
                    else "reading comprehension")
            other = [v for v in c.variants if v not in PAIR_VARIANTS]
            if other:
                raise ValueError(f"`dataset` {c.dataset} is {kind}: its variants "
                                 f"are {' '.join(PAIR_VARIANTS)}, not {' '.join(other)}.")
            if c.split != "seeded":
                raise ValueError(f"`dataset` {c.dataset} runs `split` seeded only.")
            if c.graph_cache and c.dataset in PAIR_DATASETS:
                raise ValueError(f"`dataset` {c.dataset}: `graph_cache` reads single texts; "
                                 f"{kind} runs the predictor on each text of every batch (leave "
                                 "out `graph_cache`).")
        if c.split not in SPLITS:
            raise ValueError(f"`split` must be one of {', '.join(SPLITS)}, got {c.split!r}.")
        if c.split == "kfold" and (c.dataset in TFDS_NAMES or c.dataset in SST_DATASETS
                                   or c.test_file):
            raise ValueError(f"`dataset` {c.dataset} has an official test set; use `split` "
                             "seeded.")
        if c.split == "kfold" and c.folds < 2:
            raise ValueError("`folds` must be >= 2.")
        gold = [v for v in c.variants if v in hparams.GOLD_VARIANTS]
        if gold and c.dataset not in GOLD_DATASETS:
            raise ValueError(f"The variant(s) {' '.join(gold)} read the data's own structure, "
                             f"which only `dataset` {' / '.join(GOLD_DATASETS)} carries; leave "
                             "them out for this dataset.")
        if c.transfer_form not in hparams.TRANSFER_FORMS:
            raise ValueError(f"`transfer_form` must be one of "
                             f"{', '.join(hparams.TRANSFER_FORMS)}, got {c.transfer_form!r}.")
        if c.transfer_form != "fusion" and c.dataset in READING_DATASETS:
            raise ValueError(f"`transfer_form` {c.transfer_form} is for classification and "
                             "sentence pairs; reading comprehension transfers graphs through "
                             "the fusion: leave `transfer_form` out.")
        for name in ("max_length", "epochs", "batch_size", "embedding_dim", "rnn_units",
                     "attention_heads", "num_mixtures", "propagation_steps"):
            if getattr(c, name) < 1:
                raise ValueError(f"`{name}` must be >= 1.")
        if c.patience < 0 or not 0.0 <= c.dropout < 1.0 or c.learning_rate <= 0:
            raise ValueError("`patience` must be >= 0, `dropout` in [0, 1), `learning_rate` > 0.")
        if c.top_k is not None and c.top_k < 1:
            raise ValueError(f"`top_k` must be >= 1 (or left out for dense graphs), got "
                             f"{c.top_k}.")
        hparams.check_graph_temperature(c.graph_temperature, "`graph_temperature`")
        check_precision(c.precision)
        if not 0.0 <= c.transfer_dropout < 1.0:
            raise ValueError(f"`transfer_dropout` must be in [0, 1), got {c.transfer_dropout}.")
        if c.init_embeddings not in INIT_EMBEDDINGS:
            raise ValueError(f"`init_embeddings` must be one of "
                             f"{', '.join(str(v) for v in INIT_EMBEDDINGS[1:])}, got "
                             f"{c.init_embeddings!r}.")
        if c.init_embeddings == "predictor" and c.model is None:
            raise ValueError("`init_embeddings` predictor needs a pretrained predictor: pass "
                             "`preset` NAME or `run` RUN_DIR.")
        needing = [v for v in c.variants if v in hparams.PREDICTOR_VARIANTS]
        if c.model is None and needing:
            raise ValueError(f"The variant(s) {' '.join(needing)} need a pretrained graph "
                             "predictor: pass `preset` NAME, `run` RUN_DIR (or `model` and "
                             "`tokenizer`), or run only `variants` baseline uniform "
                             "uniform_rnn cn3 shared_private.")
        return c


FILE_HELP = {"file": "a .tsv/.csv file or a directory",
             "listops": "a ListOps file in the original format, label<TAB>expression",
             "pairs": "a SICK, MRPC, sentence1/sentence2/label .tsv/.csv or SNLI .jsonl file"}


# ---------------------------------------------------------------------------------- data
def load_task(config):
    """``(texts, labels, class_names, official)`` of ``config.dataset``: ``official`` is None, or
    for datasets with an official split a dict with the test split's ``(texts, labels)`` under
    ``"test"`` and the validation split's under ``"validation"`` (None: carved from the training
    texts)."""
    from glomo_tf.data import labeled

    try:
        if config.dataset in SST_DATASETS:
            fine = SST_DATASETS[config.dataset]
            texts, labels, class_names = labeled.load_sst("train", fine, config.data_dir)
            dev = labeled.load_sst("dev", fine, config.data_dir)[:2]
            test = labeled.load_sst("test", fine, config.data_dir)[:2]
            return texts, labels, class_names, {"test": test, "validation": dev}
        if config.dataset == "mr":
            return (*labeled.load_mr(config.data_dir), None)
        if config.dataset == "subj":
            return (*labeled.load_subj(config.data_dir), None)
        if config.dataset == "file":
            texts, labels, class_names = labeled.load_labeled_text(
                config.file, config.text_column, config.label_column)
            official = None
            if config.test_file:
                test = labeled.load_labeled_text(config.test_file, config.text_column,
                                                 config.label_column, class_names=class_names)
                official = {"test": test[:2], "validation": None}
            return texts, labels, class_names, official
        if config.dataset == "listops":
            texts, labels = _listops_texts(config.file)
            official = None
            if config.test_file:
                official = {"test": _listops_texts(config.test_file), "validation": None}
            return texts, labels, [str(v) for v in range(10)], official
        name = TFDS_NAMES[config.dataset]
        _, _, train_split, test_split = labeled.TFDS_TEXT_DATASETS[name]
        texts, labels, class_names = labeled.load_tfds_text(name, train_split,
                                                            data_dir=config.data_dir)
        test_texts, test_labels, _ = labeled.load_tfds_text(name, test_split,
                                                            data_dir=config.data_dir)
        return texts, labels, class_names, {"test": (test_texts, test_labels), "validation": None}
    except (FileNotFoundError, ImportError) as error:
        raise ValueError(str(error).replace("\n", " ")) from None


def _listops_texts(path):
    """``(texts, labels)`` of a ListOps file: each expression's tokens without the parentheses,
    joined by spaces (the units a tokenizer splits back)."""
    from glomo_tf.data.listops import read_listops

    examples = read_listops(path)
    if not examples:
        raise ValueError(f"{path!r} holds no ListOps example (label<TAB>expression lines).")
    return [" ".join(e.tokens) for e in examples], np.array([e.label for e in examples], np.int64)


def splits(num_examples, split, folds, seed):
    """``[(fold, train, validation, test)]`` index arrays for one seed (``fold`` None when
    seeded); the validation set is carved from the training part."""
    from glomo_tf.data.labeled import kfold_splits, seeded_split

    if split == "kfold":
        parts = [(fold, train, test) for fold, (train, test)
                 in enumerate(kfold_splits(num_examples, folds, seed))]
    else:
        train, test = seeded_split(num_examples, TEST_FRACTION, seed)
        parts = [(None, train, test)]
    out = []
    for fold, train, test in parts:
        keep, validation = seeded_split(len(train), VALIDATION_FRACTION, seed)
        out.append((fold, train[keep], train[validation], test))
    return out


# ---------------------------------------------------------------------------------- training
def train_and_evaluate(model, train, validation, test, *, learning_rate=1e-3, patience=2,
                       epochs=10, batch_size=50, verbose=1, seed=0, graphs=None):
    """Compiles and fits ``model`` on ``(ids, labels)`` pairs; returns the test accuracy (the
    fraction of exact argmax hits, so equal counts give equal accuracies) and the epochs run.

    Adam at ``learning_rate``, early stopping on validation accuracy after ``patience`` epochs
    without improvement (best weights restored), at most ``epochs``. Training batches are
    length-bucketed and validation/test batches length-sorted, each cut to its longest text (see
    :func:`glomo_tf.data.batching.bucketed_training_batches`).

    ``graphs``: None (the model runs its GLoMo layers' predictor on every batch); a dict
    ``{"cache": GraphCache of the training ids, "predictor": ..., "top_k": ...}``: the model is
    then trained and evaluated through a :class:`~glomo_tf.models.GraphFedModel`, reading the
    cached training graphs and the validation and test graphs computed once; or ``{"gold":
    (training, validation, test GraphCache)}``: a model on ``(ids, graphs...)`` (the gold
    variants of :func:`glomo_tf.models.build_classifier`) fed the data's own graphs
    (:mod:`glomo_tf.data.gold_graphs`)."""
    from glomo_tf.data import graph_cache

    inference_batch = 2 * batch_size  # no gradients: twice the training batch
    fitted = model
    if graphs is not None and "gold" in graphs:
        caches = graphs["gold"]
        batches = graph_cache.cached_training_batches(*train, batch_size, seed, caches[0],
                                                      dense=True)
        validation_data = graph_cache.cached_inference_batches(*validation, inference_batch,
                                                               caches[1], dense=True)[0]
        test_data, order = graph_cache.cached_inference_batches(
            test[0], np.zeros(len(test[0]), "int64"), inference_batch, caches[2], dense=True)
    elif graphs is not None:
        from glomo_tf.models import GraphFedModel

        fitted = GraphFedModel(model)
        predictor, top_k = graphs["predictor"], graphs["top_k"]
        stage = functools.partial(graph_cache.with_graphs, predictor=predictor, top_k=top_k,
                                  candidates=top_k is None,
                                  graph_temperature=graphs.get("graph_temperature"))
        batches = graph_cache.cached_training_batches(*train, batch_size, seed, graphs["cache"])
        validation_data = stage(length_sorted_batches(*validation, inference_batch)[0])
        test_data, order = length_sorted_batches(test[0], np.zeros(len(test[0]), "int64"),
                                                 inference_batch)
        test_data = stage(test_data, cache=None)
    else:
        batches = bucketed_training_batches(*train, batch_size, seed)
        validation_data, _ = length_sorted_batches(*validation, inference_batch)
        test_data, order = length_sorted_batches(test[0], np.zeros(len(test[0]), "int64"),
                                                 inference_batch)
    epochs_run = fit_with_early_stopping(fitted, batches, validation_data,
                                         learning_rate=learning_rate, patience=patience,
                                         epochs=epochs, verbose=verbose)
    probabilities = np.empty((len(order), model.output_shape[-1]), "float32")
    probabilities[order] = fitted.predict(test_data, verbose=0)
    accuracy = float(np.mean(np.argmax(probabilities, axis=-1) == np.asarray(test[1])))
    return accuracy, epochs_run


def fit_with_early_stopping(model, batches, validation_data, *, learning_rate, patience, epochs,
                            verbose, monitor="val_accuracy", loss="sparse_categorical_crossentropy",
                            metrics=("accuracy",)):
    """Compiles ``model`` with Adam at ``learning_rate`` and fits it on ``batches`` (a dataset
    that reshuffles itself) for at most ``epochs``, stopping after ``patience`` epochs without a
    better ``monitor`` (best weights restored); returns the epochs run."""
    import keras

    model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss=loss,
                  metrics=list(metrics))
    stop = keras.callbacks.EarlyStopping(monitor=monitor, mode="max", patience=patience,
                                         restore_best_weights=True)
    history = model.fit(batches, validation_data=validation_data, epochs=epochs, shuffle=False,
                        callbacks=[stop], verbose=verbose)
    return len(history.history["loss"])


# ---------------------------------------------------------------------------------- report
def write_results(output_dir, config, runs, variants, split_description, metrics=(),
                  primary="accuracy"):
    """Writes ``results.json`` (config, runs, summary) and ``results.md``; returns the Markdown.

    ``primary``: the runs' main figure (default ``accuracy``; ``exact_match`` for SQuAD), the
    summary's top level. ``metrics``: other figures of the runs (``"f1"``,
    ``"test_hard_accuracy"``) summarised the same way, under the summary's ``metrics``."""
    summary = evaluation.summarize(runs, variants, metric=primary)
    if metrics:
        summary["metrics"] = {m: evaluation.summarize(runs, variants, metric=m) for m in metrics}
    import json

    with open(os.path.join(output_dir, "results.json"), "w", encoding="utf-8") as handle:
        json.dump({"config": config, "split_description": split_description,
                   "primary": primary, "runs": runs, "summary": summary}, handle, indent=2)
    markdown = evaluation.format_markdown(summary, config["dataset"], split_description,
                                          metric=primary)
    for metric in metrics:
        markdown += "\n" + evaluation.format_markdown(summary["metrics"][metric],
                                                      config["dataset"], split_description,
                                                      metric=metric)
    with open(os.path.join(output_dir, "results.md"), "w", encoding="utf-8") as handle:
        handle.write(markdown)
    return markdown


# ---------------------------------------------------------------------------------- the experiment
def describe_split(config, official):
    """One line saying how the data is split, as results.md writes it."""
    if official is not None and official["validation"] is not None:
        return "official train/dev/test split"
    if official is not None:
        return "official test split, 10% of training for validation"
    if config.split == "kfold":
        return f"{config.folds}-fold cross-validation, mean over folds per seed"
    return "seeded 90/10 split, 10% of training for validation"


def run_transfer(config, record=None):
    """Runs every variant of a :class:`TransferConfig` on every seed (and fold), writing
    ``results.json`` and ``results.md`` to ``config.output_dir`` after each run; returns the
    Markdown report. ``record`` (a dict) is stored in results.json's ``config`` along with the
    settings (the command line's own flags, for example). Raises ``ValueError`` for settings or
    data to change, before any training. The sentence-pair datasets (:data:`PAIR_DATASETS`) run
    :func:`glomo_tf.models.build_pair_classifier` through :func:`run_pair_transfer`'s loop."""
    config = config.validated()
    with precision_scope(config.precision):
        if config.dataset in PAIR_DATASETS:
            return _run_pair_transfer(config, record)
        if config.dataset in READING_DATASETS:
            from glomo_tf.experiments.reading import run_reading

            return run_reading(config, record)
        return _run_transfer(config, record)


def _run_transfer(config, record):
    texts, labels, class_names, official = load_task(config)
    if len(class_names) < 2 or len(np.unique(labels)) < 2:
        raise ValueError(f"The {config.dataset} data holds a single class: a classifier needs "
                         "two.")
    saved_config, runs, done = _prepare_output(config, record, class_names)

    import keras

    from glomo_tf.data.vocabulary import Tokenizer
    from glomo_tf.models.classifier import build_classifier

    predictor, tokenizer = _load_pretrained(config)
    fixed_ids = encode(tokenizer, texts, config.max_length) if tokenizer else None

    @functools.cache
    def graph_cache():
        """The predictor's graphs of every text, computed when the first run needs them (a
        resumed comparison whose GLoMo runs are all done computes nothing)."""
        from glomo_tf.data.graph_cache import compute_graphs

        start = time.perf_counter()
        # Dense caches hold the candidate matrices the mixtures read (no products per step).
        cache = compute_graphs(predictor, fixed_ids, config.top_k,
                               candidates=config.top_k is None,
                               graph_temperature=config.graph_temperature)
        print(f"Graph cache: {len(cache)} sentences, {cache.nbytes / 2 ** 20:.1f} MiB "
              f"({'candidate matrices' if cache.k is None else f'top-{cache.k}'}, exact: "
              f"{cache.exact}), {time.perf_counter() - start:.1f}s")
        return cache

    split_description = describe_split(config, official)
    training = _announce(config, f"{len(texts)} examples, classes {class_names}",
                         split_description, runs)
    markdown = ""
    for seed in config.seeds:
        if official is not None and official["validation"] is not None:
            seed_splits = [(None, np.arange(len(texts)), None, None)]
        elif official is not None:
            keep, validation = _seeded_split(len(texts), VALIDATION_FRACTION, seed)
            seed_splits = [(None, keep, validation, None)]
        else:
            seed_splits = splits(len(texts), config.split, config.folds, seed)
        for fold, train, validation, test in seed_splits:
            if tokenizer is None:  # no pretraining: the task's own training texts
                split_tokenizer = Tokenizer.build([texts[i] for i in train])
                ids = encode(split_tokenizer, texts, config.max_length)
                vocabulary_size = split_tokenizer.vocabulary_size
            else:
                ids, vocabulary_size = fixed_ids, tokenizer.vocabulary_size
            encoder = tokenizer or split_tokenizer
            test_data = (_encoded(official["test"], encoder, config.max_length)
                         if test is None else (ids[test], labels[test]))
            validation_data = (_encoded(official["validation"], encoder, config.max_length)
                               if validation is None else (ids[validation], labels[validation]))
            split_texts = [[texts[i] for i in train],
                           official["validation"][0] if validation is None
                           else [texts[i] for i in validation],
                           official["test"][0] if test is None else [texts[i] for i in test]]
            for variant in config.variants:
                if (variant, seed, fold) in done:
                    continue
                where = f"seed {seed}" + ("" if fold is None else
                                          f", fold {fold + 1}/{config.folds}")
                print(f"\n== {config.dataset} | {variant} | {where}")
                keras.utils.set_random_seed(seed)
                model = build_classifier(
                    vocabulary_size, len(class_names), variant, graph_predictor=predictor,
                    embedding_dim=config.embedding_dim, rnn_units=config.rnn_units,
                    attention_heads=config.attention_heads, dropout=config.dropout,
                    num_mixtures=config.num_mixtures, transfer_dropout=config.transfer_dropout,
                    top_k=config.top_k, graph_temperature=config.graph_temperature,
                    transfer_form=config.transfer_form,
                    propagation_steps=config.propagation_steps,
                    propagation_aggregation=config.propagation_aggregation,
                    propagation_update=config.propagation_update)
                initial_embeddings(model, predictor, config)
                graphs = None
                if variant in hparams.GOLD_VARIANTS:
                    graphs = {"gold": [gold_graphs(part_texts, part[0]) for part_texts, part in
                                       zip(split_texts, ((ids[train], None), validation_data,
                                                         test_data))]}
                elif (predictor is not None and config.graph_cache
                        and variant in hparams.PREDICTOR_VARIANTS):
                    graphs = {"cache": graph_cache().subset(train), "predictor": predictor,
                              "top_k": config.top_k,
                              "graph_temperature": config.graph_temperature}
                start = time.perf_counter()
                accuracy, epochs_run = train_and_evaluate(
                    model, (ids[train], labels[train]), validation_data, test_data, seed=seed,
                    graphs=graphs, **training)
                seconds = time.perf_counter() - start
                print(f"   test accuracy {100 * accuracy:.2f} after {epochs_run} epoch(s), "
                      f"{seconds:.1f}s")
                if config.save_models:
                    _save_model(model, config.output_dir, variant, seed, fold,
                                None if tokenizer else split_tokenizer)
                runs.append({"dataset": config.dataset, "variant": variant, "seed": seed,
                             "fold": fold, "accuracy": accuracy, "epochs_run": epochs_run,
                             "seconds": round(seconds, 3), "train_examples": int(len(train)),
                             "validation_examples": int(len(validation_data[1])),
                             "test_examples": int(len(test_data[1]))})
                markdown = write_results(config.output_dir, saved_config, runs,
                                         saved_config["variants"], split_description)
                del model
    if not markdown:  # every run was already in results.json
        markdown = write_results(config.output_dir, saved_config, runs, saved_config["variants"],
                                 split_description)
    return markdown


def gold_graphs(texts, ids):
    """The :class:`~glomo_tf.data.graph_cache.GraphCache` of the texts' own structure
    (:mod:`glomo_tf.data.gold_graphs`; ListOps: each expression's tree), over the units of
    ``ids`` (the texts encoded, each cut to its first ``max_length`` units: a ListOps unit's
    parent comes before it, so a cut tree stays a tree)."""
    from glomo_tf.data import gold_graphs as gold
    from glomo_tf.data.batching import sequence_lengths

    lengths = np.maximum(sequence_lengths(np.asarray(ids)), 1)
    try:
        return gold.gold_graph_cache([gold.tree_graphs(gold.listops_parents(text)[:n])
                                      for text, n in zip(texts, lengths)])
    except ValueError as error:
        raise ValueError(f"The gold variants read each text's tree: {error}") from None


def _announce(config, data, split_description, runs):
    """Prints what a comparison runs (and what a resumed one keeps); returns the training
    settings of :func:`train_and_evaluate`."""
    print(f"{config.dataset}: {data}; variants {' '.join(config.variants)}; seeds "
          f"{' '.join(map(str, config.seeds))}; {split_description}")
    if runs:
        print(f"Resuming: {len(runs)} run(s) kept from "
              f"{os.path.join(config.output_dir, 'results.json')}")
    return dict(learning_rate=config.learning_rate, patience=config.patience,
                epochs=config.epochs, batch_size=config.batch_size, verbose=config.verbose)


def _prepare_output(config, record, class_names):
    """``(saved_config, runs, done)``: the settings results.json records, the runs kept from a
    resumed ``results.json`` and their ``(variant, seed, fold)`` keys."""
    try:
        os.makedirs(config.output_dir, exist_ok=True)
    except OSError as error:
        raise ValueError(f"Cannot create `output_dir` {config.output_dir!r}: {error}") from None
    saved_config = {**dataclasses.asdict(config), **(record or {}), "class_names": class_names}
    runs = previous_runs(config, saved_config)
    if runs:
        saved_config["seeds"] = list(dict.fromkeys([*(r["seed"] for r in runs), *config.seeds]))
        saved_config["variants"] = list(dict.fromkeys([*(r["variant"] for r in runs),
                                                       *config.variants]))
    return saved_config, runs, {(r["variant"], r["seed"], r["fold"]) for r in runs}


def initial_embeddings(model, predictor, config):
    """``model`` with its word embeddings (the layer named ``embedding``) set to the predictor's
    table when ``config.init_embeddings == "predictor"``; unchanged otherwise."""
    if config.init_embeddings != "predictor":
        return model
    import keras
    table = np.asarray(keras.ops.convert_to_numpy(predictor.embeddings), np.float32)
    model.get_layer("embedding").set_weights([table])
    return model


def _load_pretrained(config):
    """``(predictor, tokenizer)`` of ``config.model`` / ``config.tokenizer`` (None, None without
    a model); the predictor runs in ``config.precision``."""
    from glomo_tf.data.vocabulary import Tokenizer, check_vocabulary_matches
    from glomo_tf.saving import load_graph_predictor

    if not config.model:
        return None, None
    try:
        tokenizer = Tokenizer.load(config.tokenizer)
        predictor = load_graph_predictor(config.model, dtype=config.precision)
    except FileNotFoundError as error:
        raise ValueError(str(error).replace("\n", " ")) from None
    check_vocabulary_matches(tokenizer.vocabulary, predictor)
    if config.init_embeddings == "predictor" and config.embedding_dim != predictor.hidden_dim:
        raise ValueError(f"`init_embeddings` predictor needs `embedding_dim` "
                         f"{predictor.hidden_dim} (the predictor's width), got "
                         f"{config.embedding_dim}.")
    return predictor, tokenizer


# ---------------------------------------------------------------------------------- pair tasks
def load_pair_task(config):
    """The :class:`glomo_tf.data.pairs.PairTask` of a pair ``config.dataset`` (``pairs``:
    ``config.file`` for training, ``config.test_file`` as the test split when given)."""
    from glomo_tf.data import pairs

    try:
        if config.dataset == "sick":
            return pairs.load_sick(config.data_dir)
        if config.dataset == "mrpc":
            return pairs.load_mrpc(config.data_dir)
        if config.dataset == "snli":
            return pairs.load_snli(config.data_dir)
        train, class_names = pairs.load_pairs_file(config.file)
        test = None
        if config.test_file:
            test, _ = pairs.load_pairs_file(config.test_file, class_names=class_names)
        return pairs.PairTask("pairs", class_names, train, test=test)
    except FileNotFoundError as error:
        raise ValueError(str(error).replace("\n", " ")) from None


def describe_pair_split(task):
    """One line saying how a pair task is split, as results.md writes it."""
    if task.validation is not None and task.test is not None:
        return "official train/dev/test split"
    if task.test is not None:
        return "official test split, 10% of training for validation"
    return "seeded 90/10 split, 10% of training for validation"


def pair_splits(task, seed):
    """``(train, validation, test)`` :class:`~glomo_tf.data.pairs.PairSplit` of a pair task for
    one seed: its official splits where it has them; a missing validation split is a seeded
    10% of the training pairs, a missing test split a seeded 10% held out before that."""
    size = len(task.train.labels)
    if task.validation is not None and task.test is not None:
        return task.train, task.validation, task.test
    if task.test is not None:
        keep, held = _seeded_split(size, VALIDATION_FRACTION, seed)
        return _pair_subset(task.train, keep), _pair_subset(task.train, held), task.test
    _, keep, held, tested = splits(size, "seeded", 0, seed)[0]
    return tuple(_pair_subset(task.train, index) for index in (keep, held, tested))


def _pair_subset(split, index):
    return type(split)([split.first[i] for i in index], [split.second[i] for i in index],
                       np.asarray(split.labels)[index])


def _encode_pairs(split, tokenizer, max_length):
    """``(first ids, second ids, labels)`` of a :class:`~glomo_tf.data.pairs.PairSplit`."""
    return (encode(tokenizer, split.first, max_length), encode(tokenizer, split.second, max_length),
            np.asarray(split.labels, np.int64))


def train_and_evaluate_pairs(model, train, validation, tests, *, learning_rate=1e-3, patience=2,
                             epochs=10, batch_size=50, verbose=1, seed=0):
    """:func:`train_and_evaluate` for a pair classifier: ``train`` and ``validation`` are
    ``(first ids, second ids, labels)``, ``tests`` a dict ``{name: (first, second, labels)}``.
    Returns ``({name: predicted classes}, epochs run)``."""
    from glomo_tf.data.batching import pair_sorted_batches, pair_training_batches

    inference_batch = 2 * batch_size
    epochs_run = fit_with_early_stopping(
        model, pair_training_batches(*train, batch_size, seed),
        pair_sorted_batches(*validation, inference_batch)[0], learning_rate=learning_rate,
        patience=patience, epochs=epochs, verbose=verbose)
    predictions = {}
    for name, (first, second, labels) in tests.items():
        data, order = pair_sorted_batches(first, second, labels, inference_batch)
        predicted = np.empty(len(order), np.int64)
        predicted[order] = np.argmax(model.predict(data, verbose=0), axis=-1)
        predictions[name] = predicted
    return predictions, epochs_run


def binary_f1(predicted, labels, positive=1):
    """F1 of the ``positive`` class (GLUE's MRPC figure): ``2 tp / (2 tp + fp + fn)``; 0 when
    there is no positive prediction or label."""
    predicted, labels = np.asarray(predicted), np.asarray(labels)
    tp = int(np.sum((predicted == positive) & (labels == positive)))
    wrong = int(np.sum((predicted == positive) != (labels == positive)))
    return 2 * tp / (2 * tp + wrong) if tp else 0.0


def _run_pair_transfer(config, record):
    task = load_pair_task(config)
    saved_config, runs, done = _prepare_output(config, record, task.class_names)

    import keras

    from glomo_tf.data.vocabulary import Tokenizer
    from glomo_tf.models.pair_classifier import build_pair_classifier

    predictor, tokenizer = _load_pretrained(config)
    binary = len(task.class_names) == 2
    metrics = (("f1",) if binary else ()) + tuple(f"{name}_accuracy" for name in task.extra_tests)
    split_description = describe_pair_split(task)
    sizes = {"train": len(task.train.labels)}
    for name in ("validation", "test"):
        if getattr(task, name) is not None:
            sizes[name] = len(getattr(task, name).labels)
    training = _announce(config, f"pairs {sizes}, classes {task.class_names}",
                         split_description, runs)
    markdown = ""
    for seed in config.seeds:
        if all((variant, seed, None) in done for variant in config.variants):
            continue
        train, validation, test = pair_splits(task, seed)
        encoder = tokenizer or Tokenizer.build(list(train.first) + list(train.second))
        train_data = _encode_pairs(train, encoder, config.max_length)
        validation_data = _encode_pairs(validation, encoder, config.max_length)
        tests = {"test": _encode_pairs(test, encoder, config.max_length)}
        tests.update({name: _encode_pairs(split, encoder, config.max_length)
                      for name, split in task.extra_tests.items()})
        for variant in config.variants:
            if (variant, seed, None) in done:
                continue
            print(f"\n== {config.dataset} | {variant} | seed {seed}")
            keras.utils.set_random_seed(seed)
            model = build_pair_classifier(
                encoder.vocabulary_size, len(task.class_names), variant,
                graph_predictor=predictor, embedding_dim=config.embedding_dim,
                rnn_units=config.rnn_units, dropout=config.dropout,
                num_mixtures=config.num_mixtures, transfer_dropout=config.transfer_dropout,
                top_k=config.top_k, graph_temperature=config.graph_temperature,
                transfer_form=config.transfer_form, propagation_steps=config.propagation_steps,
                propagation_aggregation=config.propagation_aggregation,
                propagation_update=config.propagation_update)
            initial_embeddings(model, predictor, config)
            start = time.perf_counter()
            predictions, epochs_run = train_and_evaluate_pairs(
                model, train_data, validation_data, tests, seed=seed, **training)
            seconds = time.perf_counter() - start
            run = {"dataset": config.dataset, "variant": variant, "seed": seed, "fold": None,
                   "accuracy": float(np.mean(predictions["test"] == tests["test"][2]))}
            if binary:
                run["f1"] = binary_f1(predictions["test"], tests["test"][2])
            for name in task.extra_tests:
                run[f"{name}_accuracy"] = float(np.mean(predictions[name] == tests[name][2]))
            run.update({"epochs_run": epochs_run, "seconds": round(seconds, 3),
                        "train_examples": len(train_data[2]),
                        "validation_examples": len(validation_data[2]),
                        "test_examples": len(tests["test"][2])})
            print("   " + ", ".join(f"{k} {100 * run[k]:.2f}" for k in ("accuracy", *metrics))
                  + f" after {epochs_run} epoch(s), {seconds:.1f}s")
            if config.save_models:
                _save_model(model, config.output_dir, variant, seed, None)
            runs.append(run)
            markdown = write_results(config.output_dir, saved_config, runs,
                                     saved_config["variants"], split_description, metrics)
            del model
    if not markdown:
        markdown = write_results(config.output_dir, saved_config, runs, saved_config["variants"],
                                 split_description, metrics)
    return markdown


# Settings a resumed comparison may change: which runs it holds, and how progress is printed.
RESUMABLE_SETTINGS = ("seeds", "variants", "resume", "verbose", "output_dir", "save_models")


def previous_runs(config, saved_config):
    """The runs of ``config.output_dir/results.json`` to keep (``[]`` when there is none).

    Raises ``ValueError`` when the directory holds runs and ``config.resume`` is off (they would
    be overwritten), when the file cannot be read, or when it was made with other settings than
    ``saved_config`` (anything but :data:`RESUMABLE_SETTINGS`)."""
    import json

    path = os.path.join(config.output_dir, "results.json")
    if not os.path.exists(path):
        return []
    try:
        with open(path, encoding="utf-8") as handle:
            previous = json.load(handle)
        runs, settings = list(previous["runs"]), dict(previous["config"])
        settings.setdefault("precision", "float32")  # results written before `precision`
        settings.setdefault("transfer_form", "fusion")  # ... and before `transfer_form`
        settings.setdefault("propagation_steps", 3)
        settings.setdefault("propagation_aggregation", "mean")
        settings.setdefault("propagation_update", "gru")
        settings.pop("flags", None)  # the command line's flag table, kept by some earlier builds
        keys = {(r["variant"], r["seed"], r["fold"]) for r in runs}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path} cannot be read as a glomo transfer result ({error}): move it "
                         "away or choose another `output_dir`.") from None
    if not runs:
        return []
    if not config.resume:
        raise ValueError(f"`output_dir` {config.output_dir} already holds {len(runs)} run(s) in "
                         "results.json: pass `resume` to keep them and run only the missing "
                         "ones, or choose another `output_dir`.")
    current = json.loads(json.dumps(saved_config))  # compared as results.json stores it
    changed = [f"{k} {settings.get(k)!r} -> {current.get(k)!r}"
               for k in sorted(set(settings) | set(current))
               if k not in RESUMABLE_SETTINGS and settings.get(k) != current.get(k)]
    if changed:
        raise ValueError(f"`resume`: {path} was made with other settings ({'; '.join(changed)}): "
                         "resume with its settings or choose another `output_dir`.")
    if len(keys) != len(runs):
        raise ValueError(f"{path} holds the same (variant, seed, fold) run twice: move it away "
                         "or choose another `output_dir`.")
    return runs


def _save_model(model, output_dir, variant, seed, fold, tokenizer=None):
    """Saves a trained model as ``output_dir/models/<variant>-seed<seed>[-fold<k>].keras``; with
    a ``tokenizer`` (a run without a pretrained one builds its own from each split's training
    texts), that too, as ``models/tokenizer-seed<seed>[-fold<k>]/``, to encode new texts as the
    model read them."""
    directory = os.path.join(output_dir, "models")
    os.makedirs(directory, exist_ok=True)
    split = f"seed{seed}" + ("" if fold is None else f"-fold{fold + 1}")
    model.save(os.path.join(directory, f"{variant}-{split}.keras"))
    if tokenizer is not None:
        tokenizer.save(os.path.join(directory, f"tokenizer-{split}"))


def _encoded(split, tokenizer, max_length):
    """``(ids, labels)`` of an official ``(texts, labels)`` split, encoded as the training texts."""
    texts, labels = split
    return encode(tokenizer, texts, max_length), labels


def _seeded_split(num_examples, fraction, seed):
    from glomo_tf.data.labeled import seeded_split

    return seeded_split(num_examples, fraction, seed)
