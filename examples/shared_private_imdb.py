"""IMDB long-review sentiment with the shared/private RNN and its local auxiliary losses.

The ``shared_private`` classifier of :mod:`glomo_tf.models.classifier`: a GRU whose state is half
shared with auxiliary decoders that, from anchors spread along each review, reconstruct the
preceding words backwards and predict the following ones; their loss is added to the task loss,
and ``model.fit`` minimises both. The class comes from the whole state at the last real word.

    python examples/shared_private_imdb.py --max-length 400 --epochs 5
    python examples/shared_private_imdb.py --limit 2000 --epochs 1    # a quick look

The reviews are read with tensorflow-datasets (``imdb_reviews``; downloaded into ``--data-dir``,
or tfds' default folder, the first time), tokenised into words with the project's tokenizer built
from the training reviews, and cut to ``--max-length`` words. 10% of the training reviews are held
out for early stopping. Prints one JSON line with the test accuracy.
"""

import argparse
import json
import re
import sys

import keras
import numpy as np

from glomo_tf.data import Tokenizer, seeded_split
from glomo_tf.data.labeled import load_tfds_text
from glomo_tf.models.classifier import build_classifier
from glomo_tf.data.batching import encode

DATASET = "imdb_reviews"


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", help="tensorflow-datasets data directory (tfds' default "
                                           "when not given)")
    parser.add_argument("--max-length", type=int, default=400, help="words kept per review")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--limit", type=int, help="read only the first N reviews of each split")
    parser.add_argument("--vocabulary-size", type=int, default=20_000,
                        help="most word ids, <pad> and <unk> included")
    parser.add_argument("--embedding-dim", type=int, default=128)
    parser.add_argument("--rnn-units", type=int, default=64,
                        help="the GRU state is 2 * rnn-units wide, half of it shared")
    parser.add_argument("--anchors", type=int, default=5, help="auxiliary anchors per review")
    parser.add_argument("--aux-length", type=int, default=20,
                        help="words reconstructed backwards and predicted forwards per anchor")
    parser.add_argument("--aux-weight", type=float, default=0.5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verbose", type=int, choices=(0, 1, 2), default=2)
    args = parser.parse_args(argv)
    for flag in ("max_length", "epochs", "vocabulary_size", "embedding_dim", "rnn_units",
                 "anchors", "aux_length", "batch_size"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1")
    if args.limit is not None and args.limit < 2:
        parser.error("--limit must be >= 2")
    return args


def load_split(split, args):
    """Texts (HTML line breaks removed) and labels of one split, ``--limit`` applied."""
    if args.limit:
        split = f"{split}[:{args.limit}]"
    texts, labels, class_names = load_tfds_text(DATASET, split, data_dir=args.data_dir)
    return [re.sub(r"<br\s*/?>", " ", text) for text in texts], labels, class_names


def main(argv=None):
    args = parse_args(argv)
    texts, labels, class_names = load_split("train", args)
    test_texts, test_labels, _ = load_split("test", args)
    train, validation = seeded_split(len(texts), test_fraction=0.1, seed=args.seed)

    tokenizer = Tokenizer.build([texts[i] for i in train], max_size=args.vocabulary_size,
                                splitter="unicode_script", lowercase=True)
    ids = encode(tokenizer, texts, args.max_length)
    test_ids = encode(tokenizer, test_texts, args.max_length)

    keras.utils.set_random_seed(args.seed)
    model = build_classifier(
        tokenizer.vocabulary_size, len(class_names), "shared_private",
        embedding_dim=args.embedding_dim, rnn_units=args.rnn_units, num_anchors=args.anchors,
        reconstruct_length=args.aux_length, predict_length=args.aux_length,
        aux_weight=args.aux_weight)
    model.compile(keras.optimizers.Adam(1e-3), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    stop = keras.callbacks.EarlyStopping("val_accuracy", mode="max", patience=2,
                                         restore_best_weights=True)
    history = model.fit(ids[train], labels[train], epochs=args.epochs,
                        batch_size=args.batch_size, callbacks=[stop], verbose=args.verbose,
                        validation_data=(ids[validation], labels[validation]))
    probabilities = model.predict(test_ids, batch_size=2 * args.batch_size, verbose=0)
    accuracy = float(np.mean(np.argmax(probabilities, axis=-1) == test_labels))
    result = {"dataset": DATASET, "model": "shared_private", "test_accuracy": accuracy,
              "train_examples": int(len(train)), "validation_examples": int(len(validation)),
              "test_examples": int(len(test_labels)), "epochs_run": len(history.history["loss"]),
              "vocabulary_size": tokenizer.vocabulary_size, "max_length": args.max_length}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
