"""``glomo tune``: search context length, heads, layers, threshold and learning rate with KerasTuner.

The flags of :class:`glomo_tf.experiments.search.SearchConfig`, then
:func:`glomo_tf.experiments.search.run_search`.

Every trial pretrains a :class:`~glomo_tf.GlomoPretrainer` and is scored by
``val_first_unit_loss``, the cross-entropy of the first predicted unit only (``x_{t+1}`` forward,
``x_{t-1}`` backward) at every position of the validation windows: unlike the pretraining loss,
it does not grow with the context length ``D``, so trials with different ``D`` compare fairly.

A search lives in ``DIRECTORY/PROJECT``::

    DIRECTORY/PROJECT/oracle.json, trial_*/   KerasTuner's state: re-running the same command
                                              resumes (finished trials are kept, not re-run)
    DIRECTORY/PROJECT/tune_config.json        the settings (checked again when resuming)
    DIRECTORY/PROJECT/tokenizer/              the vocabulary of --train (reused when resuming)
    DIRECTORY/PROJECT/logs/                   TensorBoard: curves and, in the HPARAMS tab, every
                                              trial's hyper-parameters against its metrics
    DIRECTORY/PROJECT/results.md, .json       the trials, best first

Examples::

    glomo tune --planted --max-trials 6 --epochs 2 --steps-per-epoch 50 --hidden-dim 32
    glomo tune --train "corpus/*.txt.gz" --validation-fraction 0.01 --vocab-size 50000 \\
        --window 200 --batch-size 32 --tuner bayesian --max-trials 30 --epochs 3 \\
        --steps-per-epoch 2000 --context-lengths 1 2 3 4 5 --heads 2 4 8 --layers 1 2 3 \\
        --hidden-dim 256 --directory tuning --project wiki
"""


from glomo_tf.cli.common import (HelpFormatter, UsageError, add_verbose_argument,
                                 resolve_verbose)
from glomo_tf.experiments.search import PLANTED_WINDOW, TEXT_WINDOW, SearchConfig, run_search

D = SearchConfig()  # the defaults


def register(subparsers):
    p = subparsers.add_parser(
        "tune", help="search GLoMo pretraining settings (D, heads, layers, ...) with KerasTuner",
        description=__doc__.split("\n\n")[0] + " Run it again with the same --directory and "
                                               "--project to resume.",
        formatter_class=HelpFormatter)
    data = p.add_argument_group("data (one of --train, --planted)")
    data.add_argument("--train", nargs="+", metavar="FILE",
                      help="training text files or globs (plain or .gz), one paragraph per line")
    data.add_argument("--planted", action="store_true",
                      help="the built-in generated corpus of `glomo demo` (no data needed)")
    data.add_argument("--validation-fraction", type=float, default=D.validation_fraction,
                      help="--train: fraction of the lines held out; --planted: held-out windows "
                           "(a different seed) as this fraction of the training windows")
    data.add_argument("--window", type=int, default=D.window,
                      help=f"units per window T (default {TEXT_WINDOW}; {PLANTED_WINDOW} with "
                           "--planted)")
    data.add_argument("--shift", type=int, default=D.shift,
                      help="--train: units between window starts (default window / 2)")
    data.add_argument("--vocab-size", type=int, default=D.vocab_size,
                      help="--train: most vocabulary ids, <pad>/<unk> included")
    data.add_argument("--batch-size", type=int, default=D.batch_size, help="windows per step")

    space = p.add_argument_group("search space")
    space.add_argument("--context-lengths", type=int, nargs="+", default=D.context_lengths,
                       metavar="D", help="context lengths D to try")
    space.add_argument("--heads", type=int, nargs="+", default=D.heads, metavar="K",
                       help="head counts to try (each must divide --hidden-dim)")
    space.add_argument("--layers", type=int, nargs="+", default=D.layers, metavar="L",
                       help="graph layer counts to try")
    space.add_argument("--thresholds", nargs="+", default=D.thresholds,
                       metavar="KIND", help="graph thresholds to try: query, scalar")
    space.add_argument("--learning-rates", type=float, nargs="+", default=D.learning_rates,
                       metavar="LR", help="Adam learning rates to try")
    space.add_argument("--hidden-dim", type=int, default=D.hidden_dim, help="fixed width d")

    search = p.add_argument_group("search")
    search.add_argument("--tuner", default=D.tuner,
                        help="random (RandomSearch), hyperband (Hyperband, at most --epochs per "
                             "model) or bayesian (BayesianOptimization)")
    search.add_argument("--max-trials", type=int, default=D.max_trials,
                        help="trials in all, finished ones included when resuming")
    search.add_argument("--epochs", type=int, default=D.epochs, help="epochs per trial")
    search.add_argument("--steps-per-epoch", type=int, default=D.steps_per_epoch,
                        help="default: one pass over the training windows")
    search.add_argument("--directory", default=D.directory, help="where searches are kept")
    search.add_argument("--project", default=D.project, help="the search's name in --directory")
    search.add_argument("--overwrite", action="store_true",
                        help="delete DIRECTORY/PROJECT and start afresh (default: resume)")
    search.add_argument("--seed", type=int, default=D.seed,
                        help="seeds the data split, the oracle and every trial's initial weights")
    add_verbose_argument(search)
    p.set_defaults(func=run)
    return p


def run(args):
    fields = SearchConfig.__dataclass_fields__
    settings = {k: v for k, v in vars(args).items() if k in fields}
    settings["verbose"] = resolve_verbose(settings["verbose"])
    config = SearchConfig(**settings).validated()
    try:
        import keras_tuner  # noqa: F401
    except ImportError:
        raise UsageError("glomo tune needs KerasTuner: pip install -e \".[tune]\" (or "
                         "pip install keras-tuner==1.4.8).") from None
    return run_search(config)
