"""SentEval-style probing of frozen sentence vectors (``glomo probe``), and nearest neighbours.

``run_probe(ProbeConfig(...))`` runs what the command runs: every encoder of
:func:`~glomo_tf.experiments.probe_encoders.load_encoders` (a ``glomo sentence-pretrain`` run,
its ``bow`` and ``random`` baselines, GLoMo features of a ``glomo pretrain`` run or preset) on
every task of :func:`~glomo_tf.experiments.probe_protocol.load_tasks`, scored by SentEval's
protocol (a logistic regression on the frozen vectors: 10-fold cross-validation, or ``C`` chosen
on a dev split; :mod:`glomo_tf.experiments.probe_protocol`). It writes ``probe.json`` and
``probe.md``; :func:`nearest_sentences` gives the thesis' Table 3.3 (the nearest sentences of a
query in a pool).

This module holds the command's settings (:class:`ProbeConfig`) and run, and hands on the names
of :mod:`glomo_tf.experiments.probe_encoders` and :mod:`glomo_tf.experiments.probe_protocol`.
"""

import dataclasses
import json
import os
import time
from typing import Optional

from glomo_tf import hparams
from glomo_tf.experiments.probe_encoders import (MODEL_FILE, TOKENIZER_DIR, BagOfWords,
                                                 GlomoFeatures, SentenceRunEncoder, load_encoders,
                                                 load_sentence_run, pooled_name, random_like)
from glomo_tf.experiments.probe_protocol import (MAX_ITER, SPLIT_TASKS, Task, choose_c,
                                                 load_tasks, nearest_sentences, probe_kfold,
                                                 probe_split, probe_task)
from glomo_tf.experiments.settings import setting

__all__ = [
    "MAX_ITER", "MODEL_FILE", "RESULTS_FILE", "SPLIT_TASKS", "TABLE_FILE", "TOKENIZER_DIR",
    "BagOfWords", "GlomoFeatures", "ProbeConfig", "SentenceRunEncoder", "Task", "choose_c",
    "load_encoders", "load_sentence_run", "load_tasks", "markdown_table", "nearest_sentences",
    "pooled_name", "probe_kfold", "probe_split", "probe_task", "random_like", "run_probe",
]

RESULTS_FILE, TABLE_FILE = "probe.json", "probe.md"


@dataclasses.dataclass(kw_only=True)
class ProbeConfig:
    """Every setting of ``glomo probe`` (one field per flag)."""

    # encoders
    runs: list = setting(help="glomo sentence-pretrain run directories", group="encoders",
                         flags=("--run",), metavar="DIR", default_factory=list)
    baselines: list = setting(help="bow: mean of the first run's word embeddings; random: an "
                              "untrained encoder of the first run's sizes", group="encoders",
                              nargs="*", choices=hparams.PROBE_BASELINES, default_factory=list)
    glomo_runs: list = setting(help="glomo pretrain run directories (GLoMo features)",
                               group="encoders", flags=("--glomo-run",), metavar="DIR",
                               default_factory=list)
    pooling: list = setting(help="how each run's (and the random baseline's) states become "
                            "its vector: final, the thesis' last states; max or mean over the "
                            "positions (one encoder per pooling given)", group="encoders",
                            nargs="+", choices=hparams.SENTENCE_POOLINGS,
                            default_factory=lambda: ["final"])
    glomo_presets: list = setting(help="graph-predictor presets, built-in names or directories "
                                  "(GLoMo features)", group="encoders",
                                  flags=("--glomo-preset",), metavar="NAME_OR_DIR",
                                  default_factory=list)
    # tasks
    tasks: Optional[list] = setting(None, "built-in tasks (default: all of them, unless `files` "
                                    "or `neighbours` is given)", group="tasks", nargs="*",
                                    choices=hparams.PROBE_TASKS)
    files: list = setting(help="your own task: a .tsv/.csv file or a folder of one file per "
                          "class", group="tasks", flags=("--file",), metavar="PATH",
                          default_factory=list)
    text_column: str = setting("text", "text column of `files`", group="tasks")
    label_column: str = setting("label", "label column of `files`", group="tasks")
    data_dir: Optional[str] = setting(None, "folder holding mr/, subj/ and sst/ (default: the "
                                      "checkout's ../shared/data)", group="tasks")
    max_examples: Optional[int] = setting(None, "a seeded subset of each task (of each split), "
                                          "for quick runs", group="tasks")
    # classifier
    folds: int = setting(10, "outer cross-validation folds", group="classifier")
    inner_folds: int = setting(10, "folds choosing the L2 strength inside each outer fold",
                               group="classifier")
    c_values: tuple = setting(hparams.PROBE_C_VALUES, "inverse L2 strengths tried",
                              group="classifier", parse=float)
    max_iter: int = setting(MAX_ITER, "lbfgs iterations of each logistic regression at most "
                            "(100: scikit-learn's default; 1000 lets the fits converge)",
                            group="classifier")
    seed: int = setting(0, "seed of the folds and subsets", group="classifier")
    batch_size: int = setting(256, "sentences encoded at once", group="classifier")
    # nearest neighbours
    neighbours: list = setting(help="print the nearest sentences of these queries in `pool`",
                               group="nearest neighbours", metavar="QUERY",
                               default_factory=list)
    pool: Optional[str] = setting(None, "a file of sentences, one per line",
                                  group="nearest neighbours")
    k: int = setting(3, "neighbours per query", group="nearest neighbours")
    output_dir: Optional[str] = setting(None, "write probe.json and probe.md here")

    def validated(self):
        c = dataclasses.replace(self)
        if c.tasks is None:
            c.tasks = [] if (c.neighbours or c.files) else list(hparams.PROBE_TASKS)
        if c.folds < 2 or c.inner_folds < 2:
            raise ValueError("`folds` and `inner_folds` must be at least 2.")
        if not c.c_values or min(c.c_values) <= 0:
            raise ValueError("`c_values` must be positive numbers.")
        if c.max_examples is not None and c.max_examples < 2 * c.folds:
            raise ValueError(f"`max_examples` must be at least 2 x `folds` ({2 * c.folds}).")
        if c.batch_size < 1 or c.k < 1 or c.max_iter < 1:
            raise ValueError("`batch_size`, `k` and `max_iter` must be at least 1.")
        if c.neighbours and not c.pool:
            raise ValueError("`neighbours` needs `pool` FILE (one sentence per line).")
        if c.pool and not c.neighbours:
            raise ValueError("`pool` is read with `neighbours` QUERY... only.")
        if c.pool and not os.path.isfile(c.pool):
            raise ValueError(f"`pool` {c.pool!r} is not a file.")
        for run_dir in list(c.runs) + list(c.glomo_runs):
            if not os.path.isdir(run_dir):
                raise ValueError(f"{run_dir!r} is not a run directory.")
        if c.glomo_presets:
            from glomo_tf.presets import PresetError, preset_directory
            for preset in c.glomo_presets:
                try:
                    preset_directory(preset)
                except PresetError as error:
                    raise ValueError(f"`glomo_presets`: {error}") from None
        if not c.tasks and not c.files and not c.neighbours:
            raise ValueError("nothing to do: give `tasks`, `files` or `neighbours`.")
        return c


def run_probe(config, log=print):
    """Probes every encoder on every task of a :class:`ProbeConfig`; prints a Markdown table and,
    with ``output_dir``, writes ``probe.json`` and ``probe.md``. Returns the results dict."""
    c = config.validated()
    started = time.perf_counter()
    tasks = load_tasks(c.tasks, c.files, c.data_dir, c.max_examples, c.seed, c.text_column,
                       c.label_column)
    encoders = load_encoders(c.runs, c.baselines, c.glomo_runs, c.batch_size, c.seed,
                             c.glomo_presets, c.pooling)
    results = {}
    for encoder in encoders:
        results[encoder.name] = {}
        for task in tasks:
            start = time.perf_counter()
            result = probe_task(encoder, task, c.folds, c.inner_folds, tuple(c.c_values), c.seed,
                                c.max_iter)
            result["seconds"] = round(time.perf_counter() - start, 1)
            results[encoder.name][task.name] = result
            log(f"{encoder.name:>16} {task.name:>8}: {100 * result['accuracy']:.1f}% "
                f"({result['seconds']}s)")
    neighbours = []
    if c.neighbours:
        with open(c.pool, "rb") as f:
            pool = [line.strip() for line in f.read().decode("utf-8", "replace").splitlines()
                    if line.strip()]
        for encoder in encoders:
            for query, found in nearest_sentences(encoder, c.neighbours, pool, c.k):
                neighbours.append({"encoder": encoder.name, "query": query,
                                   "neighbours": [{"sentence": s, "cosine": round(v, 4)}
                                                  for s, v in found]})
                log(f"[{encoder.name}] Query: {query}")
                for n, (sentence, similarity) in enumerate(found, start=1):
                    log(f"  N{n} ({similarity:.3f}): {sentence}")
    summary = {"results": results, "neighbours": neighbours,
               "tasks": {t.name: t.protocol for t in tasks},
               "settings": {k: v for k, v in dataclasses.asdict(c).items()},
               "wall_time_s": round(time.perf_counter() - started, 1)}
    table = markdown_table(results, [t.name for t in tasks]) if tasks else ""
    if table:
        log(table)
    if c.output_dir:
        os.makedirs(c.output_dir, exist_ok=True)
        with open(os.path.join(c.output_dir, RESULTS_FILE), "w") as f:
            json.dump(summary, f, indent=1)
        with open(os.path.join(c.output_dir, TABLE_FILE), "w") as f:
            f.write(table + "\n")
        log(f"Wrote {os.path.join(c.output_dir, RESULTS_FILE)} and {TABLE_FILE}.")
    return summary


def markdown_table(results, task_names):
    """Accuracy (%) per encoder (rows) and task (columns); ``± std`` over the folds of the
    cross-validated tasks."""
    lines = ["| encoder | " + " | ".join(task_names) + " |",
             "|---|" + "---:|" * len(task_names)]
    for name, row in results.items():
        cells = []
        for task in task_names:
            r = row.get(task)
            if r is None:
                cells.append("")
            elif "std" in r:
                cells.append(f"{100 * r['accuracy']:.1f} ± {100 * r['std']:.1f}")
            else:
                cells.append(f"{100 * r['accuracy']:.1f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
