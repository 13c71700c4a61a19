"""``glomo pretrain``'s settings: :class:`PretrainingConfig`, its checks, what resuming may change.

:func:`glomo_tf.experiments.pretraining.run_pretraining` runs a config; the command line builds
its flags from the config's fields (:mod:`glomo_tf.experiments.settings`).
"""

import dataclasses
from typing import Optional

from glomo_tf import hparams
from glomo_tf.precision import check_precision
from glomo_tf.experiments.runs import refuse_changed_settings
from glomo_tf.experiments.settings import (count_or_all, precision_setting, setting,
                                           verbose_setting)

_MODEL = hparams.PRETRAIN_COMMAND
# GlomoPretrainer.from_sizes' arguments among the settings (initial_threshold keeps its default).
MODEL_ARGS = tuple(k for k in _MODEL if k != "initial_threshold")
# Settings that may change between a run and its resumption (everything else must match).
RESUMABLE = ("epochs", "checkpoint_every", "early_stopping", "probe", "verbose", "strategy", "tpu",
             "max_undecodable", "data_licence")
OPTIMIZERS = ("sgd", "adam")
SCHEDULES = ("plateau", "constant", "cosine")
SPLITTERS = ("whitespace", "unicode_script")


@dataclasses.dataclass(kw_only=True)
class PretrainingConfig:
    """Every setting of a pretraining run (``glomo pretrain``'s flags, one field each).

    The model's defaults are :data:`glomo_tf.hparams.PRETRAIN_COMMAND`. :meth:`validated` checks
    the settings and fills the defaults that depend on others;
    :func:`~glomo_tf.experiments.pretraining.run_pretraining` runs them.
    """

    # data
    train: Optional[list] = setting(None, "training text files or globs (plain or .gz), one "
                                    "paragraph per line", group="data", metavar="FILE")
    tfds: Optional[str] = setting(None, "a tensorflow-datasets corpus instead of files",
                                  group="data", metavar="NAME")
    tfds_split: str = setting("train", "tfds split of `tfds`, e.g. train or train[:10%]",
                              group="data")
    tfds_text_key: Optional[str] = setting(None, "feature holding the text", group="data")
    validation: Optional[list] = setting(None, "validation text files", group="data",
                                         metavar="FILE")
    validation_fraction: float = setting(0.0, "hold out this fraction of the lines for "
                                         "validation instead", group="data")
    vocab: Optional[str] = setting(None, "an existing tokenizer directory to reuse",
                                   group="data", metavar="DIR")
    vocab_size: int = setting(100_000, "most ids, <pad>/<unk> included", group="data")
    min_count: int = setting(1, "least occurrences for a unit to enter the vocabulary",
                             group="data")
    splitter: str = setting("whitespace", "how text splits into words: at whitespace, or where "
                            "the Unicode script changes", group="data", choices=SPLITTERS)
    lowercase: bool = setting(False, "lowercase the text before splitting (then pass lower-case "
                              "text everywhere after)", group="data")
    subword: bool = setting(False, "WordPiece units instead of words", group="data")
    window: int = setting(200, "units per training window T", group="data")
    shift: int = setting(100, "units between window starts", group="data")
    max_undecodable: float = setting(0.01, "refuse files whose share of lines with invalid "
                                     "UTF-8 is larger", group="data", metavar="SHARE")
    # model (GlomoPretrainer.from_sizes)
    hidden_dim: int = setting(_MODEL["hidden_dim"], "width d of embeddings, features and "
                              "decoder states", group="model")
    num_layers: int = setting(_MODEL["num_layers"], "graph layers L", group="model",
                              flags=("--num-layers", "--layers"))
    num_heads: int = setting(_MODEL["num_heads"], "graph heads K per layer (must divide "
                             "`hidden_dim`)", group="model", flags=("--num-heads", "--heads"))
    head_dim: Optional[int] = setting(_MODEL["head_dim"], "default hidden-dim / 2",
                                      group="model")
    conv_layers: int = setting(_MODEL["conv_layers"], "convolution layers of the key and query "
                               "networks", group="model")
    kernel_size: int = setting(_MODEL["kernel_size"], "width of those convolutions",
                               group="model")
    threshold: str = setting(_MODEL["threshold"], "Eq. 1's threshold: one per query (query) or "
                             "one per head (scalar)", group="model", choices=hparams.THRESHOLDS)
    normalization: str = setting(
        _MODEL["normalization"], "graph normalisation: squared_relu (Eq. 1, learned threshold), "
        "entmax15 (the same form, threshold solved per row), entmax (alpha-entmax, "
        "`entmax_alpha`) or softmax", group="model", choices=hparams.NORMALIZATIONS)
    entmax_alpha: float = setting(
        _MODEL["entmax_alpha"], "alpha of `normalization` entmax, in (1, 2]: towards 1 rows keep "
        "more sources (softmax at 1), 1.5 is entmax15, 2 sparsemax", group="model")
    coupled: bool = setting(_MODEL["coupled"], "the -decouple ablation", group="model")
    composition: str = setting(_MODEL["composition"], "feature composition: gru (the reference "
                               "code's), residual, or projected (value projection, residual and "
                               "LayerNorm)", group="model", choices=hparams.COMPOSITIONS)
    context_length: int = setting(_MODEL["context_length"], "D, units decoded", group="model")
    decoder_layers: int = setting(_MODEL["decoder_layers"], "GRU layers of each direction's "
                                  "decoder", group="model")
    num_positions: Optional[int] = setting(_MODEL["num_positions"], "positions decoded per "
                                           "window, or 'all'", group="model", metavar="N",
                                           flags=("--positions",), parse=str)
    objective: str = setting(_MODEL["objective"], "decode units from each position (unit) or "
                             "across the window's middle (sentence)", group="model",
                             choices=hparams.OBJECTIVES)
    dropout: float = setting(_MODEL["dropout"], "dropout of the predictor and the decoders",
                             group="model")
    live_row_weight: float = setting(
        _MODEL["live_row_weight"], "weight of the hinge that keeps every graph row's best score "
        "above its threshold (0 turns it off: rows that die stay empty)", group="model")
    live_row_margin: float = setting(_MODEL["live_row_margin"], "how far above the threshold a "
                                     "row's best score must stay", group="model")
    # optimisation
    optimizer: str = setting("sgd", "sgd (with `momentum`, the reference code's) or adam",
                             group="optimisation", choices=OPTIMIZERS)
    learning_rate: Optional[float] = setting(None, "default: 1.0 for sgd, 1e-3 for adam",
                                             group="optimisation")
    momentum: float = setting(0.2, "sgd momentum", group="optimisation")
    clipnorm: float = setting(0.25, "global gradient-norm clip", group="optimisation")
    schedule: str = setting("plateau", "plateau: halve the learning rate when validation loss "
                            "stalls", group="optimisation", choices=SCHEDULES)
    epochs: int = setting(10, "epochs in all (a resumed run trains the ones missing)",
                          group="optimisation")
    steps_per_epoch: Optional[int] = setting(None, "default: one pass over the training "
                                             "windows; shorter epochs read them part after part",
                                             group="optimisation")
    batch_size: Optional[int] = setting(None, "windows per replica per step (global = this x "
                                        "replicas; default 32)", group="optimisation")
    global_batch_size: Optional[int] = setting(None, "windows per step over all replicas "
                                               "(instead of `batch_size`)",
                                               group="optimisation")
    early_stopping: int = setting(0, "stop after this many epochs without validation "
                                  "improvement (0: off)", group="optimisation",
                                  metavar="PATIENCE")
    seed: int = setting(0, "seed of the initial weights, the shuffles and the position "
                        "sampling", group="optimisation")
    jit: bool = setting(False, "compile the train step with XLA (float32 on a CPU: XLA computes "
                        "bfloat16 at the float32 rate there)", group="optimisation")
    precision: str = precision_setting("optimisation")
    # run
    output_dir: str = setting(help="run directory (resumed if it exists)", group="run")
    strategy: str = setting("default", "tf.distribute strategy: one device, every local GPU, "
                            "several workers, or a TPU", group="run", choices=hparams.STRATEGIES)
    tpu: Optional[str] = setting(None, "TPU name or address for `strategy` tpu", group="run")
    checkpoint_every: int = setting(200, "steps between crash-safe checkpoints", group="run",
                                    metavar="STEPS")
    probe: Optional[list] = setting(None, "a probe sentence drawn in TensorBoard every epoch "
                                    "(repeatable)", group="run", metavar="TEXT", repeat=True)
    verbose: int = verbose_setting(group="run")
    data_licence: Optional[str] = setting(None, "the corpus' licence, recorded in the preset's "
                                          "metadata.json", group="run", metavar="TEXT")

    def validated(self):
        """A copy with the defaults that depend on other settings filled in (batch size 32,
        learning rate 1.0 for SGD and 1e-3 for Adam, no probes); raises ``ValueError`` naming the
        setting to change."""
        c = dataclasses.replace(self)
        _check_ranges(c)
        check_precision(c.precision)
        if not c.train and not c.tfds:
            raise ValueError("give the corpus with `train` FILE... (text files or globs) or "
                             "`tfds` NAME.")
        if c.train and c.tfds:
            raise ValueError("`train` and `tfds` are alternatives; pass one of them.")
        c.num_positions = count_or_all(c.num_positions, "num_positions")
        if c.batch_size is not None and c.global_batch_size is not None:
            raise ValueError("`batch_size` (per replica) and `global_batch_size` are alternatives.")
        if c.batch_size is None and c.global_batch_size is None:
            c.batch_size = 32
        if c.learning_rate is None:
            c.learning_rate = 1.0 if c.optimizer == "sgd" else 1e-3
        hparams.check_entmax_alpha(c.entmax_alpha, "`entmax_alpha`", "`normalization` softmax")
        if c.live_row_weight < 0 or c.live_row_margin < 0:
            raise ValueError("`live_row_weight` and `live_row_margin` must be >= 0.")
        if c.window <= c.context_length:
            raise ValueError(f"`window` ({c.window}) must be longer than `context_length` "
                             f"({c.context_length}).")
        hparams.check_heads_divide(c.hidden_dim, c.num_heads, ("`hidden_dim`", "`num_heads`"))
        if c.validation and c.validation_fraction:
            raise ValueError("`validation` and `validation_fraction` are alternatives.")
        if c.probe is None:
            c.probe = []
        return c

    def model_args(self):
        """``GlomoPretrainer.from_sizes``' keyword arguments."""
        return {k: getattr(self, k) for k in MODEL_ARGS}



# Each setting's smallest value (None allowed where the default is None).
_AT_LEAST = dict(hidden_dim=1, num_layers=1, num_heads=1, head_dim=1, conv_layers=0, kernel_size=1,
                 context_length=1, decoder_layers=1, vocab_size=3, min_count=1, window=2, shift=1,
                 epochs=1, steps_per_epoch=1, batch_size=1, global_batch_size=1, momentum=0,
                 clipnorm=0, early_stopping=0, checkpoint_every=1)


def _check_ranges(c):
    """Raises ``ValueError`` naming the first flag whose value is out of range."""
    for name, least in _AT_LEAST.items():
        value = getattr(c, name)
        if value is not None and value < least:
            raise ValueError(f"`{name}` must be at least {least}, got {value}.")
    if not 0.0 <= c.max_undecodable <= 1.0:
        raise ValueError(f"`max_undecodable` must be in [0, 1], got {c.max_undecodable}.")
    for name in ("validation_fraction", "dropout"):
        value = getattr(c, name)
        if not 0.0 <= value < 1.0:
            raise ValueError(f"`{name}` must be in [0, 1), got {value}.")
    if c.learning_rate is not None and c.learning_rate <= 0:
        raise ValueError(f"`learning_rate` must be > 0, got {c.learning_rate}.")


def check_resumable(saved, current):
    """Raises ``ValueError`` when a resumed run was started with different settings."""
    if "precision" not in saved:  # a run directory written before --precision
        saved = dict(saved)
        saved["precision"] = "mixed_bfloat16" if saved.pop("mixed_precision", False) \
            else "float32"
    if "entmax_alpha" not in saved:  # a run directory written before --entmax-alpha
        saved = dict(saved, entmax_alpha=_MODEL["entmax_alpha"])
    refuse_changed_settings(saved, current, RESUMABLE, "the run directory holds a run",
                            "Resume with the same settings, or start a new run with another "
                            "`output_dir`.", paths=("train", "validation", "vocab"))
