"""``glomo pretrain``: the flags of the settings of
:class:`glomo_tf.experiments.pretraining.PretrainingConfig`, then
:func:`glomo_tf.experiments.pretraining.run_pretraining`."""

from glomo_tf.cli.common import UsageError, add_command, config_from
from glomo_tf.experiments.pretraining import PretrainingConfig, run_pretraining

DESCRIPTION = "Unsupervised GLoMo pretraining on a real corpus, resumable after a crash."


def register(subparsers):
    add_command(subparsers, "pretrain", PretrainingConfig, run,
                help="pretrain a GLoMo graph predictor on a text corpus",
                description=DESCRIPTION + " Run it again with the same --output-dir to resume.")


def run(args):
    try:
        return run_pretraining(config_from(args, PretrainingConfig))
    except FileNotFoundError as error:
        raise UsageError(str(error)) from None
