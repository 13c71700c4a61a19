"""GLoMo on images (the paper's Section 3.5) at a size this CPU can run, in three parts.

1. **planted**: pretrain :class:`glomo_tf.GlomoPretrainer2D` on the generated planted images of
   :mod:`glomo_tf.data.images` (a value copied from a key of the same slot elsewhere in the
   image) and measure, on held-out images, the share of planted receivers whose strongest
   source reads the key, for every layer and head, against the best fixed 2-D offset and a
   random admissible source.
2. **digits**: pretrain on scikit-learn's 8x8 digits (unlabelled; the first 1,200 images), then
   train the ResNet of :func:`glomo_tf.build_image_classifier` with each variant (baseline, GLoMo
   graphs, uniform graphs) on a few labelled images, seeds paired (same labelled subset and
   initialisation per seed across the variants), tested on the last 597 images.
3. **figures**: the paper's Figure 4 for a held-out digit and a planted image: the forward
   graph's edges of the centre pixel and of the bottom-right pixel, every layer and head.

``--parts cifar_shape`` (not in the default run) times CIFAR-10's shape (32x32, T = 1,024) end
to end on synthetic images: a pretraining step at the default sizes and a ResNet step with the
graphs, and the peak memory (``glomo_images_cifar_shape.json``).

Writes ``glomo_images.json`` and ``glomo_images_*.png`` to ``--output-dir``
(``examples/outputs``). ``--quick`` runs every part at a toy size (a test runs it).

    python examples/glomo_images.py                  # the recorded run
    python examples/glomo_images.py --seeds 3 --quick
"""

import argparse
import json
import os
import time

import numpy as np

# The planted corpus: 10x10 one-hot images, three spans each (glomo_tf.data.images).
PLANTED_CORPUS = dict(height=10, width=10, num_slots=3, num_values=4, num_fillers=6)
# Small GLoMo models; the feature composition is "projected", the planted text demo's.
# One-hot images in, level ids (one channel, all levels) as the targets.
PLANTED_MODEL = dict(hidden_dim=32, num_layers=2, num_heads=4, conv_layers=1, threshold="scalar",
                     window=2, num_positions=None, feature_layers=1, composition="projected",
                     target_channels=1)
DIGITS_MODEL = dict(hidden_dim=32, num_layers=2, num_heads=4, conv_layers=2, threshold="scalar",
                    window=2, levels=17, num_positions=None, feature_layers=2,
                    composition="projected")
# Adam at a constant rate, gradient norm clipped at 1 (the planted text demo's optimiser).
LEARNING_RATE = {"planted": 1e-2, "digits": 3e-3}
# Digits: unlabelled pretraining images, labelled training images per seed, held-out test.
DIGITS_PRETRAIN, DIGITS_TEST = 1200, 597
CLASSIFIER = dict(width=8, blocks=(2, 2, 2, 2), num_mixtures=1)

DEFAULTS = dict(planted_train=2048, planted_test=256, planted_epochs=20, planted_steps=100,
                digits_epochs=20, digits_steps=40, labelled=300, classifier_epochs=40,
                batch_size=32, seeds=10)
QUICK = dict(planted_train=64, planted_test=16, planted_epochs=1, planted_steps=2,
             digits_epochs=1, digits_steps=2, labelled=40, classifier_epochs=1, batch_size=16,
             seeds=2)


def pretrain(images, model_config, epochs, steps, batch_size, seed, learning_rate, targets=None):
    """A compiled :class:`GlomoPretrainer2D` fitted on ``images`` (and ``targets``, when
    given); returns (model, history)."""
    import keras
    import tensorflow as tf

    from glomo_tf import GlomoPretrainer2D

    keras.utils.set_random_seed(seed)
    model = GlomoPretrainer2D.from_sizes(seed=seed, **model_config)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate, global_clipnorm=1.0),
                  jit_compile=True)
    data = (tf.data.Dataset.from_tensor_slices(images if targets is None else (images, targets))
            .shuffle(len(images), seed=seed).repeat().batch(batch_size, drop_remainder=True))
    history = model.fit(data, epochs=epochs, steps_per_epoch=steps, verbose=2,
                        shuffle=False)  # the dataset shuffles itself
    return model, history.history


def predict_graphs(model, images, batch_size=64):
    return np.concatenate([model.graph_predictor(images[i:i + batch_size])["graphs"].numpy()
                           for i in range(0, len(images), batch_size)])


def run_planted(sizes, seed=0):
    from glomo_tf import evaluation
    from glomo_tf.data import images as image_data

    train = image_data.builtin_planted_images("train", sizes["planted_train"], **PLANTED_CORPUS)
    test = image_data.builtin_planted_images("test", sizes["planted_test"], **PLANTED_CORPUS)
    start = time.time()
    levels = train.vocabulary.size
    model, history = pretrain(train.one_hot(), dict(PLANTED_MODEL, levels=levels),
                              sizes["planted_epochs"], sizes["planted_steps"],
                              sizes["batch_size"], seed, LEARNING_RATE["planted"],
                              targets=train.levels[..., None].astype("int32"))
    seconds = time.time() - start
    graphs = predict_graphs(model, test.one_hot())
    report = evaluation.image_recovery_report(graphs, test)
    return {"corpus": dict(PLANTED_CORPUS, train_images=len(train.levels),
                           test_images=len(test.levels), levels=train.vocabulary.size),
            "model": dict(PLANTED_MODEL, levels=levels, parameters=int(model.count_params())),
            "training": {"epochs": sizes["planted_epochs"], "learning_rate":
                         LEARNING_RATE["planted"], "steps_per_epoch":
                         sizes["planted_steps"], "batch_size": sizes["batch_size"],
                         "loss": [round(float(x), 4) for x in history["loss"]],
                         "seconds": round(seconds, 1)},
            "recovery": report}, model, test, graphs


def classifier_run(variant, predictor, train, test, sizes, seed):
    """Test accuracy of one variant trained on ``train`` with ``seed``."""
    import keras

    from glomo_tf import build_image_classifier

    keras.utils.set_random_seed(seed)
    model = build_image_classifier(train[0].shape[1:], 10, variant,
                                   predictor if variant == "glomo" else None, **CLASSIFIER)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(train[0], train[1], batch_size=sizes["batch_size"],
              epochs=sizes["classifier_epochs"], verbose=0)
    return float(model.evaluate(test[0], test[1], verbose=0)[1])


def run_digits(sizes, seed=0):
    from glomo_tf import evaluation
    from glomo_tf.data.images import load_digits_images
    from glomo_tf.hparams import IMAGE_VARIANTS

    images, labels, levels = load_digits_images()
    pool, test = (images[:DIGITS_PRETRAIN], labels[:DIGITS_PRETRAIN]), (
        images[-DIGITS_TEST:], labels[-DIGITS_TEST:])
    start = time.time()
    model, history = pretrain(pool[0], DIGITS_MODEL, sizes["digits_epochs"],
                              sizes["digits_steps"], sizes["batch_size"], seed,
                              LEARNING_RATE["digits"])
    pretrain_seconds = time.time() - start
    runs, start = [], time.time()
    for run_seed in range(sizes["seeds"]):
        chosen = np.random.default_rng(run_seed).choice(len(pool[0]), sizes["labelled"],
                                                        replace=False)
        train = (pool[0][chosen], pool[1][chosen])
        for variant in IMAGE_VARIANTS:
            accuracy = classifier_run(variant, model.graph_predictor, train, test, sizes,
                                      run_seed)
            runs.append({"variant": variant, "seed": run_seed, "accuracy": accuracy})
            print(f"seed {run_seed} {variant}: test accuracy {accuracy:.4f}", flush=True)
    summary = evaluation.summarize(runs, IMAGE_VARIANTS)
    summary["paired_with_uniform"] = {"glomo": evaluation.paired_comparison(
        evaluation.per_seed_accuracy(runs, "glomo"),
        evaluation.per_seed_accuracy(runs, "uniform"))}
    return {"data": {"pretraining_images": DIGITS_PRETRAIN, "test_images": DIGITS_TEST,
                     "labelled_per_seed": sizes["labelled"], "levels": levels},
            "model": dict(DIGITS_MODEL, parameters=int(model.count_params())),
            "pretraining": {"epochs": sizes["digits_epochs"], "learning_rate":
                            LEARNING_RATE["digits"], "steps_per_epoch":
                            sizes["digits_steps"], "batch_size": sizes["batch_size"],
                            "loss": [round(float(x), 4) for x in history["loss"]],
                            "seconds": round(pretrain_seconds, 1)},
            "classifier": dict(CLASSIFIER, blocks=list(CLASSIFIER["blocks"]),
                               epochs=sizes["classifier_epochs"], optimizer="Adam(1e-3)",
                               seconds=round(time.time() - start, 1)),
            "runs": runs, "summary": summary}, model, test[0]


def run_cifar_shape(batch_size=4, steps=3, seed=0):
    """CIFAR-10's shape (32x32x3, T = 1,024) end to end on synthetic images: one pretraining
    step of the default-sized GlomoPretrainer2D and one training step of the ResNet with GLoMo
    graphs; seconds per step after the first (compilation) and the process's peak memory."""
    import resource

    import keras

    from glomo_tf import GlomoPretrainer2D, build_image_classifier
    from glomo_tf.hparams import GRAPH_PREDICTOR_2D

    keras.utils.set_random_seed(seed)
    images = np.random.default_rng(seed).uniform(0, 1, (batch_size, 32, 32, 3)).astype("float32")
    labels = np.arange(batch_size) % 10
    pretrainer = GlomoPretrainer2D.from_sizes(seed=seed)  # hparams.GRAPH_PREDICTOR_2D sizes
    pretrainer.compile(optimizer=keras.optimizers.Adam(1e-3))
    classifier = build_image_classifier((32, 32, 3), 10, "glomo", pretrainer.graph_predictor,
                                        width=16)
    classifier.compile(optimizer=keras.optimizers.Adam(1e-3),
                       loss="sparse_categorical_crossentropy")
    timings = {}
    for name, step in (("pretraining_step", lambda: pretrainer.train_on_batch(images)),
                       ("classifier_step", lambda: classifier.train_on_batch(images, labels))):
        step()  # builds and traces
        start = time.time()
        for _ in range(steps):
            step()
        timings[name] = round((time.time() - start) / steps, 3)
    p = GRAPH_PREDICTOR_2D
    length = 32 * 32
    graph_bytes = batch_size * 2 * p["num_layers"] * p["num_heads"] * length ** 2 * 4
    return {"batch_size": batch_size, "T": length, "predictor": dict(p),
            "seconds_per_step": timings,
            "graphs_megabytes_per_batch": round(graph_bytes / 2 ** 20, 1),
            "peak_rss_megabytes": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                                        1)}


def figure4(graphs, image, title, path):
    """The paper's Figure 4: the input, and per layer and head the forward edges of the centre
    pixel and of the bottom-right pixel, as images (``graphs``: ``[2, L, K, T, T]``)."""
    import matplotlib.pyplot as plt

    height, width = image.shape[:2]
    _, layers, heads = graphs.shape[:3]
    pixels = {"centre": (height // 2) * width + width // 2, "bottom-right": height * width - 1}
    fig, axes = plt.subplots(2 * layers, heads + 1, figsize=(1.6 * (heads + 1), 1.6 * 2 * layers),
                             squeeze=False)
    shown = image[..., 0] if image.shape[-1] == 1 else image.argmax(-1)
    for block, (name, pixel) in enumerate(pixels.items()):
        r, c = divmod(pixel, width)
        for layer in range(layers):
            row = block * layers + layer
            axes[row, 0].imshow(shown, cmap="gray_r")
            axes[row, 0].plot([c], [r], "rs", markersize=5)
            axes[row, 0].set_ylabel(f"{name}\nlayer {layer + 1}", fontsize=7)
            for head in range(heads):
                weights = graphs[0, layer, head, pixel].reshape(height, width)
                axes[row, head + 1].imshow(weights, cmap="viridis", vmin=0)
                axes[row, head + 1].plot([c], [r], "rs", markersize=4, fillstyle="none")
                if row == 0:
                    axes[row, head + 1].set_title(f"head {head + 1}", fontsize=7)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", default=os.path.join(os.path.dirname(__file__),
                                                             "outputs"))
    parser.add_argument("--quick", action="store_true", help="toy sizes (checks the plumbing)")
    parser.add_argument("--seeds", type=int, help="paired seeds of the digits comparison")
    parser.add_argument("--parts", nargs="+", default=["planted", "digits"],
                        choices=["planted", "digits", "cifar_shape"],
                        help="cifar_shape (not run by default) writes its own "
                             "glomo_images_cifar_shape.json")
    args = parser.parse_args(argv)
    sizes = dict(QUICK if args.quick else DEFAULTS)
    if args.seeds is not None:
        sizes["seeds"] = args.seeds
    os.makedirs(args.output_dir, exist_ok=True)
    start = time.time()
    result = {"sizes": sizes}
    if "planted" in args.parts:
        result["planted"], _, test, graphs = run_planted(sizes)
        result["planted"]["figure"] = figure4(
            graphs[0], test.one_hot()[0],
            "Planted image: forward edges of the centre and bottom-right pixels",
            os.path.join(args.output_dir, "glomo_images_planted_figure4.png"))
        print(json.dumps(result["planted"]["recovery"], indent=1))
    if "digits" in args.parts:
        result["digits"], model, test_images = run_digits(sizes)
        graphs = model.graph_predictor(test_images[:1])["graphs"].numpy()[0]
        result["digits"]["figure"] = figure4(
            graphs, test_images[0],
            "Held-out digit: forward edges of the centre and bottom-right pixels",
            os.path.join(args.output_dir, "glomo_images_digits_figure4.png"))
        print(json.dumps(result["digits"]["summary"], indent=1))
    if "cifar_shape" in args.parts:
        result["cifar_shape"] = run_cifar_shape(batch_size=2 if args.quick else 4,
                                                steps=1 if args.quick else 3)
        print(json.dumps(result["cifar_shape"], indent=1))
    result["wall_seconds"] = round(time.time() - start, 1)
    alone = args.parts == ["cifar_shape"]
    path = os.path.join(args.output_dir,
                        "glomo_images_cifar_shape.json" if alone else "glomo_images.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    print(f"wrote {path} ({result['wall_seconds']} s)")
    return result


if __name__ == "__main__":
    main()
