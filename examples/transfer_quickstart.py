"""Transfer the built-in pretrained graphs into a sentiment classifier on real movie reviews.

Runs in about a minute on a laptop CPU:

    python examples/transfer_quickstart.py [--data-dir ../shared/data]

The graph predictor and its tokenizer come from the built-in preset ``glomo_books_en`` (pretrained
on 6.1M tokens of English books, Penn Treebank and WikiText-2; nothing is downloaded). The
classifier reads 2,000 MR sentences (Pang & Lee's movie-review polarity data, from ``--data-dir``
when it holds ``mr/``, else a dozen sentences written here), mixes the frozen predictor's graphs
into its word embeddings with ``GlomoTransfer`` and trains with ``model.fit``.
"""

import argparse
import os

import keras
import numpy as np

import glomo_tf

HERE = os.path.dirname(os.path.abspath(__file__))
FALLBACK = [("a gripping story , beautifully told .", 1), ("dull , slow and far too long .", 0),
            ("the best film i have seen this year .", 1), ("i wanted my two hours back .", 0),
            ("warm , funny and wise .", 1), ("a mess of a movie .", 0)] * 40


def load_mr(data_dir, n=2000, seed=0):
    """``n`` seeded MR sentences and labels, or the fallback sentences without the data."""
    folder = os.path.join(data_dir, "mr")
    if not os.path.isdir(folder):
        print(f"No {folder}: using the sentences in this file.")
        return [t for t, _ in FALLBACK], np.array([y for _, y in FALLBACK])
    texts, labels = [], []
    for name, label in (("rt-polarity.neg", 0), ("rt-polarity.pos", 1)):
        with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
        texts += lines
        labels += [label] * len(lines)
    order = np.random.default_rng(seed).permutation(len(texts))[:n]
    return [texts[i] for i in order], np.array(labels)[order]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=os.path.join(HERE, "..", "..", "shared", "data"))
    a = p.parse_args()
    texts, labels = load_mr(a.data_dir)

    tokenizer = glomo_tf.Tokenizer.from_preset("glomo_books_en")
    predictor = glomo_tf.GraphPredictor.from_preset("glomo_books_en")  # frozen
    ids = tokenizer.encode(texts, max_length=48).numpy()

    token_ids = keras.Input((None,), dtype="int32")
    h = keras.layers.Embedding(tokenizer.vocabulary_size, 64, mask_zero=True)(token_ids)
    h = glomo_tf.GlomoTransfer(predictor, num_mixtures=2)([h, token_ids])
    h = keras.layers.Bidirectional(keras.layers.GRU(32))(h)
    classifier = keras.Model(token_ids, keras.layers.Dense(2, activation="softmax")(h))
    classifier.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    classifier.fit(ids, labels, batch_size=50, epochs=2, validation_split=0.2, verbose=2)
    print("trainable weights:", sum(int(np.prod(w.shape)) for w in classifier.trainable_weights),
          "(the graph predictor's are frozen)")


if __name__ == "__main__":
    main()
