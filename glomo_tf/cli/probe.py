"""``glomo probe``: the flags of :class:`glomo_tf.experiments.probe.ProbeConfig`, then
:func:`glomo_tf.experiments.probe.run_probe`."""

from glomo_tf.cli.common import add_command, config_from
from glomo_tf.experiments.probe import ProbeConfig, run_probe

DESCRIPTION = ("SentEval's protocol on frozen sentence vectors: logistic regression, 10-fold "
               "cross-validation (MR, SUBJ, your files) or the dev split (SST-2) to choose the "
               "L2 strength; or the nearest sentences of queries in a pool.")


def register(subparsers):
    add_command(subparsers, "probe", ProbeConfig, run,
                help="probe sentence encoders with logistic regression (SentEval's protocol)",
                description=DESCRIPTION)


def run(args):
    run_probe(config_from(args, ProbeConfig))
    return 0
