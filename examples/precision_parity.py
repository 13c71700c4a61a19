"""bfloat16 against float32 at equal steps: WikiText-2 pretraining, then MR transfer, paired.

Pretrains the WikiText-2 predictor of docs/guides/pretraining.md twice with ``glomo pretrain``,
the same seed and steps: in float32 (``--jit``, the float32 fast path) and with ``--precision mixed_bfloat16``
(a plain ``tf.function``: XLA does not use a CPU's bfloat16 units). Then transfers the float32
predictor to MR with ``glomo transfer --variants glomo_embeddings`` on the same seeds in each
precision (the bfloat16 runs compute the frozen predictor in bfloat16 too), and pairs the two
seed by seed.

    python examples/precision_parity.py --output-dir runs/precision
    python examples/precision_parity.py --output-dir runs/precision \\
        --json examples/outputs/precision_parity.json

Run directories live in ``OUTPUT/pretrain/PRECISION`` and ``OUTPUT/transfer/PRECISION``; running
the command again reuses finished pretraining runs (and resumes interrupted ones) and resumes the
transfers (``--resume``: finished seeds are kept), so it survives an interruption.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ablations_mr import PRETRAIN, WIKITEXT2  # noqa: E402  the WikiText-2 settings (docs)

PRECISIONS = ("float32", "mixed_bfloat16")
TRANSFER = ["--dataset", "mr", "--variants", "glomo_embeddings", "--embedding-dim", "64",
            "--rnn-units", "64", "--batch-size", "64", "--max-length", "48", "--epochs", "6",
            "--patience", "2", "--graph-cache", "--verbose", "0"]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--epochs", type=int, default=3, help="pretraining epochs")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--json", help="also write the comparison here")
    return parser.parse_args(argv)


def pretrain_argv(precision, args):
    """``glomo pretrain`` in ``precision``: XLA for float32, a plain tf.function for bfloat16."""
    return ["pretrain", "--train", os.path.join(WIKITEXT2, "test.txt"),
            "--validation", os.path.join(WIKITEXT2, "valid.txt"),
            "--output-dir", os.path.join(args.output_dir, "pretrain", precision), *PRETRAIN,
            "--epochs", str(args.epochs), "--seed", "0", "--verbose", "2",
            "--precision", precision, *(["--jit"] if precision == "float32" else [])]


def transfer_argv(precision, run_dir, args):
    return ["transfer", "--run", run_dir, *TRANSFER, "--seeds", *map(str, args.seeds),
            "--precision", precision, "--resume",
            "--output-dir", os.path.join(args.output_dir, "transfer", precision)]


def main(argv=None):
    args = parse_args(argv)
    from glomo_tf import cli
    from glomo_tf.evaluation import paired_comparison, per_seed_accuracy

    result = {"pretraining": {}, "transfer": {}, "commands": {}}
    for precision in PRECISIONS:
        command = pretrain_argv(precision, args)
        run_dir = command[command.index("--output-dir") + 1]
        result["commands"][f"pretrain_{precision}"] = "glomo " + " ".join(command)
        if not os.path.exists(os.path.join(run_dir, "graph_predictor.keras")):
            print("glomo " + " ".join(command), flush=True)
            if cli.main(command) != 0:
                raise SystemExit(f"pretraining in {precision} failed")
        with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as handle:
            metrics = json.load(handle)
        result["pretraining"][precision] = {
            k: metrics[k] for k in ("steps", "val_perplexity", "last_epoch_val_perplexity",
                                    "train_tokens_per_s", "wall_time_s", "dead_graphs")}
    float32_run = os.path.join(args.output_dir, "pretrain", "float32")
    for precision in PRECISIONS:
        command = transfer_argv(precision, float32_run, args)
        result["commands"][f"transfer_{precision}"] = "glomo " + " ".join(command)
        print("glomo " + " ".join(command), flush=True)
        start = time.perf_counter()
        if cli.main(command) != 0:
            raise SystemExit(f"transfer in {precision} failed")
        out = command[command.index("--output-dir") + 1]
        with open(os.path.join(out, "results.json"), encoding="utf-8") as handle:
            runs = json.load(handle)["runs"]
        accuracy = per_seed_accuracy(runs, "glomo_embeddings")
        result["transfer"][precision] = {
            "accuracy": {str(s): accuracy[s] for s in sorted(accuracy)},
            "seconds_per_run": [r["seconds"] for r in runs],
            "wall_s_this_call": round(time.perf_counter() - start, 1)}
    ppl = {p: result["pretraining"][p]["val_perplexity"] for p in PRECISIONS}
    result["val_perplexity_bf16_over_float32"] = ppl["mixed_bfloat16"] / ppl["float32"]
    accuracies = [{int(s): a for s, a in result["transfer"][p]["accuracy"].items()}
                  for p in PRECISIONS]
    result["transfer_bf16_vs_float32"] = paired_comparison(accuracies[1], accuracies[0])
    import numpy as np
    result["transfer_float32_seed_std"] = float(np.std(list(accuracies[0].values()), ddof=1))
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
