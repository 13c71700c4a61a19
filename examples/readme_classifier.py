"""The README's first Python lines, timed and recorded: ``GlomoClassifier.from_preset`` on
SST-2 (the official train and test sentences), with the preset's graphs at the BiGRU
(``transfer_at="rnn"``) and without graphs (``transfer_at=None``), one epoch each, the seeds
given.

Run::

    python examples/readme_classifier.py --seeds 0 --output examples/outputs/readme_classifier.json

One epoch on one seed shows the path from strings to a fitted, evaluated model; it is not a
comparison of the two (see docs/results/transfer.md and where-graphs-pay.md for those).
"""

import argparse
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "benchmarks"))


def render_table(record):
    """The README's table of a JSON written by this script."""
    lines = ["| graphs | seed | SST-2 test accuracy | seconds (load, fit, evaluate) |",
             "|---|---:|---:|---:|"]
    for run in record["runs"]:
        graphs = ("the preset's, at the BiGRU (`transfer_at=\"rnn\"`)" if run["transfer_at"]
                  else "none (`transfer_at=None`)")
        lines.append(f"| {graphs} | {run['seed']} | {100 * run['test_accuracy']:.1f} | "
                     f"{run['seconds']:.0f} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", required=True)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=32, help="fit's batch_size (Keras' 32)")
    p.add_argument("--output", help="the JSON to write")
    args = p.parse_args(argv)

    import keras
    import tensorflow as tf
    from _harness import recorded

    import glomo_tf
    from glomo_tf.data.labeled import load_sst

    (train, y_train, _), (test, y_test, _) = load_sst("train"), load_sst("test")
    runs = []
    for seed in args.seeds:
        for transfer_at in ("rnn", None):
            keras.utils.set_random_seed(seed)
            start = time.perf_counter()
            classifier = glomo_tf.GlomoClassifier.from_preset("glomo_books_en", num_classes=2,
                                                              transfer_at=transfer_at)
            classifier.fit(train, y_train, batch_size=args.batch_size, epochs=args.epochs,
                           verbose=0)
            _, accuracy = classifier.evaluate(test, y_test, verbose=0)
            runs.append({"transfer_at": transfer_at, "seed": seed, "test_accuracy": accuracy,
                         "seconds": round(time.perf_counter() - start, 1)})
            print(json.dumps(runs[-1]))
    record = {**recorded(tf), "train_examples": len(train), "test_examples": len(test),
              "epochs": args.epochs, "batch_size": args.batch_size, "runs": runs}
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
