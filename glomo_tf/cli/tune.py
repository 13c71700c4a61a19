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


from glomo_tf.cli.common import UsageError, add_command, config_from
from glomo_tf.experiments.search import SearchConfig, run_search


def register(subparsers):
    return add_command(
        subparsers, "tune", SearchConfig, run,
        help="search GLoMo pretraining settings (D, heads, layers, ...) with KerasTuner",
        description=__doc__.split("\n\n")[0] + " Run it again with the same --directory and "
                                               "--project to resume.")


def run(args):
    config = config_from(args, SearchConfig).validated()
    try:
        import keras_tuner  # noqa: F401
    except ImportError:
        raise UsageError("glomo tune needs KerasTuner: pip install -e \".[tune]\" (or "
                         "pip install keras-tuner==1.4.8).") from None
    return run_search(config)
