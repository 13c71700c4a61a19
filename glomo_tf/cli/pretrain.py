"""``glomo pretrain``: the flags of the settings of
:class:`glomo_tf.experiments.pretraining.PretrainingConfig`, then
:func:`glomo_tf.experiments.pretraining.run_pretraining`."""

from glomo_tf.cli.common import (HelpFormatter, UsageError, add_settings, add_verbose_argument,
                                 config_from)
from glomo_tf.experiments.pretraining import PretrainingConfig, run_pretraining

DESCRIPTION = "Unsupervised GLoMo pretraining on a real corpus, resumable after a crash."


def register(subparsers):
    p = subparsers.add_parser(
        "pretrain", help="pretrain a GLoMo graph predictor on a text corpus",
        description=DESCRIPTION + " Run it again with the same --output-dir to resume.",
        formatter_class=HelpFormatter)
    groups = add_settings(p, PretrainingConfig)
    add_verbose_argument(groups["run"])
    p.set_defaults(func=run)


def run(args):
    try:
        return run_pretraining(config_from(args, PretrainingConfig))
    except FileNotFoundError as error:
        raise UsageError(str(error)) from None
