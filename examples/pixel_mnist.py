"""Pixel-by-pixel MNIST with a shared/private GRU and local auxiliary losses (SharedPrivateRNN).

Each image is read as a sequence of pixels (784 steps; ``--downsample 2`` averages 2x2 blocks:
14 x 14 = 196 steps) and classified from the GRU's last state. During training, at
``--anchors`` anchors per image, an auxiliary GRU started from the shared part of the state
reconstructs the preceding ``--reconstruct-length`` pixels (backwards) and predicts the following
``--predict-length`` pixels; ``--aux-weight`` times their cross-entropy is added to the loss.

:class:`glomo_tf.SharedPrivateRNN`'s auxiliary decoders are classifiers over token ids (softmax
over ``vocabulary_size``), not regressors, so the pixel intensities are **quantised** into
``--levels`` bins (default 8) used as ids ``1..levels`` for the auxiliary targets; id 0 is unused
(it means padding elsewhere in the library). The GRU itself reads the continuous intensity in
``[0, 1]``.

MNIST comes from tensorflow-datasets (downloaded on first use into ``--data-dir``, tfds' default
when omitted)::

    pip install tensorflow-datasets
    python examples/pixel_mnist.py --downsample 2 --limit 5000 --epochs 2

It prints JSON with the test accuracy and, per epoch, the training loss and its auxiliary part
(``aux_loss``).

References:
    "RNNs with private and shared representations for semi-supervised sequence learning"
    (sequential MNIST, Section 4); Trinh, Dai, Luong and Le, "Learning longer-term dependencies in
    RNNs with auxiliary losses", ICML 2018.
"""

import argparse
import json
import sys
import time

import keras
import numpy as np
import tensorflow as tf

from glomo_tf import SharedPrivateRNN


# ---------------------------------------------------------------------------------- data
def load_mnist(split, data_dir=None, limit=None):
    """``(images, labels)`` of a tfds ``mnist`` split: float32 ``[n, 28, 28]`` in ``[0, 1]`` and
    int32 ``[n]``; only the first ``limit`` examples when given."""
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise ImportError("This example needs tensorflow-datasets: pip install "
                          "tensorflow-datasets") from None
    dataset = tfds.load("mnist", split=split, data_dir=data_dir, as_supervised=True,
                        shuffle_files=False)
    if limit is not None:
        dataset = dataset.take(limit)
    images, labels = [], []
    for image, label in dataset.batch(1024).as_numpy_iterator():
        images.append(image)
        labels.append(label)
    images = np.concatenate(images).astype("float32")[..., 0] / 255.0
    return images, np.concatenate(labels).astype("int32")


def pixel_sequences(images, downsample=1):
    """Images ``[n, H, W]`` -> pixel sequences ``[n, (H / f) * (W / f), 1]`` in raster order,
    each pixel the mean of an ``f x f`` block (``f = downsample``)."""
    n, height, width = images.shape
    if height % downsample or width % downsample:
        raise ValueError(f"--downsample {downsample} does not divide the image size "
                         f"{height}x{width}.")
    blocks = images.reshape(n, height // downsample, downsample, width // downsample, downsample)
    return blocks.mean(axis=(2, 4)).reshape(n, -1, 1).astype("float32")


def quantise(pixels, levels):
    """Intensities in ``[0, 1]`` -> int32 ids ``1..levels`` (equal-width bins), the auxiliary
    targets; the trailing feature axis is dropped."""
    bins = np.clip(np.floor(pixels[..., 0] * levels), 0, levels - 1).astype("int32")
    return bins + 1


# ---------------------------------------------------------------------------------- model
class AuxiliaryLossModel(keras.Model):
    """A functional model that also reports the auxiliary part of its training loss.

    Keras adds the layers' ``add_loss`` terms to the compiled loss; this model records their sum
    as the ``aux_loss`` metric (during training only: the auxiliary loss is not computed at
    inference).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.aux_tracker = keras.metrics.Mean(name="aux_loss")

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = super().compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight,
                                    training=training)
        if training:
            losses = self.losses
            self.aux_tracker.update_state(tf.add_n(losses) if losses else 0.0)
        return loss


def build_model(units, shared_fraction, aux_weight, levels, anchors, reconstruct_length,
                predict_length, learning_rate, seed=0):
    """Pixels ``[batch, T, 1]`` and their quantised ids ``[batch, T]`` -> class probabilities."""
    pixels = keras.Input((None, 1), name="pixels")
    pixel_ids = keras.Input((None,), dtype="int32", name="pixel_ids")
    rnn = SharedPrivateRNN(units, shared_fraction=shared_fraction, num_anchors=anchors,
                           reconstruct_length=reconstruct_length, predict_length=predict_length,
                           aux_weight=aux_weight, vocabulary_size=levels + 1,
                           return_sequences=False, seed=seed, name="shared_private_rnn")
    state = rnn(pixels, aux_targets=pixel_ids)
    probabilities = keras.layers.Dense(10, activation="softmax", name="classes")(state)
    model = AuxiliaryLossModel({"pixels": pixels, "pixel_ids": pixel_ids}, probabilities,
                               name="pixel_mnist")
    model.compile(keras.optimizers.Adam(learning_rate, clipnorm=1.0),
                  "sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def model_inputs(pixels, levels):
    return {"pixels": pixels, "pixel_ids": quantise(pixels, levels)}


# ---------------------------------------------------------------------------------- main
def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=None, help="tensorflow-datasets data directory")
    parser.add_argument("--limit", type=int, default=None,
                        help="use only the first N training and N test images")
    parser.add_argument("--downsample", type=int, default=1,
                        help="average FxF pixel blocks (2: 14x14 = 196 steps)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--units", type=int, default=64, help="GRU state width")
    parser.add_argument("--shared-fraction", type=float, default=0.5,
                        help="share of the state sent to the auxiliary tasks")
    parser.add_argument("--aux-weight", type=float, default=1.0,
                        help="coefficient of the auxiliary loss (0: no auxiliary loss)")
    parser.add_argument("--levels", type=int, default=8, help="intensity bins of the targets")
    parser.add_argument("--anchors", type=int, default=2, help="anchors per image")
    parser.add_argument("--reconstruct-length", type=int, default=16)
    parser.add_argument("--predict-length", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verbose", type=int, default=2, help="Keras fit verbosity")
    return parser.parse_args(argv)


def main(argv=None):
    """Loads MNIST, trains, evaluates; prints and returns the results (a dict)."""
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    train_images, train_labels = load_mnist("train", args.data_dir, args.limit)
    test_images, test_labels = load_mnist("test", args.data_dir, args.limit)
    train_pixels = pixel_sequences(train_images, args.downsample)
    test_pixels = pixel_sequences(test_images, args.downsample)
    model = build_model(args.units, args.shared_fraction, args.aux_weight, args.levels,
                        args.anchors, args.reconstruct_length, args.predict_length,
                        args.learning_rate, args.seed)
    start = time.perf_counter()
    history = model.fit(model_inputs(train_pixels, args.levels), train_labels,
                        batch_size=args.batch_size, epochs=args.epochs, shuffle=True,
                        verbose=args.verbose)
    seconds = time.perf_counter() - start
    scores = model.evaluate(model_inputs(test_pixels, args.levels), test_labels,
                            batch_size=args.batch_size, verbose=0, return_dict=True)
    results = {"test_accuracy": float(scores["accuracy"]), "train_examples": len(train_labels),
               "test_examples": len(test_labels), "sequence_length": train_pixels.shape[1],
               "train_loss": [float(v) for v in history.history["loss"]],
               "aux_loss": [float(v) for v in history.history["aux_loss"]],
               "train_seconds": round(seconds, 1),
               "config": {k: v for k, v in vars(args).items() if k != "verbose"}}
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main(sys.argv[1:])
