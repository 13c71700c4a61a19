"""The tokens-seen curve of a ``glomo pretrain`` run, read from its TensorBoard logs.

Every epoch of a run writes its training and validation perplexity (``logs/train`` and
``logs/validation``); with ``--steps-per-epoch`` an epoch is a fixed number of steps, so the
tokens seen after epoch ``e`` are ``e * steps_per_epoch * batch_size * window``. A resumed run
appends to the same logs: the last value written for an epoch is kept.

Run (while the run is still training, or after)::

    python examples/pretraining_curve.py --run runs/books/gru --output examples/outputs/books_gru_curve.json

It prints and writes JSON: the run's settings that size it, one row per epoch (tokens seen,
training and validation perplexity, tokens per second, learning rate) and ``metrics.json`` when
the run has finished.
"""

import argparse
import glob
import json
import os


def scalars(directory):
    """``{tag: {step: value}}`` of the TensorBoard event files in ``directory`` (the last value
    written for a step wins: a resumed run rewrites the epochs it repeats)."""
    import tensorflow as tf

    values = {}
    for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*")),
                       key=os.path.getmtime):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                number = (float(tf.make_ndarray(value.tensor)) if value.HasField("tensor")
                          else float(value.simple_value))
                values.setdefault(value.tag, {})[int(event.step)] = number
    return values


def curve(run_dir):
    with open(os.path.join(run_dir, "config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    if not config.get("steps_per_epoch"):
        raise SystemExit(f"{run_dir} ran without --steps-per-epoch: its epochs have no fixed "
                         "token count.")
    batch = config.get("global_batch_size") or config["batch_size"]
    tokens_per_epoch = config["steps_per_epoch"] * batch * config["window"]
    train = scalars(os.path.join(run_dir, "logs", "train"))
    validation = scalars(os.path.join(run_dir, "logs", "validation"))
    rows = []
    for epoch in sorted(validation.get("epoch_perplexity", {})):
        rows.append({
            "epoch": epoch + 1, "tokens_seen": (epoch + 1) * tokens_per_epoch,
            "train_perplexity": round(train.get("epoch_perplexity", {}).get(epoch, float("nan")), 2),
            "val_perplexity": round(validation["epoch_perplexity"][epoch], 2),
            "tokens_per_s": round(train.get("epoch_tokens_per_s", {}).get(epoch, float("nan")), 1),
            "learning_rate": train.get("epoch_learning_rate", {}).get(epoch)})
    result = {"run": run_dir,
              "settings": {k: config[k] for k in (
                  "train", "validation", "lowercase", "splitter", "vocab_size", "window",
                  "hidden_dim", "num_layers", "num_heads", "conv_layers", "composition",
                  "normalization", "batch_size", "steps_per_epoch", "epochs", "precision")
                  if k in config},
              "tokens_per_epoch": tokens_per_epoch, "curve": rows}
    metrics = os.path.join(run_dir, "metrics.json")
    if os.path.exists(metrics):
        with open(metrics, encoding="utf-8") as handle:
            result["metrics"] = json.load(handle)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a glomo pretrain run directory")
    parser.add_argument("--output", help="write the JSON here")
    args = parser.parse_args(argv)
    result = curve(args.run)
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    return result


if __name__ == "__main__":
    main()
