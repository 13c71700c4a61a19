"""``glomo sentence-pretrain``: the flags of
:class:`glomo_tf.experiments.sentence_pretraining.SentencePretrainingConfig`, then
:func:`glomo_tf.experiments.sentence_pretraining.run_sentence_pretraining`."""

from glomo_tf.cli.common import HelpFormatter, add_settings, add_verbose_argument, config_from
from glomo_tf.experiments.sentence_pretraining import (SentencePretrainingConfig,
                                                       run_sentence_pretraining)

DESCRIPTION = ("Self-supervised sentence encoders (Quick Thoughts, Self Prediction, "
               "Global-to-Local; NCE over in-batch negatives), resumable after a crash.")


def register(subparsers):
    p = subparsers.add_parser(
        "sentence-pretrain", help="pretrain sentence encoders on consecutive sentences",
        description=DESCRIPTION + " Run it again with the same --output-dir to resume.",
        formatter_class=HelpFormatter)
    groups = add_settings(p, SentencePretrainingConfig)
    add_verbose_argument(groups["run"])
    p.set_defaults(func=run)


def run(args):
    return run_sentence_pretraining(config_from(args, SentencePretrainingConfig))
