"""Subprocess helper for tests/experiments/test_distributed.py (distribution strategies need a fresh TF
runtime).

``python tests/_mw_worker.py mirrored OUT.npz [--conv-layers N]``
    Two logical CPU devices; the same GlomoPretrainer (same initial weights, same batches) trained
    with SGD on one device and under ``MirroredStrategy(["/cpu:0", "/cpu:1"])``, for each optimizer
    variant of ``VARIANTS``. Writes the initial weights (``init_i``), and per variant the
    single-device weights (``<variant>_single_i``, but for ``keras_clip``) and the mirrored ones
    (``<variant>_mirrored_i``).

``TF_CONFIG=... python tests/_mw_worker.py worker OUT.npz [--optimizer K] [--clipnorm C]``
    One worker of a ``MultiWorkerMirroredStrategy`` cluster. Every worker builds the model from the
    same seed, trains it with ``fit`` on the same global batches and writes its initial (``init_i``)
    and final (``final_i``) weights. The chief also trains a single-device reference on the same
    global batches (``single_i``).
"""

import argparse
import os
import sys
from _paths import REPO

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

VOCAB, T, WINDOWS, GLOBAL_BATCH, STEPS = 30, 12, 8, 4, 4


def model_config(conv_layers):
    # No dropout and decoding from every position (num_positions=None): a step has no randomness.
    # initial_threshold=0: sparser first graphs, so every weight of this tiny model moves well
    # above float32 rounding in the few clipped steps (the comparisons need that).
    return dict(vocabulary_size=VOCAB, hidden_dim=8, num_layers=2, num_heads=2,
                conv_layers=conv_layers, context_length=2, decoder_layers=1, num_positions=None,
                dropout=0.0, initial_threshold=0.0)


def windows():
    import numpy as np
    # Full windows (no padding): every replica predicts the same number of units, so the mean of
    # the replicas' per-unit losses equals the per-unit loss of the global batch.
    return np.random.default_rng(7).integers(1, VOCAB, size=(WINDOWS, T)).astype("int32")


def dataset():
    import tensorflow as tf
    return tf.data.Dataset.from_tensor_slices(windows()).batch(GLOBAL_BATCH, drop_remainder=True)


def optimizer(kind, clipnorm):
    """Plain SGD (no momentum): Keras's own, or the one ``glomo pretrain`` makes."""
    import keras

    from glomo_tf.experiments.pretraining import PretrainingConfig, make_optimizer
    if kind == "keras":
        return keras.optimizers.SGD(0.5, global_clipnorm=clipnorm)
    return make_optimizer(PretrainingConfig(output_dir="", optimizer="sgd", learning_rate=0.5,
                                            momentum=0.0, clipnorm=clipnorm))


def build(strategy, args, weights=None):
    from glomo_tf import GlomoPretrainer
    with strategy.scope():
        model = GlomoPretrainer.from_sizes(**model_config(args.conv_layers))
        model.build()
        model.compile(optimizer=optimizer(args.optimizer, args.clipnorm))
    if weights is not None:
        model.set_weights(weights)
    return model


def fit(model):
    # Same batches in the same order: the dataset is not shuffled; STEPS // 2 steps per epoch.
    model.fit(dataset().repeat(), epochs=2, steps_per_epoch=STEPS // 2, verbose=0, shuffle=False)


def save(path, **groups):
    import numpy as np
    arrays = {f"{name}_{i}": np.asarray(w) for name, weights in groups.items()
              for i, w in enumerate(weights)}
    np.savez(path, **arrays)


VARIANTS = {  # name: (optimizer kind, global clip norm); the clip is small enough to act each step
    "plain": ("keras", None),
    "glomo_clip": ("glomo", 1e-3),
    "keras_clip": ("keras", 1e-3),
}


def mirrored(args):
    import keras
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    keras.utils.set_random_seed(0)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2, strategy.num_replicas_in_sync
    groups = {}
    for name, (kind, clipnorm) in VARIANTS.items():
        options = argparse.Namespace(conv_layers=args.conv_layers, optimizer=kind,
                                     clipnorm=clipnorm)
        if name != "keras_clip":  # on one device, Keras's clip is glomo_clip's
            single = build(tf.distribute.get_strategy(), options, weights=groups.get("init"))
            groups.setdefault("init", single.get_weights())
            fit(single)
            groups[f"{name}_single"] = single.get_weights()
        replicated = build(strategy, options, weights=groups["init"])
        fit(replicated)
        assert int(replicated.optimizer.iterations.numpy()) == STEPS
        groups[f"{name}_mirrored"] = replicated.get_weights()
    save(args.out, **groups)


def worker(args):
    import json

    import keras
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()  # the cluster comes from TF_CONFIG
    assert strategy.num_replicas_in_sync == 2, strategy.num_replicas_in_sync
    keras.utils.set_random_seed(0)  # the same initial weights on every worker
    model = build(strategy, args)
    init = model.get_weights()
    fit(model)
    assert int(model.optimizer.iterations.numpy()) == STEPS
    groups = dict(init=init, final=model.get_weights())
    if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0:
        reference = build(tf.distribute.get_strategy(), args, weights=init)
        fit(reference)
        groups["single"] = reference.get_weights()
    save(args.out, **groups)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("mirrored", "worker"))
    parser.add_argument("out")
    parser.add_argument("--conv-layers", type=int, default=0)
    parser.add_argument("--clipnorm", type=float, default=None)
    parser.add_argument("--optimizer", choices=("keras", "glomo"), default="keras")
    args = parser.parse_args()
    sys.path.insert(0, REPO)
    {"mirrored": mirrored, "worker": worker}[args.mode](args)
    print("done", flush=True)


if __name__ == "__main__":
    main()
