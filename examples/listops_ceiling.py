"""ListOps with its gold trees: the ceiling a graph can lift a classifier to, through the paper's
single fusion and through the deep form (``GraphPropagation``), beside the plain BiGRU, the
uniform graph and learned graphs.

Data: ``examples/listops_graphs.py``'s recipe (up to 4 levels, at most 40 units), the training
set at ``--sizes`` (12,000 or 40,000 expressions drawn from seed 0; the 12,000 are the first of
the 40,000), and one test set of 1,000 expressions from seed 2 that appear in neither. Every row
is a ``glomo transfer --dataset listops`` run of its own directory (``--resume``: an interrupted
comparison continues where it stopped), with the same seeds, classifier sizes and epochs:

============================  =================================================================
row                           variant and form
============================  =================================================================
``baseline``                  the plain BiGRU classifier (no graphs)
``uniform, propagation``      the uniform graph through the deep form (no structure)
``gold, fusion``              the gold trees at the embeddings, the paper's one gated fusion
``gold, propagation``         the gold trees at the embeddings, ``GraphPropagation``
``gold chains, propagation``  the gold trees as folds (``--gold-form chain``), the deep form
``learned, propagation``      a pretrained predictor's graphs (``--predictor``), the deep form
============================  =================================================================

The deep form is 8 steps of the perceptron update over the sum of a unit's sources by default
(``--propagation-steps 8 --propagation-aggregation sum --propagation-update mlp``); a row run with
other settings is named by them, ``gold, propagation (gru, sum)`` or, heard from the operators'
arguments alone (``--propagation-directions backward``), ``gold, propagation (mlp, sum,
backward)``, or with a wider perceptron (``--propagation-hidden-units 512``: ``gold,
propagation (mlp, sum, backward, hidden 512)``; ``--propagation-layer-norm`` adds ``layer
norm``), and kept beside the default's;
so is a row trained for other than 20 epochs with patience 4 (``--epochs 40 --patience 8``:
``baseline (40 epochs, patience 8)``), the baseline it is paired with trained as long.

The JSON keeps each row's runs and its paired comparison with the baseline (per seed);
:func:`render_table` makes the table of ``docs/results/where-graphs-pay.md`` from it.

Run (the seeds are fixed in the command and recorded in the JSON)::

    python examples/listops_ceiling.py --sizes 40000 --seeds 0 --rows baseline "gold, propagation" \\
        --run-dir runs/listops_ceiling --output examples/outputs/listops_ceiling.json
"""

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))

from _records import read_record, write_record  # noqa: E402

# The deep form's settings as the pilot ran them; a row run with others is named by them.
DEEP_DEFAULTS = {"steps": 8, "aggregation": "sum", "update": "mlp", "directions": "both",
                 "hidden_units": None, "layer_norm": False}
# The training length every row ran with first; a row trained longer is named by its own.
TRAINING_DEFAULTS = {"epochs": 20, "patience": 4}
# A row: its variant, whether it takes the deep form, and its other flags.
ROWS = {
    "baseline": ("baseline", False, ()),
    "uniform, propagation": ("uniform", True, ()),
    "gold, fusion": ("gold_embeddings", False, ()),
    "gold, propagation": ("gold_embeddings", True, ()),
    "gold chains, propagation": ("gold_embeddings", True, ("--gold-form", "chain")),
    "learned, propagation": ("glomo_embeddings", True, ()),
}


def deep_flags(steps, aggregation, update, directions="both", hidden_units=None,
               layer_norm=False):
    """``glomo transfer``'s flags for the deep form with these settings."""
    return ["--transfer-form", "propagation", "--propagation-steps", str(steps),
            "--propagation-aggregation", aggregation, "--propagation-update", update] + (
                ["--propagation-directions", directions] if directions != "both" else []) + (
                ["--propagation-hidden-units", str(hidden_units)] if hidden_units else []) + (
                ["--propagation-layer-norm"] if layer_norm else [])


def row_name(row, steps, aggregation, update, directions="both", hidden_units=None,
             layer_norm=False, epochs=None, patience=None):
    """The row's name in the JSON and the table: ``row`` for the fusion rows and the deep form's
    default settings, else ``row (update, aggregation[, N steps][, directions][, hidden N][,
    layer norm])``;
    a training length other than the default's (``TRAINING_DEFAULTS``) is named too, on every
    row: ``baseline (40 epochs, patience 8)``."""
    settings = []
    if ROWS[row][1] and (steps, aggregation, update, directions, hidden_units,
                         layer_norm) != tuple(DEEP_DEFAULTS.values()):
        settings = [update, aggregation] + ([f"{steps} steps"]
                                            if steps != DEEP_DEFAULTS["steps"] else [])
        settings += [directions] if directions != DEEP_DEFAULTS["directions"] else []
        settings += [f"hidden {hidden_units}"] if hidden_units else []
        settings += ["layer norm"] if layer_norm else []
    training = {"epochs": epochs, "patience": patience}
    if any(v is not None and v != TRAINING_DEFAULTS[k] for k, v in training.items()):
        settings += [f"{epochs or TRAINING_DEFAULTS['epochs']} epochs",
                     f"patience {patience or TRAINING_DEFAULTS['patience']}"]
    return f"{row} ({', '.join(settings)})" if settings else row


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[40000], choices=(12000, 40000))
    p.add_argument("--seeds", type=int, nargs="+", required=True,
                   help="the comparison's seeds, fixed before it runs")
    p.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    p.add_argument("--predictor", help="'learned' rows: a predictor .keras file")
    p.add_argument("--tokenizer", help="'learned' rows: its tokenizer directory")
    p.add_argument("--epochs", type=int, default=TRAINING_DEFAULTS["epochs"])
    p.add_argument("--patience", type=int, default=TRAINING_DEFAULTS["patience"],
                   help="epochs without a better validation accuracy before a run stops")
    p.add_argument("--units", type=int, default=64, help="embedding and GRU width")
    p.add_argument("--propagation-steps", type=int, default=DEEP_DEFAULTS["steps"],
                   help="the deep form's steps")
    p.add_argument("--propagation-aggregation", choices=("sum", "mean"),
                   default=DEEP_DEFAULTS["aggregation"], help="the deep form's aggregation")
    p.add_argument("--propagation-update", choices=("mlp", "gru"),
                   default=DEEP_DEFAULTS["update"], help="the deep form's update")
    p.add_argument("--propagation-directions", choices=("both", "forward", "backward"),
                   default=DEEP_DEFAULTS["directions"],
                   help="the graphs' directions the deep form hears (backward: over the gold "
                        "trees, an operator's arguments alone)")
    p.add_argument("--propagation-hidden-units", type=int, default=DEEP_DEFAULTS["hidden_units"],
                   help="the width of the deep form's hidden layer (default: its update's)")
    p.add_argument("--propagation-layer-norm", action="store_true",
                   help="layer normalisation in the deep form's update")
    p.add_argument("--run-dir", default="runs/listops_ceiling")
    p.add_argument("--output", help="the JSON to write (rows already in it are kept)")
    p.add_argument("--render", action="store_true", help="print --output's table and stop")
    return p.parse_args(argv)


def make_data(data_dir):
    """``train40000.tsv`` (its first 12,000 lines are the 12,000 set) and ``test.tsv``, once."""
    from glomo_tf.data.listops import generate_listops, write_listops

    paths = {size: os.path.join(data_dir, f"train{size}.tsv") for size in (12000, 40000)}
    paths["test"] = os.path.join(data_dir, "test.tsv")
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    os.makedirs(data_dir, exist_ok=True)
    shape = dict(max_depth=4, max_length=40)
    train = generate_listops(40000, seed=0, **shape)
    seen = {e.expression for e in train}
    test = [e for e in generate_listops(2000, seed=2, **shape) if e.expression not in seen]
    write_listops(paths[40000], train)
    write_listops(paths[12000], train[:12000])
    write_listops(paths["test"], test[:1000])
    return paths


def row_key(size, row):
    return f"{size} | {row}"


def run_folder(name):
    """A row's run directory: ``gold, propagation (gru, sum)`` -> ``gold_propagation_gru_sum``."""
    return "_".join(re.findall(r"[A-Za-z0-9]+", name))


def seeds_already_run(out, variant):
    """The seeds whose ``variant`` run ``out/results.json`` holds before this invocation (they
    are resumed, not trained again)."""
    from glomo_tf import evaluation

    path = os.path.join(out, "results.json")
    if not os.path.exists(path):
        return set()
    with open(path, encoding="utf-8") as handle:
        return set(evaluation.per_seed_accuracy(json.load(handle)["runs"], variant))


def where_this_runs():
    """The date and machine of this invocation (``benchmarks/_harness.recorded``'s)."""
    from _harness import recorded

    stamp = recorded()
    return {"date": stamp["date"], "machine": stamp["machine"], "code": stamp["code"]}


def render_table(record):
    """The Markdown table of a JSON written by this script: a row per (size, row), each size's
    baselines first."""
    lines = ["| training expressions | graphs, form | seeds | test accuracy by seed | mean | "
             "- baseline |", "|---:|---|---:|---|---:|---:|"]
    entries = sorted(record["rows"].values(),
                     key=lambda e: (e["size"], not e["row"].startswith("baseline")))
    for entry in entries:
        accuracies = [100 * a for a in entry["accuracy_by_seed"].values()]
        mean = sum(accuracies) / len(accuracies)
        by_seed = " / ".join(f"{a:.1f}" for a in accuracies)
        paired = entry.get("paired_with_baseline")
        if paired:
            seeds = paired["seeds"]
            versus = (f"{100 * paired['mean_difference']:+.2f} ({paired['wins']} / "
                      f"{paired['losses']}" + (f", p {paired['p']:.2g})" if seeds > 1 else ")"))
        else:
            versus = "-"
        lines.append(f"| {entry['size']:,} | {entry['row']} | {len(accuracies)} | {by_seed} | "
                     f"{mean:.1f} | {versus} |")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    record = read_record(args.output, {"rows": {}})
    if args.render:
        print(render_table(record))
        return 0
    if "learned, propagation" in args.rows and not (args.predictor and args.tokenizer):
        raise SystemExit("the row 'learned, propagation' needs --predictor and --tokenizer")
    from glomo_tf import cli, evaluation

    paths = make_data(os.path.join(args.run_dir, "data"))
    here = where_this_runs()
    for size in args.sizes:
        results, names = {}, {}
        # The rows asked for first, the baseline they are paired with last: an invocation
        # started while another trains the same baseline (its own length, one run directory)
        # reaches it after its own rows and resumes it.
        for row in [r for r in args.rows if r != "baseline"] + ["baseline"]:
            variant, deep, extra = ROWS[row]
            form = (args.propagation_steps, args.propagation_aggregation,
                    args.propagation_update, args.propagation_directions,
                    args.propagation_hidden_units, args.propagation_layer_norm)
            names[row] = name = row_name(row, *form, epochs=args.epochs, patience=args.patience)
            flags = ["--variants", variant, *extra] + (deep_flags(*form) if deep else [])
            out = os.path.join(args.run_dir, str(size), run_folder(name))
            pretrained = (["--model", args.predictor, "--tokenizer", args.tokenizer]
                          if variant.startswith("glomo") else [])
            argv_row = ["transfer", "--dataset", "listops", "--file", paths[size], "--test-file",
                        paths["test"], *flags, *pretrained, "--seeds", *map(str, args.seeds),
                        "--embedding-dim", str(args.units), "--rnn-units", str(args.units),
                        "--epochs", str(args.epochs), "--patience", str(args.patience),
                        "--output-dir", out, "--resume", "--save-models", "--verbose", "2"]
            resumed = seeds_already_run(out, variant)
            if cli.main(argv_row) != 0:
                raise SystemExit(f"row {row!r} failed: glomo {' '.join(argv_row)}")
            with open(os.path.join(out, "results.json"), encoding="utf-8") as handle:
                runs = json.load(handle)["runs"]
            results[row] = evaluation.per_seed_accuracy(runs, variant)
            seconds = evaluation.per_seed_accuracy(runs, variant, metric="seconds")
            before = record["rows"].get(row_key(size, name), {})
            entry = {"size": size, "row": name, "variant": variant,
                     "command": "glomo " + " ".join(argv_row),
                     "seeds": sorted(results[row]),
                     "accuracy_by_seed": {str(s): a for s, a in sorted(results[row].items())},
                     "seconds_by_seed": {str(s): round(t, 1) for s, t in sorted(seconds.items())},
                     # Where each seed's run was trained: a seed whose run the directory
                     # already held was resumed, not trained here, and keeps the record's entry.
                     "trained_on": {str(s): before.get("trained_on", {}).get(str(s))
                                    if s in resumed else here
                                    for s in sorted(results[row])}}
            record["rows"][row_key(size, name)] = entry
            if args.output:
                write_record(args.output, record)
        for row, name in names.items():
            if row != "baseline":
                record["rows"][row_key(size, name)]["paired_with_baseline"] = (
                    evaluation.paired_comparison(results[row], results["baseline"]))
        if args.output:
            write_record(args.output, record)
    print(render_table(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
