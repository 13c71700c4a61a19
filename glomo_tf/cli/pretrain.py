"""``glomo pretrain``: the flags of :class:`glomo_tf.experiments.pretraining.PretrainingConfig`, then
:func:`glomo_tf.experiments.pretraining.run_pretraining`."""

import dataclasses

from glomo_tf import hparams
from glomo_tf.cli.common import (HelpFormatter, UsageError, add_precision_argument,
                                 add_verbose_argument, resolve_verbose)
from glomo_tf.experiments.pretraining import (OPTIMIZERS, SCHEDULES, SPLITTERS, PretrainingConfig,
                                  run_pretraining)

D = PretrainingConfig(output_dir="")  # the defaults
DESCRIPTION = "Unsupervised GLoMo pretraining on a real corpus, resumable after a crash."


def register(subparsers):
    p = subparsers.add_parser(
        "pretrain", help="pretrain a GLoMo graph predictor on a text corpus",
        description=DESCRIPTION + " Run it again with the same --output-dir to resume.",
        formatter_class=HelpFormatter)
    data = p.add_argument_group("data")
    data.add_argument("--train", nargs="+", metavar="FILE",
                      help="training text files or globs (plain or .gz), one paragraph per line")
    data.add_argument("--tfds", metavar="NAME",
                      help="a tensorflow-datasets corpus instead of files")
    data.add_argument("--tfds-split", default=D.tfds_split,
                      help="tfds split of --tfds, e.g. train or train[:10%%]")
    data.add_argument("--tfds-text-key", default=None, help="feature holding the text")
    data.add_argument("--validation", nargs="+", metavar="FILE", help="validation text files")
    data.add_argument("--validation-fraction", type=float, default=D.validation_fraction,
                      help="hold out this fraction of the lines for validation instead")
    data.add_argument("--vocab", metavar="DIR", help="an existing tokenizer directory to reuse")
    data.add_argument("--vocab-size", type=int, default=D.vocab_size,
                      help="most ids, <pad>/<unk> included")
    data.add_argument("--min-count", type=int, default=D.min_count,
                      help="least occurrences for a unit to enter the vocabulary")
    data.add_argument("--splitter", choices=SPLITTERS, default=D.splitter,
                      help="how text splits into words: at whitespace, or where the Unicode "
                           "script changes")
    data.add_argument("--lowercase", action="store_true",
                      help="lowercase the text before splitting (then pass lower-case text "
                           "everywhere after)")
    data.add_argument("--subword", action="store_true", help="WordPiece units instead of words")
    data.add_argument("--window", type=int, default=D.window, help="units per training window T")
    data.add_argument("--shift", type=int, default=D.shift, help="units between window starts")
    data.add_argument("--max-undecodable", type=float, default=D.max_undecodable, metavar="SHARE",
                      help="refuse files whose share of lines with invalid UTF-8 is larger")

    model = p.add_argument_group("model")
    model.add_argument("--hidden-dim", type=int, default=D.hidden_dim,
                       help="width d of embeddings, features and decoder states")
    model.add_argument("--num-layers", "--layers", dest="num_layers", type=int,
                       default=D.num_layers,
                       help="graph layers L")
    model.add_argument("--num-heads", "--heads", dest="num_heads", type=int, default=D.num_heads,
                       help="graph heads K per layer (must divide --hidden-dim)")
    model.add_argument("--head-dim", type=int, default=D.head_dim, help="default hidden-dim / 2")
    model.add_argument("--conv-layers", type=int, default=D.conv_layers,
                       help="convolution layers of the key and query networks")
    model.add_argument("--kernel-size", type=int, default=D.kernel_size,
                       help="width of those convolutions")
    model.add_argument("--threshold", choices=hparams.THRESHOLDS, default=D.threshold,
                       help="Eq. 1's threshold: one per query (query) or one per head (scalar)")
    model.add_argument("--normalization", choices=hparams.NORMALIZATIONS,
                       default=D.normalization,
                       help="graph normalisation: squared_relu (Eq. 1, learned threshold), "
                            "entmax15 (the same form, threshold solved per row), entmax "
                            "(alpha-entmax, --entmax-alpha) or softmax")
    model.add_argument("--entmax-alpha", type=float, default=D.entmax_alpha,
                       help="alpha of --normalization entmax, in (1, 2]: towards 1 rows keep "
                            "more sources (softmax at 1), 1.5 is entmax15, 2 sparsemax")
    model.add_argument("--coupled", action="store_true", help="the -decouple ablation")
    model.add_argument("--composition", choices=hparams.COMPOSITIONS, default=D.composition,
                       help="feature composition: gru (the reference code's), residual, or "
                            "projected (value projection, residual and LayerNorm)")
    model.add_argument("--context-length", type=int, default=D.context_length,
                       help="D, units decoded")
    model.add_argument("--decoder-layers", type=int, default=D.decoder_layers,
                       help="GRU layers of each direction's decoder")
    model.add_argument("--positions", dest="num_positions", default=str(D.num_positions),
                       help="positions decoded per window, or 'all'")
    model.add_argument("--objective", choices=hparams.OBJECTIVES, default=D.objective,
                       help="decode units from each position (unit) or across the window's middle "
                            "(sentence)")
    model.add_argument("--dropout", type=float, default=D.dropout,
                       help="dropout of the predictor and the decoders")
    model.add_argument("--live-row-weight", type=float, default=D.live_row_weight,
                       help="weight of the hinge that keeps every graph row's best score above "
                            "its threshold (0 turns it off: rows that die stay empty)")
    model.add_argument("--live-row-margin", type=float, default=D.live_row_margin,
                       help="how far above the threshold a row's best score must stay")

    opt = p.add_argument_group("optimisation")
    opt.add_argument("--optimizer", choices=OPTIMIZERS, default=D.optimizer,
                     help="sgd (with --momentum, the reference code's) or adam")
    opt.add_argument("--learning-rate", type=float, default=D.learning_rate,
                     help="default: 1.0 for sgd, 1e-3 for adam")
    opt.add_argument("--momentum", type=float, default=D.momentum, help="sgd momentum")
    opt.add_argument("--clipnorm", type=float, default=D.clipnorm, help="global gradient-norm clip")
    opt.add_argument("--schedule", choices=SCHEDULES, default=D.schedule,
                     help="plateau: halve the learning rate when validation loss stalls")
    opt.add_argument("--epochs", type=int, default=D.epochs,
                     help="epochs in all (a resumed run trains the ones missing)")
    opt.add_argument("--steps-per-epoch", type=int, default=D.steps_per_epoch,
                     help="default: one pass over the training windows")
    opt.add_argument("--batch-size", type=int, default=D.batch_size,
                     help="windows per replica per step (global = this x replicas)")
    opt.add_argument("--global-batch-size", type=int, default=D.global_batch_size,
                     help="windows per step over all replicas (instead of --batch-size)")
    opt.add_argument("--early-stopping", type=int, default=D.early_stopping, metavar="PATIENCE",
                     help="stop after this many epochs without validation improvement (0: off)")
    opt.add_argument("--seed", type=int, default=D.seed,
                     help="seed of the initial weights, the shuffles and the position sampling")
    opt.add_argument("--jit", action="store_true",
                     help="compile the train step with XLA (float32 on a CPU: XLA computes "
                          "bfloat16 at the float32 rate there)")
    add_precision_argument(opt)

    run_group = p.add_argument_group("run")
    run_group.add_argument("--output-dir", required=True,
                           help="run directory (resumed if it exists)")
    run_group.add_argument("--strategy", choices=hparams.STRATEGIES,
                           default=D.strategy,
                           help="tf.distribute strategy: one device, every local GPU, several "
                                "workers, or a TPU")
    run_group.add_argument("--tpu", default=D.tpu, help="TPU name or address for --strategy tpu")
    run_group.add_argument("--data-licence", default=D.data_licence, metavar="TEXT",
                           help="the corpus' licence, recorded in the preset's metadata.json")
    run_group.add_argument("--checkpoint-every", type=int, default=D.checkpoint_every,
                           metavar="STEPS",
                           help="steps between crash-safe checkpoints")
    run_group.add_argument("--probe", action="append", default=None, metavar="TEXT",
                           help="probe sentence drawn in TensorBoard every epoch (repeatable)")
    add_verbose_argument(run_group)
    p.set_defaults(func=run)


def run(args):
    names = {field.name for field in dataclasses.fields(PretrainingConfig)}
    settings = {k: v for k, v in vars(args).items() if k in names}
    settings["num_positions"] = _positions(settings["num_positions"])
    settings["verbose"] = resolve_verbose(settings["verbose"])
    config = PretrainingConfig(**settings)
    try:
        return run_pretraining(config)
    except FileNotFoundError as error:
        raise UsageError(str(error)) from None


def _positions(text):
    """``--positions``: a positive integer, or ``all`` (None: every position)."""
    if str(text).lower() == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f"--positions must be a positive integer or 'all', got {text!r}.")
    return value
