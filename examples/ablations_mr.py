"""The GLoMo paper's Table 2 ablations on MR, as configurations of one script.

Every configuration pretrains a graph predictor with ``glomo pretrain`` on the same corpus, with the
same budget and seed, changing one setting (the paper's Section 3.3), then transfers it with
``glomo transfer`` on the same MR splits and seeds; ``uniform`` replaces the learned graphs by
uniform ones at transfer time (no pretraining).

==================  ====================================================  ======================
configuration       what changes                                          ``glomo pretrain`` flag
==================  ====================================================  ======================
``glomo``           nothing (the full model)
``-decouple``       one network computes both graphs and features         ``--coupled``
``-sparse``         softmax instead of the squared-ReLU graphs            ``--normalization softmax``
``-hierarchical``   a single layer of graphs                              ``--layers 1``
``-unit-level``     a sentence-level objective                            ``--objective sentence``
``-sequence``       context length ``D = 1`` (next unit only)             ``--context-length 1``
``uniform``         uniform graphs at transfer time                       (no pretraining)
==================  ====================================================  ======================

    python examples/ablations_mr.py --output-dir runs/ablations            # everything
    python examples/ablations_mr.py --output-dir runs/ablations --configs sparse uniform

Writes ``OUTPUT/ablations.json`` (every transfer run) and ``OUTPUT/ablations.md`` (mean +- std per
configuration, and each configuration paired with ``glomo`` seed by seed). Pretraining runs live
in ``OUTPUT/pretrain/<configuration>`` and transfer results in ``OUTPUT/transfer/<configuration>``
(configurations are named without the dash on the command line: ``--configs sparse``);
running the command again reuses finished pretraining runs (and resumes interrupted ones) and
transfers finished with the same command line, so the ablations can be run a few at a time.
"""

import argparse
import json
import os
import shlex
import sys

import numpy as np

ABLATIONS = {
    "glomo": [],
    "decouple": ["--coupled"],
    "sparse": ["--normalization", "softmax"],
    "hierarchical": ["--layers", "1"],
    "unit-level": ["--objective", "sentence"],
    "sequence": ["--context-length", "1"],
    "uniform": None,
}


def label(config):
    """The paper's name of a configuration: ``-sparse`` for ``sparse``."""
    return config if config in ("glomo", "uniform") else f"-{config}"
WIKITEXT2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                         "data", "wikitext2")
# The WikiText-2 settings of docs/guides/pretraining.md, with a shorter default budget (--epochs).
PRETRAIN = ["--vocab-size", "20000", "--window", "64", "--shift", "64", "--hidden-dim", "128",
            "--layers", "2", "--heads", "4", "--conv-layers", "2", "--context-length", "3",
            "--decoder-layers", "1", "--positions", "20", "--optimizer", "adam",
            "--learning-rate", "0.002", "--clipnorm", "1.0", "--batch-size", "32"]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--configs", nargs="+", default=list(ABLATIONS), metavar="CONFIG",
                        help=f"any of {' '.join(ABLATIONS)} (default all)")
    parser.add_argument("--train", nargs="+",
                        default=[os.path.join(WIKITEXT2, "test.txt")],
                        help="pretraining corpus (default ../shared/data/wikitext2/test.txt)")
    parser.add_argument("--validation", nargs="*",
                        default=[os.path.join(WIKITEXT2, "valid.txt")],
                        help="pretraining validation files (default wikitext2/valid.txt)")
    parser.add_argument("--epochs", type=int, default=3, help="pretraining epochs per config")
    parser.add_argument("--steps-per-epoch", type=int, default=None)
    parser.add_argument("--pretrain-args", default="",
                        help="extra glomo pretrain flags as one string, e.g. "
                             "--pretrain-args='--hidden-dim 64' (they override the defaults, "
                             "never the ablation's own flag)")
    parser.add_argument("--variant", default="glomo_rnn", choices=("glomo_embeddings", "glomo_rnn"),
                        help="where the graphs are transferred (uniform always uses the "
                             "embeddings, like glomo transfer's uniform variant)")
    parser.add_argument("--dataset", default="mr")
    parser.add_argument("--transfer-args", default="",
                        help="extra glomo transfer flags as one string, e.g. "
                             "--transfer-args='--epochs 5'")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    args = parser.parse_args(argv)
    args.pretrain_args = shlex.split(args.pretrain_args)
    args.transfer_args = shlex.split(args.transfer_args)
    unknown = [c for c in args.configs if c not in ABLATIONS]
    if unknown:
        parser.error(f"unknown configuration(s) {' '.join(unknown)}; choose from "
                     f"{' '.join(ABLATIONS)}")
    if "glomo" not in args.configs:
        args.configs.insert(0, "glomo")  # the reference every ablation is paired with
    return args


def pretrain_argv(config, args, run_dir):
    """The ``glomo pretrain`` command line of a configuration."""
    argv = ["pretrain", "--train", *args.train, "--output-dir", run_dir, *PRETRAIN,
            "--epochs", str(args.epochs), "--seed", "0", "--verbose", "2"]
    if args.validation:
        argv += ["--validation", *args.validation]
    if args.steps_per_epoch:
        argv += ["--steps-per-epoch", str(args.steps_per_epoch)]
    return argv + args.pretrain_args + ABLATIONS[config]  # the ablation's own flag comes last


def pretrain(config, args):
    """The configuration's pretraining run directory (trained, or reused when finished)."""
    from glomo_tf import cli

    run_dir = os.path.join(args.output_dir, "pretrain", config)
    if os.path.exists(os.path.join(run_dir, "graph_predictor.keras")):
        print(f"[{config}] reusing {run_dir}")
        return run_dir
    argv = pretrain_argv(config, args, run_dir)
    print(f"[{config}] glomo " + " ".join(argv), flush=True)
    if cli.main(argv) != 0:
        raise SystemExit(f"pretraining {config} failed")
    return run_dir


def transfer(config, run_dir, args):
    """The per-seed test accuracies of one configuration, ``{seed: accuracy}``, and its runs; a
    transfer finished earlier with the same command line is reused."""
    from glomo_tf import cli
    from glomo_tf.evaluation import per_seed_accuracy

    out = os.path.join(args.output_dir, "transfer", config)
    variant = "uniform" if config == "uniform" else args.variant
    # uniform needs a tokenizer only: take the full model's, so all share the same ids.
    argv = ["transfer", "--run", run_dir, "--dataset", args.dataset, "--variants", variant,
            "--seeds", *map(str, args.seeds), "--output-dir", out, "--verbose", "0",
            *args.transfer_args]
    finished = _finished_transfer(out, argv)
    if finished is not None:
        print(f"[{config}] reusing {out}")
        runs = finished
    else:
        print(f"[{config}] glomo " + " ".join(argv), flush=True)
        if cli.main(argv) != 0:
            raise SystemExit(f"transfer of {config} failed")
        with open(os.path.join(out, "results.json"), encoding="utf-8") as handle:
            runs = json.load(handle)["runs"]
        with open(os.path.join(out, "command.json"), "w", encoding="utf-8") as handle:
            json.dump(argv, handle)
    return per_seed_accuracy(runs, variant), runs


def _finished_transfer(out, argv):
    """The runs of a transfer finished earlier with the same command line, else None."""
    try:
        with open(os.path.join(out, "command.json"), encoding="utf-8") as handle:
            same = json.load(handle) == argv
        with open(os.path.join(out, "results.json"), encoding="utf-8") as handle:
            runs = json.load(handle)["runs"]
    except (OSError, ValueError, KeyError):
        return None
    return runs if same else None


def table(results, configs):
    """``(summary, markdown)``: mean +- std per configuration and the paired differences with
    ``glomo`` over the seeds both have."""
    from glomo_tf.evaluation import accuracy_summary, paired_cells, paired_comparison

    summary = {}
    lines = ["| configuration | seeds | accuracy (mean ± std) | vs glomo (mean difference) | "
             "wins / ties / losses | paired t | p |", "|---|---:|---:|---:|---:|---:|---:|"]
    for config in configs:
        stats = accuracy_summary(list(results[config].values()))
        entry = {k: stats[k] for k in ("seeds", "mean", "std")}
        row = (f"| {label(config)} | {entry['seeds']} | "
               f"{100 * entry['mean']:.2f} ± {100 * entry['std']:.2f} |")
        paired = None if config == "glomo" else paired_comparison(results[config], results["glomo"])
        if paired is None:
            row += " | | | |"
        else:
            entry.update({k: paired[k] for k in ("mean_difference", "wins", "ties", "losses",
                                                 "t", "p")})
            row += f" {paired_cells(paired)} |"
        summary[label(config)] = entry
        lines.append(row)
    return summary, "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.makedirs(args.output_dir, exist_ok=True)
    runs, results, pretraining = [], {}, {}
    glomo_run = pretrain("glomo", args)
    for config in args.configs:
        run_dir = glomo_run if config in ("glomo", "uniform") else pretrain(config, args)
        if config != "uniform":
            with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as handle:
                pretraining[config] = json.load(handle)
        results[config], config_runs = transfer(config, run_dir, args)
        runs += [dict(r, configuration=config) for r in config_runs]
    summary, markdown = table(results, args.configs)
    title = (f"## {args.dataset}: Table 2 ablations ({args.variant}; pretraining "
             f"{args.epochs} epoch(s) per configuration; seeds {' '.join(map(str, args.seeds))})")
    markdown = f"{title}\n\n{markdown}"
    with open(os.path.join(args.output_dir, "ablations.json"), "w", encoding="utf-8") as handle:
        json.dump({"args": vars(args), "summary": summary, "pretraining": pretraining,
                   "runs": runs}, handle, indent=2)
    with open(os.path.join(args.output_dir, "ablations.md"), "w", encoding="utf-8") as handle:
        handle.write(markdown)
    print("\n" + markdown)
    return summary


if __name__ == "__main__":
    main()
