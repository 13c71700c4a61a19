"""Sweep the context length D with KerasTuner on the built-in planted corpus (a minute on a CPU).

Each trial pretrains a tiny GLoMo with one value of D and is scored by ``val_first_unit_loss``,
the cross-entropy of the first predicted unit only, so trials with different D compare fairly (the
pretraining loss grows with D: farther units are harder to predict). Run it again and it resumes:
the finished trials are reloaded from ``tune-example/context_length``, not re-run.

    pip install -e ".[tune]"
    python examples/tune_context_length.py
    tensorboard --logdir tune-example/context_length/logs     # HPARAMS tab: D against the loss
"""

import os

import keras
import tensorflow as tf

from glomo_tf.data import planted
from glomo_tf.experiments.demo import CORPUS
from glomo_tf.tuning import GlomoHyperModel, make_tuner, results_table

DIRECTORY, PROJECT = "tune-example", "context_length"


def main():
    keras.utils.set_random_seed(0)
    train = planted.builtin_corpus("train", 512, **CORPUS)
    validation = planted.builtin_corpus("test", 64, **CORPUS)
    train_ds = (tf.data.Dataset.from_tensor_slices(train.token_ids).shuffle(512, seed=0)
                .batch(32, drop_remainder=True).repeat())
    val_ds = tf.data.Dataset.from_tensor_slices(validation.token_ids).batch(32)

    # Only D varies; the rest is a tiny fixed model (one value per choice).
    hypermodel = GlomoHyperModel(
        train.vocabulary.size, context_lengths=(1, 2, 3, 5), num_heads=(2,), num_layers=(2,),
        thresholds=("scalar",), hidden_dim=32, learning_rates=(3e-3,),
        fixed=dict(conv_layers=1, decoder_layers=1, num_positions=None))
    tuner = make_tuner("random", hypermodel, DIRECTORY, PROJECT, max_trials=4, seed=0)
    tuner.search(train_ds, validation_data=val_ds, epochs=2, steps_per_epoch=10, shuffle=False,
                 callbacks=[keras.callbacks.TensorBoard(os.path.join(DIRECTORY, PROJECT, "logs"))],
                 verbose=0)
    print(results_table(tuner))


if __name__ == "__main__":
    main()
