"""``glomo probe``: the flags of :class:`glomo_tf.experiments.probe.ProbeConfig`, then
:func:`glomo_tf.experiments.probe.run_probe`."""

import dataclasses

from glomo_tf import hparams
from glomo_tf.cli.common import HelpFormatter
from glomo_tf.experiments.probe import ProbeConfig, run_probe

D = ProbeConfig()  # the defaults
DESCRIPTION = ("SentEval's protocol on frozen sentence vectors: logistic regression, 10-fold "
               "cross-validation (MR, SUBJ, your files) or the dev split (SST-2) to choose the "
               "L2 strength; or the nearest sentences of queries in a pool.")


def register(subparsers):
    p = subparsers.add_parser(
        "probe", help="probe sentence encoders with logistic regression (SentEval's protocol)",
        description=DESCRIPTION, formatter_class=HelpFormatter)
    enc = p.add_argument_group("encoders")
    enc.add_argument("--run", dest="runs", nargs="+", default=[], metavar="DIR",
                     help="glomo sentence-pretrain run directories")
    enc.add_argument("--baselines", nargs="*", default=[], choices=hparams.PROBE_BASELINES,
                     help="bow: mean of the first run's word embeddings; random: an untrained "
                          "encoder of the first run's sizes")
    enc.add_argument("--glomo-run", dest="glomo_runs", nargs="+", default=[], metavar="DIR",
                     help="glomo pretrain run directories (GLoMo features)")
    enc.add_argument("--glomo-preset", dest="glomo_presets", nargs="+", default=[],
                     metavar="NAME_OR_DIR",
                     help="graph-predictor presets, built-in names or directories (GLoMo "
                          "features)")
    tasks = p.add_argument_group("tasks")
    tasks.add_argument("--tasks", nargs="*", default=None, choices=hparams.PROBE_TASKS,
                       help="built-in tasks (default: all of them, unless --file or "
                            "--neighbours is given)")
    tasks.add_argument("--file", dest="files", nargs="+", default=[], metavar="PATH",
                       help="your own task: a .tsv/.csv file or a folder of one file per class")
    tasks.add_argument("--text-column", default=D.text_column, help="text column of --file")
    tasks.add_argument("--label-column", default=D.label_column, help="label column of --file")
    tasks.add_argument("--data-dir", help="folder holding mr/, subj/ and sst/ (default: the "
                                          "checkout's ../shared/data)")
    tasks.add_argument("--max-examples", type=int, default=None,
                       help="a seeded subset of each task (of each split), for quick runs")
    cls = p.add_argument_group("classifier")
    cls.add_argument("--folds", type=int, default=D.folds, help="outer cross-validation folds")
    cls.add_argument("--inner-folds", type=int, default=D.inner_folds,
                     help="folds choosing the L2 strength inside each outer fold")
    cls.add_argument("--c-values", nargs="+", type=float, default=list(D.c_values),
                     help="inverse L2 strengths tried")
    cls.add_argument("--seed", type=int, default=D.seed, help="seed of the folds and subsets")
    cls.add_argument("--batch-size", type=int, default=D.batch_size,
                     help="sentences encoded at once")
    nn = p.add_argument_group("nearest neighbours")
    nn.add_argument("--neighbours", nargs="+", default=[], metavar="QUERY",
                    help="print the nearest sentences of these queries in --pool")
    nn.add_argument("--pool", help="a file of sentences, one per line")
    nn.add_argument("--k", type=int, default=D.k, help="neighbours per query")
    p.add_argument("--output-dir", help="write probe.json and probe.md here")
    p.set_defaults(func=run)


def run(args):
    names = {field.name for field in dataclasses.fields(ProbeConfig)}
    settings = {k: v for k, v in vars(args).items() if k in names}
    settings["c_values"] = tuple(settings["c_values"])
    run_probe(ProbeConfig(**settings))
    return 0
