"""Transfer the built-in pretrained graphs into a sentiment classifier on real movie reviews.

Runs in about a minute on a laptop CPU:

    python examples/transfer_quickstart.py [--data-dir ../shared/data]

The graph predictor and its tokenizer come from the built-in preset ``glomo_books_en`` (pretrained
on 6.1M tokens of English books, Penn Treebank and WikiText-2; nothing is downloaded). The script
reads 2,000 seeded MR sentences (Pang & Lee's movie-review polarity data, ``mr/rt-polarity.neg``
and ``mr/rt-polarity.pos`` under ``--data-dir``; it stops with one line when they are missing),
trains on 80% of them and reports accuracy on the other 20%, held out, for two classifiers with
``model.fit``: a plain one (word embeddings, bidirectional GRU) and the same one with the frozen
predictor's graphs mixed into its embeddings by ``GlomoTransfer``. One seed and two epochs show
the path, not a comparison; the measured comparisons are in ``docs/results/where-graphs-pay.md``.
"""

import argparse
import os

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data"))
MR_FILES = (("rt-polarity.neg", 0), ("rt-polarity.pos", 1))
SEED = 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                   help="folder holding mr/rt-polarity.neg and mr/rt-polarity.pos "
                        "(default: the project's shared data, %(default)s)")
    p.add_argument("--sentences", type=int, default=2000,
                   help="MR sentences to use, 80%% for training and 20%% held out (default 2000)")
    p.add_argument("--epochs", type=int, default=2, help="training epochs of each classifier "
                                                         "(default 2)")
    a = p.parse_args(argv)
    if a.sentences < 10 or a.epochs < 1:
        p.error("--sentences must be >= 10 and --epochs >= 1")
    return a


def load_mr(data_dir, n, seed=SEED):
    """``n`` seeded MR sentences and their labels (0 negative, 1 positive); SystemExit with one
    line when ``data_dir/mr`` lacks the two files."""
    folder = os.path.join(data_dir, "mr")
    missing = [name for name, _ in MR_FILES if not os.path.isfile(os.path.join(folder, name))]
    if missing:
        raise SystemExit(f"transfer_quickstart.py: {', '.join(missing)} not found in {folder}; "
                         "pass --data-dir DIR, a folder holding mr/rt-polarity.neg and "
                         "mr/rt-polarity.pos (Pang & Lee's sentence polarity data v1.0)")
    texts, labels = [], []
    for name, label in MR_FILES:
        with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
        texts += lines
        labels += [label] * len(lines)
    import numpy as np

    order = np.random.default_rng(seed).permutation(len(texts))[:n]
    return [texts[i] for i in order], np.array(labels)[order]


def build_classifier(vocabulary_size, predictor=None):
    """Embeddings -> (GlomoTransfer with ``predictor``'s frozen graphs) -> BiGRU -> softmax."""
    import keras

    import glomo_tf

    keras.utils.set_random_seed(SEED)
    token_ids = keras.Input((None,), dtype="int32")
    h = keras.layers.Embedding(vocabulary_size, 64, mask_zero=True)(token_ids)
    if predictor is not None:
        h = glomo_tf.GlomoTransfer(predictor, num_mixtures=2)([h, token_ids])
    h = keras.layers.Bidirectional(keras.layers.GRU(32))(h)
    classifier = keras.Model(token_ids, keras.layers.Dense(2, activation="softmax")(h))
    classifier.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    return classifier


def main(argv=None):
    a = parse_args(argv)
    texts, labels = load_mr(a.data_dir, a.sentences)  # before TensorFlow: a missing folder is quick
    import numpy as np

    import glomo_tf

    tokenizer = glomo_tf.Tokenizer.from_preset("glomo_books_en")
    predictor = glomo_tf.GraphPredictor.from_preset("glomo_books_en", trainable=False)
    ids = tokenizer.encode(texts, max_length=48).numpy()
    train = len(texts) - len(texts) // 5  # the seeded order: the last fifth is held out
    print(f"{train} MR sentences for training, {len(texts) - train} held out")

    accuracies = {}
    for name, graphs in (("plain", None), ("GLoMo", predictor)):
        classifier = build_classifier(tokenizer.vocabulary_size, graphs)
        print(f"== {name}: {sum(int(np.prod(w.shape)) for w in classifier.trainable_weights)} "
              "trainable weights" + (" (the graph predictor's are frozen)" if graphs else ""))
        classifier.fit(ids[:train], labels[:train], batch_size=50, epochs=a.epochs, verbose=2)
        _, accuracies[name] = classifier.evaluate(ids[train:], labels[train:], verbose=0)
    epochs = f"{a.epochs} epoch" + ("s" if a.epochs > 1 else "")
    print(f"held-out accuracy on {len(texts) - train} MR sentences (one seed, {epochs}): "
          + ", ".join(f"{name} {accuracy:.3f}" for name, accuracy in accuracies.items()))


if __name__ == "__main__":
    main()
