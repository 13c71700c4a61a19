"""``glomo sentence-pretrain``: the flags of
:class:`glomo_tf.experiments.sentence_pretraining.SentencePretrainingConfig`, then
:func:`glomo_tf.experiments.sentence_pretraining.run_sentence_pretraining`."""

import dataclasses

from glomo_tf import hparams
from glomo_tf.cli.common import (HelpFormatter, UsageError, add_precision_argument,
                                 add_verbose_argument, resolve_verbose)
from glomo_tf.data.sentences import CORPUS_FORMATS
from glomo_tf.experiments.sentence_pretraining import SentencePretrainingConfig, run_sentence_pretraining

D = SentencePretrainingConfig(output_dir="")  # the defaults
DESCRIPTION = ("Self-supervised sentence encoders (Quick Thoughts, Self Prediction, "
               "Global-to-Local; NCE over in-batch negatives), resumable after a crash.")


def register(subparsers):
    p = subparsers.add_parser(
        "sentence-pretrain", help="pretrain sentence encoders on consecutive sentences",
        description=DESCRIPTION + " Run it again with the same --output-dir to resume.",
        formatter_class=HelpFormatter)
    data = p.add_argument_group("data")
    data.add_argument("--train", nargs="+", metavar="FILE", help="training text files")
    data.add_argument("--format", choices=CORPUS_FORMATS, default=D.format,
                      help="wikitext: one paragraph per line, ' = Title = ' between articles; "
                           "lines: one sentence per line, blank lines between documents; books: "
                           "one paragraph of prose per line, blank lines between books (.gz "
                           "read as is)")
    data.add_argument("--validation", nargs="+", metavar="FILE",
                      help="validation files in the same format")
    data.add_argument("--vocab", metavar="DIR", help="an existing tokenizer directory "
                                                     "([MASK] is added when missing)")
    data.add_argument("--vocab-size", type=int, default=D.vocab_size,
                      help="most ids, <pad>/<unk> included, [MASK] added")
    data.add_argument("--min-count", type=int, default=D.min_count,
                      help="least occurrences for a word to enter the vocabulary")
    data.add_argument("--lowercase", action="store_true", help="lowercase the text")
    data.add_argument("--max-length", type=int, default=D.max_length,
                      help="units per sentence (longer ones are cut)")
    model = p.add_argument_group("model")
    model.add_argument("--embedding-dim", type=int, default=D.embedding_dim,
                       help="word embedding width")
    model.add_argument("--units", type=int, default=D.units,
                       help="GRU units per direction (a sentence vector has 4 x units)")
    model.add_argument("--objectives", nargs="+", choices=hparams.SENTENCE_OBJECTIVES,
                       default=list(D.objectives),
                       help="qt: Quick Thoughts (Eq. 3.3); sp: Self Prediction (Eq. 3.4); "
                            "g2l: Global-to-Local (Eq. 3.5)")
    model.add_argument("--objectives-per-batch", default=str(D.objectives_per_batch),
                       help="objectives sampled for each batch, or 'all'")
    model.add_argument("--neighbours", choices=hparams.SENTENCE_NEIGHBOURS, default=D.neighbours,
                       help="Quick Thoughts' targets: the next sentence, or both neighbours")
    model.add_argument("--l2-weight", type=float, default=D.l2_weight,
                       help="Global-to-Local's L2 penalty on the representations")
    model.add_argument("--graph-run", metavar="DIR",
                       help="a glomo pretrain run whose frozen graphs feed both encoders "
                            "(GlomoTransfer on the embeddings; its tokenizer is used)")
    model.add_argument("--num-mixtures", type=int, default=D.num_mixtures,
                       help="GlomoTransfer mixtures per direction (with --graph-run)")
    opt = p.add_argument_group("optimisation")
    opt.add_argument("--learning-rate", type=float, default=D.learning_rate, help="Adam's")
    opt.add_argument("--clipnorm", type=float, default=D.clipnorm,
                     help="global gradient-norm clip (0: none)")
    opt.add_argument("--epochs", type=int, default=D.epochs,
                     help="epochs in all (a resumed run trains the ones missing)")
    opt.add_argument("--steps-per-epoch", type=int, default=D.steps_per_epoch,
                     help="default: one pass over the sentence pairs")
    opt.add_argument("--batch-size", type=int, default=D.batch_size,
                     help="sentence pairs per step; the other pairs are the negatives")
    opt.add_argument("--seed", type=int, default=D.seed,
                     help="seed of the weights, the order, the objectives and corruptions")
    opt.add_argument("--jit", action="store_true", help="compile the train step with XLA")
    add_precision_argument(opt)
    run_group = p.add_argument_group("run")
    run_group.add_argument("--output-dir", required=True,
                           help="run directory (resumed if it exists)")
    run_group.add_argument("--checkpoint-every", type=int, default=D.checkpoint_every,
                           metavar="STEPS", help="steps between crash-safe checkpoints")
    add_verbose_argument(run_group)
    p.set_defaults(func=run)


def run(args):
    names = {field.name for field in dataclasses.fields(SentencePretrainingConfig)}
    settings = {k: v for k, v in vars(args).items() if k in names}
    settings["objectives"] = tuple(settings["objectives"])
    settings["objectives_per_batch"] = _per_batch(settings["objectives_per_batch"])
    settings["verbose"] = resolve_verbose(settings["verbose"])
    return run_sentence_pretraining(SentencePretrainingConfig(**settings))


def _per_batch(text):
    if str(text).lower() == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f"--objectives-per-batch must be a positive integer or 'all', got "
                         f"{text!r}.")
    return value
