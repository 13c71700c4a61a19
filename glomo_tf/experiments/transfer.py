"""``glomo transfer``: paired comparisons of downstream variants with and without transferred
GLoMo graphs, on single texts, sentence pairs and reading comprehension.

:class:`TransferConfig` holds a comparison's settings (the command line's flags, one field each);
:func:`run_transfer` checks them and runs the comparison of its task:

* :mod:`.classification`: single texts, the classifiers of :func:`glomo_tf.models.build_classifier`;
* :mod:`.pairs`: sentence pairs, :func:`glomo_tf.models.build_pair_classifier`;
* :mod:`.reading`: SQuAD v1.1, the reader of :func:`glomo_tf.models.build_reader`.

Each writes the test figures of every run and the paired comparisons
(:mod:`glomo_tf.evaluation`) to ``results.json`` and ``results.md`` after each run, and resumes
from them (:class:`glomo_tf.experiments.runs.Comparison`).
"""

import dataclasses
from typing import Optional

from glomo_tf import hparams
from glomo_tf.experiments.classification import (CLASSIFICATION_DATASETS, GOLD_DATASETS,
                                                 SST_DATASETS, TFDS_NAMES, run_classification)
from glomo_tf.experiments.pairs import PAIR_DATASETS, run_pairs
from glomo_tf.experiments.reading import READING_DATASETS, run_reading
from glomo_tf.experiments.settings import precision_setting, setting, verbose_setting
from glomo_tf.precision import check_precision, precision_scope

DATASETS = CLASSIFICATION_DATASETS + PAIR_DATASETS + READING_DATASETS
# Datasets read from --file (and an optional --test-file).
FILE_DATASETS = ("file", "listops", "pairs")
# Datasets with a default file of their own that --file / --test-file may replace.
OPTIONAL_FILE_DATASETS = READING_DATASETS
SPLITS = ("seeded", "kfold")
INIT_EMBEDDINGS = (None, "predictor")  # --init-embeddings


# The settings that say how a classifier transfers its graphs: passed to the model builders as
# they are named (see TransferConfig.transfer_form_options).
PROPAGATION_OPTIONS = ("transfer_form", "propagation_steps", "propagation_aggregation",
                       "propagation_update", "propagation_directions",
                       "propagation_hidden_units", "propagation_layer_norm")


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
    propagation_directions: str = setting(
        "both", "which of the graphs' directions `transfer_form` propagation hears: both, "
        "forward (sources before a unit) or backward (after it; over ListOps' gold trees, an "
        "operator's arguments alone: the bottom-up composition)", group="model and training",
        choices=("both", "forward", "backward"))
    propagation_hidden_units: Optional[int] = setting(
        None, "width of the hidden layer of `transfer_form` propagation's update (mlp: default "
        "twice the states'; gru: default none, the candidate one layer)",
        group="model and training")
    propagation_layer_norm: bool = setting(
        False, "`transfer_form` propagation: normalise its update's hidden pre-activations "
        "over their width (layer normalisation)", group="model and training")
    gold_form: str = setting(
        "tree", "the gold variants' graphs: tree (each unit to its parent and children) or chain "
        "(ListOps: each argument to the one before it, each ] to its list's last argument; a "
        "fold of one argument per propagation step)", group="model and training",
        choices=tuple(hparams.GOLD_FORMS))
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

    def transfer_form_options(self):
        """``transfer_form`` and the ``propagation_*`` settings, as the keyword arguments of
        ``build_classifier`` and ``build_pair_classifier`` (the same names)."""
        return {name: getattr(self, name) for name in PROPAGATION_OPTIONS}

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
        if c.propagation_hidden_units is not None and c.propagation_hidden_units < 1:
            raise ValueError(f"`propagation_hidden_units` must be >= 1 (or left out for the "
                             f"update's default), got {c.propagation_hidden_units}.")
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


def run_transfer(config, record=None):
    """Runs every variant of a :class:`TransferConfig` on every seed (and fold), writing
    ``results.json`` and ``results.md`` to ``config.output_dir`` after each run; returns the
    Markdown report. ``record`` (a dict) is stored in results.json's ``config`` along with the
    settings (the command line's own flags, for example). Raises ``ValueError`` for settings or
    data to change, before any training."""
    config = config.validated()
    with precision_scope(config.precision):
        if config.dataset in PAIR_DATASETS:
            return run_pairs(config, record)
        if config.dataset in READING_DATASETS:
            return run_reading(config, record)
        return run_classification(config, record)
