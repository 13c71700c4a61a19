"""``glomo sentence-pretrain``: the flags of
:class:`glomo_tf.experiments.sentence_pretraining.SentencePretrainingConfig`, then
:func:`glomo_tf.experiments.sentence_pretraining.run_sentence_pretraining`."""

from glomo_tf.cli.common import add_command, config_from
from glomo_tf.experiments.sentence_pretraining import (SentencePretrainingConfig,
                                                       run_sentence_pretraining)

DESCRIPTION = ("Self-supervised sentence encoders (Quick Thoughts, Self Prediction, "
               "Global-to-Local; NCE over in-batch negatives), resumable after a crash.")


def register(subparsers):
    add_command(subparsers, "sentence-pretrain", SentencePretrainingConfig, run,
                help="pretrain sentence encoders on consecutive sentences",
                description=DESCRIPTION + " Run it again with the same --output-dir to resume.")


def run(args):
    return run_sentence_pretraining(config_from(args, SentencePretrainingConfig))
