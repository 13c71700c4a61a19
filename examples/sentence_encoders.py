"""Self-supervised sentence encoders on WikiText-2, probed SentEval-style on MR, SUBJ and SST-2:
QT+SP+G2L and its three leave-one-out ablations (the thesis' Table 3.1 rows), each trained with
the same budget, against a bag of words and a random encoder of the same size (and GLoMo
features when ``--glomo-run`` names a ``glomo pretrain`` run).

Pretraining: ``glomo sentence-pretrain`` (:func:`glomo_tf.experiments.sentence_pretraining.
run_sentence_pretraining`) on the consecutive sentences of WikiText-2's validation and test
files, one run directory per objective set under ``--runs-dir`` (resumable: rerun the same
command after an interruption). Every model has the same sizes, seed, batches and steps; with
three objectives two are sampled per batch (the thesis' protocol), with two both train on every
batch, so each ablation sees the same batches but not the same number of objective updates, as
in the thesis.

Probing: ``glomo probe`` (:mod:`glomo_tf.experiments.probe`): frozen vectors, logistic regression, 10-fold
cross-validation with the L2 strength chosen on inner folds (MR, SUBJ), the dev split (SST-2).
``bow`` is the mean of the full model's trained word embeddings, ``random`` an untrained model of
the full model's configuration.

The thesis trains 4,800-dimensional vectors for 10 epochs over 74 million BookCorpus sentences on
a GPU; WikiText-2's two small splits (17k sentence pairs) and a CPU budget give much weaker
encoders, so the numbers here compare the objectives with each other and with the baselines under
one small budget, not with Table 3.1.

Run (the defaults: SentEval's 10 outer folds, C chosen by 3 inner folds)::

    python examples/sentence_encoders.py --output examples/outputs/sentence_encoders.json

The recorded ``examples/outputs/sentence_encoders.json`` came from a cheaper probe (5 outer and
2 inner folds; about 28 minutes with the pretraining on two busy CPU cores)::

    python examples/sentence_encoders.py --epochs 2 --steps-per-epoch 120 --folds 5 \
        --inner-folds 2 --c-values 0.25 1 4 --glomo-run runs/wt2_gru \
        --output examples/outputs/sentence_encoders.json

``examples/outputs/sentence_encoders_long.json`` resumed those runs to six times the budget, added
the full model fed with a ``glomo pretrain`` run's frozen graphs (``--graph-run``) and probed over
a wider grid of L2 strengths (over an hour on two busy cores, the GLoMo-fed model's
pretraining included)::

    python examples/sentence_encoders.py --runs-dir runs/sentence_encoders_long --epochs 12 \
        --steps-per-epoch 120 --folds 5 --inner-folds 2 --c-values 0.25 1 4 16 64 \
        --glomo-run runs/wt2_gru --graph-run runs/wt2_gru \
        --output examples/outputs/sentence_encoders_long.json

``--tiny`` runs everything at toy size in about a minute (the test suite's check).
It prints the table and writes JSON: settings, command, wall times, each run's pretraining
metrics, each encoder's probe results per task, and the comparisons the issue asks for.
"""

import argparse
import json
import os
import sys
import time

from glomo_tf import hparams
from glomo_tf.experiments.probe import ProbeConfig, markdown_table, run_probe
from glomo_tf.experiments.sentence_pretraining import SentencePretrainingConfig, run_sentence_pretraining

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, os.pardir, "shared", "data")
# The thesis' Table 3.1 rows: all three objectives, then each left out.
VARIANTS = {"QT+SP+G2L": ("qt", "sp", "g2l"), "QT+SP-G2L": ("qt", "sp"),
            "QT+G2L-SP": ("qt", "g2l"), "SP+G2L-QT": ("sp", "g2l")}
LEFT_OUT = {"QT+SP-G2L": "g2l", "QT+G2L-SP": "sp", "SP+G2L-QT": "qt"}
# All three objectives with a frozen GLoMo predictor's graphs in both encoders (--graph-run).
GRAPH_VARIANT = "QT+SP+G2L+GLoMo"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train", nargs="+", default=[os.path.join(DATA, "wikitext2", "valid.txt"),
                                                  os.path.join(DATA, "wikitext2", "test.txt")])
    p.add_argument("--data-dir", default=DATA, help="folder holding mr/, subj/, sst/")
    p.add_argument("--runs-dir", default=os.path.join(REPO, "runs", "sentence_encoders"))
    p.add_argument("--output", default=None, help="JSON file to write")
    p.add_argument("--embedding-dim", type=int, default=128)
    p.add_argument("--units", type=int, default=128)
    p.add_argument("--vocab-size", type=int, default=20_000)
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps-per-epoch", type=int, default=None)
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--precision", default="float32", choices=hparams.PRECISIONS,
                   help="the pretraining's (mixed_bfloat16: products in bfloat16)")
    p.add_argument("--tasks", nargs="+", default=list(hparams.PROBE_TASKS))
    p.add_argument("--folds", type=int, default=10)
    p.add_argument("--inner-folds", type=int, default=3)
    p.add_argument("--c-values", nargs="+", type=float, default=[0.25, 1.0, 4.0])
    p.add_argument("--max-examples", type=int, default=None)
    p.add_argument("--glomo-run", default=None, help="a glomo pretrain run for GLoMo features")
    p.add_argument("--graph-run", default=None,
                   help="a glomo pretrain run whose frozen graphs feed one more QT+SP+G2L "
                        "model (QT+SP+G2L+GLoMo; its tokenizer is the graph run's)")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--tiny", action="store_true", help="toy sizes, for the test suite")
    args = p.parse_args(argv)
    if args.tiny:
        args.embedding_dim, args.units, args.vocab_size, args.max_length = 8, 6, 2000, 12
        args.batch_size, args.epochs, args.steps_per_epoch = 16, 1, 3
        args.folds, args.inner_folds, args.c_values, args.max_examples = 2, 2, [1.0], 60
    return args


def main(argv=None):
    args = parse_args(argv)
    started = time.perf_counter()
    pretraining = {}
    variants = list(args.variants) + ([GRAPH_VARIANT] if args.graph_run else [])
    for name in variants:
        run_dir = os.path.join(args.runs_dir, name)
        print(f"== pretraining {name} -> {run_dir}", flush=True)
        start = time.perf_counter()
        run_sentence_pretraining(SentencePretrainingConfig(
            output_dir=run_dir, train=args.train, format="wikitext", vocab_size=args.vocab_size,
            max_length=args.max_length, embedding_dim=args.embedding_dim, units=args.units,
            objectives=VARIANTS.get(name, VARIANTS["QT+SP+G2L"]),
            learning_rate=args.learning_rate, epochs=args.epochs,
            steps_per_epoch=args.steps_per_epoch, batch_size=args.batch_size, seed=args.seed,
            graph_run=args.graph_run if name == GRAPH_VARIANT else None,
            precision=args.precision, verbose=2))
        with open(os.path.join(run_dir, "metrics.json")) as f:
            pretraining[name] = dict(json.load(f), seconds_this_call=round(
                time.perf_counter() - start, 1))
    runs = [os.path.join(args.runs_dir, name) for name in variants]
    probe_started = time.perf_counter()
    summary = run_probe(ProbeConfig(
        runs=runs, baselines=list(hparams.PROBE_BASELINES),
        glomo_runs=[args.glomo_run] if args.glomo_run else [], tasks=args.tasks,
        data_dir=args.data_dir, folds=args.folds, inner_folds=args.inner_folds,
        c_values=tuple(args.c_values), max_examples=args.max_examples, seed=args.seed))
    results = summary["results"]
    out = {
        "command": "python examples/sentence_encoders.py " + " ".join(
            sys.argv[1:] if argv is None else argv),
        "settings": {k: v for k, v in vars(args).items()},
        "pretraining": pretraining,
        "probe": results,
        "table": markdown_table(results, args.tasks),
        "comparisons": comparisons(results, variants, args.tasks),
        "probe_wall_time_s": round(time.perf_counter() - probe_started, 1),
        "wall_time_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(out["comparisons"], indent=1))
    if args.output:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w") as f:
            json.dump(out, f, indent=1)
        print(f"Wrote {args.output}")
    return out


def comparisons(results, variants, tasks):
    """Which trained encoders beat both baselines on every task, and each objective's
    importance: the full model's mean accuracy minus the model without it."""
    def mean_accuracy(name):
        return sum(results[name][t]["accuracy"] for t in tasks) / len(tasks)

    beats = {name: {t: results[name][t]["accuracy"] > max(results["bow"][t]["accuracy"],
                                                          results["random"][t]["accuracy"])
                    for t in tasks} for name in variants}
    out = {"beats_bow_and_random": beats,
           "mean_accuracy": {name: round(mean_accuracy(name), 4) for name in results}}
    if "QT+SP+G2L" in variants:
        drops = {LEFT_OUT[name]: round(mean_accuracy("QT+SP+G2L") - mean_accuracy(name), 4)
                 for name in variants if name in LEFT_OUT}
        out["drop_when_left_out"] = drops
        if drops:
            out["matters_most"] = max(drops, key=drops.get)
            out["matters_least"] = min(drops, key=drops.get)
    return out


if __name__ == "__main__":
    main()
