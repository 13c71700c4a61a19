"""The probe accuracy of a ``glomo sentence-pretrain`` run against the sentence pairs it has seen.

A run started with ``--snapshot-every-epoch`` keeps its model after each epoch in
``RUN/snapshots/step-N/`` (``--steps-per-epoch`` sets how often). This script probes each snapshot
with ``glomo probe``'s protocol (:mod:`glomo_tf.experiments.probe`: frozen vectors, logistic
regression, outer folds with the L2 strength chosen on inner folds; SST-2 on its own splits) and
the baselines of the newest one: ``bow``, the mean of its own trained word embeddings, and
``random``, an untrained encoder of the same sizes. It is resumable: snapshots already in
``--output`` are kept, so a run that trains on can be probed again as it goes, and
``--snapshots`` probes some of them (two processes can share the work, then ``--merge`` joins
their files).

Recorded (``examples/outputs/sentence_encoders_books.json``; the run:
``glomo sentence-pretrain --format books --train ../shared/data/books/train-0*.txt.gz
--lowercase --output-dir runs/sent_books/QT+SP+G2L --embedding-dim 128 --units 128
--batch-size 400 --steps-per-epoch 1250 --epochs 8 --snapshot-every-epoch``)::

    python examples/sentence_curve.py --run runs/sent_books/QT+SP+G2L --folds 5 \\
        --inner-folds 2 --c-values 0.25 1 4 16 64 256 1024 \\
        --output examples/outputs/sentence_encoders_books.json

(the snapshots were probed as the run went on, each call adding the new ones and the newest's
baselines; the first two into a file of their own, joined with ``--merge``; the recorded
``command`` is the last call). With ``--max-iter 1000`` every logistic regression runs to
convergence (``examples/outputs/sentence_encoders_books_converged.json``, the newest snapshot
only: ``--snapshots step-N``); ``--pooling max`` probes the runs' (and the random baseline's)
states max-pooled instead of the thesis' last states; a file holds the probes of one setting only.
``--heldout FILE`` adds each snapshot's losses on held-out text of the run's format (the first
``--heldout-pairs`` pairs, at the run's batch size): unlike the epoch's training losses, which
average the steps of an epoch (after a resumption, its resumed part only), they compare two runs'
models at equal pairs on equal sentences.

``--tiny`` is the test suite's toy-size check: a run on a small generated corpus, probed on a
generated task.
"""

import argparse
import json
import os
import sys
import tempfile
import time

from glomo_tf import hparams
from glomo_tf.experiments.probe import (MAX_ITER, ProbeConfig, markdown_table, pooled_name,
                                        run_probe)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", help="a glomo sentence-pretrain run directory with snapshots/")
    p.add_argument("--output", required=True, help="the JSON to write (resumed if it exists)")
    p.add_argument("--snapshots", nargs="*", default=None, metavar="NAME",
                   help="probe only these (step-N names); default: every snapshot")
    p.add_argument("--merge", nargs="*", default=[], metavar="JSON",
                   help="other outputs of this script for the same run to join into --output")
    p.add_argument("--baselines", nargs="*", default=["bow", "random"],
                   choices=hparams.PROBE_BASELINES, help="of the newest snapshot")
    p.add_argument("--tasks", nargs="*", default=list(hparams.PROBE_TASKS),
                   choices=hparams.PROBE_TASKS)
    p.add_argument("--file", nargs="*", default=[], help="your own tasks (glomo probe --file)")
    p.add_argument("--data-dir", default=os.path.join(REPO, "..", "shared", "data"))
    p.add_argument("--folds", type=int, default=10)
    p.add_argument("--inner-folds", type=int, default=10)
    p.add_argument("--c-values", type=float, nargs="+", default=list(hparams.PROBE_C_VALUES))
    p.add_argument("--max-iter", type=int, default=MAX_ITER,
                   help="lbfgs iterations of each fit at most (glomo probe --max-iter)")
    p.add_argument("--pooling", default="final", choices=hparams.SENTENCE_POOLINGS,
                   help="the runs' and the random baseline's vectors (glomo probe --pooling): "
                   "final, the thesis' last states, or max / mean over the positions")
    p.add_argument("--heldout", nargs="*", default=[], metavar="FILE",
                   help="held-out text in the run's format: each snapshot's losses on its first "
                   "--heldout-pairs sentence pairs, in batches of the run's batch size")
    p.add_argument("--heldout-pairs", type=int, default=20000)
    p.add_argument("--tiny", action="store_true", help="toy size, generated data (tests)")
    args = p.parse_args(argv)
    if not args.tiny and not args.run:
        p.error("give --run RUN (a glomo sentence-pretrain run with --snapshot-every-epoch).")
    return args


def snapshots_of(run_dir):
    """``[(name, metrics)]`` of ``RUN/snapshots``, oldest first."""
    folder = os.path.join(run_dir, "snapshots")
    names = sorted(n for n in os.listdir(folder) if n.startswith("step-")
                   and not n.endswith(".partial")) if os.path.isdir(folder) else []
    if not names:
        raise SystemExit(f"error: {folder} holds no snapshots: pretrain with "
                         "--snapshot-every-epoch (a resumed run may turn it on).")
    return [(n, json.load(open(os.path.join(folder, n, "metrics.json")))) for n in names]


def probe(runs, baselines, args):
    return run_probe(ProbeConfig(
        runs=runs, baselines=baselines, tasks=[] if args.file else args.tasks,
        files=args.file, data_dir=args.data_dir, folds=args.folds,
        inner_folds=args.inner_folds, c_values=tuple(args.c_values), max_iter=args.max_iter,
        pooling=[args.pooling]), log=print)["results"]


def tiny_run(folder):
    """A toy run with two snapshots and a toy task, for the test suite."""
    import random

    from glomo_tf import cli

    rng = random.Random(0)
    words = "the a cat dog sat ran on under mat house big small red blue".split()
    corpus = os.path.join(folder, "corpus.txt")
    with open(corpus, "w") as f:
        for _ in range(20):
            for _ in range(4):
                f.write(" ".join(rng.choice(words) for _ in range(rng.randint(3, 8))) + " .\n")
            f.write("\n")
    run_dir = os.path.join(folder, "run")
    assert cli.main(["sentence-pretrain", "--format", "lines", "--train", corpus,
                     "--output-dir", run_dir, "--embedding-dim", "6", "--units", "5",
                     "--batch-size", "12", "--epochs", "2", "--snapshot-every-epoch",
                     "--verbose", "0"]) == 0
    task = os.path.join(folder, "task.tsv")
    with open(task, "w") as f:
        f.write("text\tlabel\n")
        for i in range(40):
            f.write(f"the {'cat' if i % 2 else 'dog'} sat on {rng.choice(words)}\t{i % 2}\n")
    return run_dir, task


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.perf_counter()
    if args.tiny:
        folder = tempfile.mkdtemp(prefix="sentence_curve_")
        args.run, task = tiny_run(folder)
        args.file, args.folds, args.inner_folds, args.c_values = [task], 2, 2, [1.0, 1e4]
    record = {"curve": {}, "baselines": {}}
    run_config = json.load(open(os.path.join(args.run, "config.json")))
    heldout = args.heldout and {"files": list(args.heldout), "pairs": args.heldout_pairs,
                                "batch_size": run_config["batch_size"]}
    settings = {"folds": args.folds, "inner_folds": args.inner_folds,
                "c_values": list(args.c_values), "max_iter": args.max_iter,
                "pooling": args.pooling}
    for path in [args.output] + list(args.merge):
        if os.path.exists(path):
            saved = json.load(open(path))
            before = {"max_iter": MAX_ITER, "pooling": "final",
                      **saved.get("probe_settings", settings)}
            if before != settings:
                raise SystemExit(f"error: {path} was probed with {before}, not {settings}: "
                                 "give the same settings, or another --output.")
            if heldout and saved.get("heldout", heldout) != heldout:
                raise SystemExit(f"error: {path} holds held-out losses of {saved['heldout']}, "
                                 f"not {heldout}: give the same --heldout settings, or another "
                                 "--output.")
            if saved.get("heldout"):
                record["heldout"] = saved["heldout"]
            record["curve"].update(saved.get("curve", {}))
            if saved.get("baselines", {}).get("results"):
                record["baselines"] = saved["baselines"]
    snapshots = snapshots_of(args.run)
    wanted = args.snapshots if args.snapshots is not None else [n for n, _ in snapshots]
    unknown = sorted(set(wanted) - {n for n, _ in snapshots})
    if unknown:
        raise SystemExit(f"error: no snapshot {unknown[0]} in {args.run}/snapshots.")
    newest, _ = snapshots[-1]
    baselines = args.baselines if (record["baselines"].get("snapshot") != newest
                                   and newest in wanted) else []
    missing = [(n, m) for n, m in snapshots if n in wanted and n not in record["curve"]]
    # One probe for all, so the tasks are read once; the baselines come from its first run.
    runs = [n for n, _ in missing]
    if baselines:
        runs = [newest] + [n for n in runs if n != newest]
    results = probe([os.path.join(args.run, "snapshots", n) for n in runs], baselines,
                    args) if runs else {}
    # The random baseline is pooled as the runs are (its results' name says so); bow is not.
    label = {b: b if b == "bow" else pooled_name(b, args.pooling) for b in hparams.PROBE_BASELINES}
    for name, metrics in missing:
        record["curve"][name] = {"steps": metrics["steps"], "pairs_seen": metrics["pairs_seen"],
                                 "epoch_seconds": metrics.get("epoch_seconds"),
                                 "losses": metrics["last_epoch"],
                                 # the steps the losses average (None: a snapshot from before
                                 # loss_steps was recorded); fewer than the epoch's after a resume
                                 "loss_steps": metrics.get("loss_steps"),
                                 "probe": results[pooled_name(name, args.pooling)]}
    if heldout:  # every point without them whose snapshot is here, probed now or before
        from glomo_tf.experiments.sentence_pretraining import heldout_losses

        record["heldout"] = heldout
        present = {n for n, _ in snapshots}
        for name, point in record["curve"].items():
            if name in present and "heldout_losses" not in point:
                point["heldout_losses"] = heldout_losses(
                    os.path.join(args.run, "snapshots", name), args.heldout,
                    run_config["format"], args.heldout_pairs, run_config["batch_size"],
                    run_config["max_length"])
                print(f"{name}: held-out losses {point['heldout_losses']}", flush=True)
    if baselines:
        record["baselines"] = {"snapshot": newest,
                               "results": {b: results[label[b]] for b in baselines}}
    record["curve"] = dict(sorted(record["curve"].items()))
    rows = {f"{v['pairs_seen']:,} pairs": v["probe"] for v in record["curve"].values()}
    rows.update({f"{label[b]} ({record['baselines']['snapshot']})": r
                 for b, r in record["baselines"].get("results", {}).items()})
    seen = {t for r in rows.values() for t in r}
    task_names = [t for t in hparams.PROBE_TASKS if t in seen] + sorted(
        seen - set(hparams.PROBE_TASKS))
    record.update({
        "command": "python examples/sentence_curve.py " + " ".join(sys.argv[1:] if argv is None
                                                                    else argv),
        "run": os.path.relpath(args.run, REPO) if not args.tiny else "tiny",
        "run_config": run_config,
        "probe_settings": settings,
        "table": markdown_table(rows, task_names),
        "wall_time_s_this_call": round(time.perf_counter() - started, 1)})
    record["run_config"].pop("output_dir", None)
    if os.path.dirname(args.output):
        os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(record, f, indent=1)
    print(record["table"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
