"""SentEval-style probing of frozen sentence vectors (``glomo probe``), and nearest neighbours.

The protocol of SentEval (Conneau and Kiela 2018) for the binary classification tasks, which the
thesis' chapter 3 follows (Section 3.3.3): the encoder is frozen, each sentence becomes a vector,
and a logistic regression (scikit-learn's) is trained on the vectors.

* Tasks without a split (MR, SUBJ, your own files): 10-fold cross-validation; in each fold the
  L2 strength ``C`` is chosen among :data:`glomo_tf.hparams.PROBE_C_VALUES` (SentEval's
  ``2^-2 .. 2^3``) by an inner cross-validation on the training folds (``inner_folds``, SentEval's
  10), then the classifier is refitted on all training folds with that ``C``. The score is the
  mean test accuracy over the folds.
* Tasks with a split (SST-2): ``C`` is chosen on the dev split, the classifier trained on train,
  and the score is the test accuracy.

The classifier is scikit-learn's ``LogisticRegression(C=C)`` with its defaults, as SentEval's
(lbfgs, at most 100 iterations: :data:`MAX_ITER`); features are used as they come, unscaled.
SentEval was written when scikit-learn's default solver was liblinear (until 0.22), which runs to
its tolerance; lbfgs stops at 100 iterations short of it on wide, correlated sentence vectors
at large ``C``. ``max_iter`` (``--max-iter``) lets every fit converge (1,000 do here).

Encoders (:func:`load_encoders`): a :class:`~glomo_tf.SentencePretrainer` run directory
(``[Enc_src(s) ; Enc_trg(s)]``: each encoder's last states, as the thesis; with ``pooling`` ``max``
or ``mean`` also its states pooled over the positions, as ``NAME:max``), and the baselines of the
same table: ``bow``, the mean of the run's
trained word embeddings (both encoders' tables, concatenated); ``random``, an untrained
:class:`~glomo_tf.SentencePretrainer` of the run's configuration (same sizes, fresh weights); and
GLoMo features of a ``glomo pretrain`` run (:class:`GlomoFeatures`).

``run_probe(ProbeConfig(...))`` runs what the command runs and writes ``probe.json`` and
``probe.md``; :func:`nearest_sentences` gives the thesis' Table 3.3 (the nearest sentences of a
query in a pool).
"""

import abc
import dataclasses
import json
import os
import time
from typing import Optional

import numpy as np

from glomo_tf import hparams
from glomo_tf.experiments.settings import setting

MODEL_FILE = "sentence_pretrainer.keras"
TOKENIZER_DIR = "tokenizer"
# Tasks with an official split: name -> loader arguments of glomo_tf.data.labeled.load_sst.
SPLIT_TASKS = {"sst2": False}
RESULTS_FILE, TABLE_FILE = "probe.json", "probe.md"


# ---------------------------------------------------------------------------------- encoders
class _TokenEncoder(abc.ABC):
    """Shared batching: texts -> ids with the run's tokenizer, in batches sorted by length."""

    name = "encoder"

    def __init__(self, tokenizer, batch_size=256, max_length=None):
        self.tokenizer = tokenizer
        self.batch_size = int(batch_size)
        self.max_length = max_length

    def encode(self, texts):
        """``[len(texts), dim]`` float32 vectors (in the order of ``texts``)."""
        texts = list(texts)
        if not texts:
            raise ValueError("no sentence to encode.")
        ids = self.tokenizer.encode(texts)  # ragged
        lengths = ids.row_lengths().numpy()
        order = np.argsort(lengths, kind="stable")
        rows = ids.to_list()
        out = None
        for start in range(0, len(texts), self.batch_size):
            chosen = order[start:start + self.batch_size]
            width = max(1, int(lengths[chosen].max()))
            if self.max_length:
                width = min(width, self.max_length)
            batch = np.zeros((len(chosen), width), "int32")
            for k, i in enumerate(chosen):
                row = rows[i][:width]
                batch[k, :len(row)] = row
            vectors = np.asarray(self._vectors(batch), np.float32)
            if out is None:
                out = np.zeros((len(texts), vectors.shape[1]), np.float32)
            out[chosen] = vectors
        return out

    @abc.abstractmethod
    def _vectors(self, ids):
        """The sentence vectors ``[B, D]`` of a padded id batch ``[B, T]`` (each encoder's own)."""


class SentenceRunEncoder(_TokenEncoder):
    """``[Enc_src(s) ; Enc_trg(s)]`` of a trained :class:`~glomo_tf.SentencePretrainer`, each
    encoder's vector pooled by ``pooling`` (``"final"``: the thesis'; ``"max"``, ``"mean"``)."""

    def __init__(self, model, tokenizer, name="run", pooling="final", **kwargs):
        super().__init__(tokenizer, **kwargs)
        self.model, self.name, self.pooling = model, name, pooling

    def _vectors(self, ids):
        return self.model.encode(ids, pooling=self.pooling).numpy()


class BagOfWords(_TokenEncoder):
    """The mean of a trained model's word embeddings over a sentence's units (both encoders'
    tables, concatenated): the bag-of-words baseline of the thesis' Table 3.1."""

    def __init__(self, model, tokenizer, name="bow", **kwargs):
        super().__init__(tokenizer, **kwargs)
        self.name = name
        self.table = np.concatenate([model.source_encoder.embeddings.numpy(),
                                     model.target_encoder.embeddings.numpy()], axis=1)

    def _vectors(self, ids):
        real = (ids != 0).astype(np.float32)[:, :, None]
        return (self.table[ids] * real).sum(1) / np.maximum(real.sum(1), 1.0)


class GlomoFeatures(_TokenEncoder):
    """Frozen GLoMo features of a ``glomo pretrain`` run's graph predictor: the mean over a
    sentence's units of ``[E ; M_fw E ; M_bw E]``, where ``E`` are the predictor's embeddings and
    ``M`` a direction's graphs averaged over its layers and heads (Eq. 1's graphs, no training)."""

    def __init__(self, predictor, tokenizer, name="glomo", **kwargs):
        super().__init__(tokenizer, **kwargs)
        self.predictor, self.name = predictor, name

    def _vectors(self, ids):
        out = self.predictor(ids, training=False)
        embedded = self.predictor.embed(ids).numpy().astype(np.float32)
        graphs = out["graphs"].numpy().astype(np.float32).mean(axis=(2, 3))  # [B, 2, T, T]
        mixed = np.einsum("bzts,bsd->bztd", graphs, embedded)
        features = np.concatenate([embedded, mixed[:, 0], mixed[:, 1]], axis=-1)
        real = (ids != 0).astype(np.float32)[:, :, None]
        return (features * real).sum(1) / np.maximum(real.sum(1), 1.0)


def load_sentence_run(run_dir):
    """``(model, tokenizer)`` of a ``glomo sentence-pretrain`` run directory."""
    from glomo_tf.data.vocabulary import Tokenizer
    from glomo_tf.saving import load_keras_file

    path = os.path.join(run_dir, MODEL_FILE)
    if not os.path.isfile(path):
        raise ValueError(f"no {MODEL_FILE} in {run_dir!r}: pass the `output_dir` of a finished "
                         "glomo sentence-pretrain run.")
    try:
        model = load_keras_file(path, compile=False)
    except Exception as error:  # a damaged file, or one from another library version
        raise ValueError(f"Could not load {path!r} ({type(error).__name__}: "
                         f"{str(error).splitlines()[0][:300]}). Pass the `output_dir` of a "
                         "finished glomo sentence-pretrain run.") from error
    return model, Tokenizer.load(os.path.join(run_dir, TOKENIZER_DIR))


def random_like(model, seed=0):
    """An untrained :class:`~glomo_tf.SentencePretrainer` of ``model``'s configuration."""
    import keras

    from glomo_tf.models.sentence_pretrainer import SentencePretrainer
    keras.utils.set_random_seed(seed)
    fresh = SentencePretrainer.from_config(model.get_config())
    fresh.build()
    if model.graph_predictor is not None:  # the frozen graphs are the run's, not random
        fresh.source_encoder.graph_predictor.set_weights(
            model.source_encoder.graph_predictor.get_weights())
        fresh.target_encoder.graph_predictor.set_weights(
            model.target_encoder.graph_predictor.get_weights())
    return fresh


def load_encoders(runs=(), baselines=(), glomo_runs=(), batch_size=256, seed=0,
                  glomo_presets=(), poolings=("final",)):
    """The encoders to probe: each run of ``runs``, and the ``random`` baseline, once per pooling
    of ``poolings`` (named ``NAME:max``, ``NAME:mean`` beside the thesis' ``final``); the ``bow``
    baseline built from the first run; a :class:`GlomoFeatures` per ``glomo pretrain`` run of
    ``glomo_runs`` and per preset (a built-in name or a directory) of ``glomo_presets``."""
    from glomo_tf.data.vocabulary import Tokenizer
    from glomo_tf.saving import load_graph_predictor

    unknown = [b for b in baselines if b not in hparams.PROBE_BASELINES]
    if unknown:
        raise ValueError(f"unknown baseline(s) {', '.join(unknown)}; choose from "
                         f"{' '.join(hparams.PROBE_BASELINES)}.")
    if baselines and not runs:
        raise ValueError("the baselines bow and random are built from a trained run's "
                         "vocabulary and sizes: give `runs` DIR too.")
    if not runs and not glomo_runs and not glomo_presets:
        raise ValueError("nothing to probe: give `runs` DIR (a glomo sentence-pretrain run) "
                         "and/or `glomo_runs` DIR (a glomo pretrain run) or `glomo_presets` NAME.")
    unknown = [p for p in poolings if p not in hparams.SENTENCE_POOLINGS]
    if unknown or not poolings:
        raise ValueError(f"unknown pooling(s) {', '.join(unknown) or '(none given)'}; choose "
                         f"from {' '.join(hparams.SENTENCE_POOLINGS)}.")
    encoders, names = [], set()

    def add(encoder):
        base, k = encoder.name, 2
        while encoder.name in names:
            encoder.name, k = f"{base}-{k}", k + 1
        names.add(encoder.name)
        encoders.append(encoder)

    first = None
    for run_dir in runs:
        model, tokenizer = load_sentence_run(run_dir)
        first = first or (model, tokenizer)
        for pooling in poolings:
            add(SentenceRunEncoder(model, tokenizer, pooled_name(_run_name(run_dir), pooling),
                                   pooling, batch_size=batch_size))
    for baseline in baselines:
        model, tokenizer = first
        if baseline == "bow":
            add(BagOfWords(model, tokenizer, batch_size=batch_size))
        else:
            fresh = random_like(model, seed)
            for pooling in poolings:
                add(SentenceRunEncoder(fresh, tokenizer, pooled_name("random", pooling), pooling,
                                       batch_size=batch_size))
    for run_dir in glomo_runs:
        model_path = os.path.join(run_dir, "graph_predictor.keras")
        if not os.path.isfile(model_path):
            raise ValueError(f"no graph_predictor.keras in {run_dir!r}: pass the `output_dir` "
                             "of a finished glomo pretrain run.")
        add(GlomoFeatures(load_graph_predictor(model_path),
                          Tokenizer.load(os.path.join(run_dir, TOKENIZER_DIR)),
                          f"glomo:{_run_name(run_dir)}", batch_size=batch_size))
    for preset in glomo_presets:
        from glomo_tf.saving import load_preset
        predictor, tokenizer = load_preset(preset)
        if tokenizer is None:
            raise ValueError(f"the preset {preset!r} has no tokenizer: it cannot read sentences.")
        add(GlomoFeatures(predictor, tokenizer, f"glomo:{_run_name(preset)}",
                          batch_size=batch_size))
    return encoders


def pooled_name(name, pooling):
    """The name an encoder ``name`` is probed under with ``pooling``."""
    return name if pooling == "final" else f"{name}:{pooling}"


def _run_name(run_dir):
    return os.path.basename(os.path.normpath(run_dir)) or "run"


# ---------------------------------------------------------------------------------- tasks
@dataclasses.dataclass
class Task:
    """A labelled probing task: ``protocol`` ``"kfold"`` (``texts``, ``labels``) or ``"split"``
    (``splits`` = ``{"train": (texts, labels), "dev": ..., "test": ...}``)."""

    name: str
    protocol: str
    texts: Optional[list] = None
    labels: Optional[np.ndarray] = None
    splits: Optional[dict] = None


def load_tasks(names=(), files=(), data_dir=None, max_examples=None, seed=0,
               text_column="text", label_column="label"):
    """The tasks named (``mr``, ``subj``, ``sst2``) and one per user file (a TSV/CSV or a folder
    with one file per class, :func:`glomo_tf.data.labeled.load_labeled_text`). ``max_examples``
    keeps a seeded random subset of each task (of each split) for quick runs."""
    from glomo_tf.data import labeled

    tasks = []
    try:
        for name in names:
            if name not in hparams.PROBE_TASKS:
                raise ValueError(f"unknown task {name!r}; choose from "
                                 f"{' '.join(hparams.PROBE_TASKS)}, or pass `files` PATH.")
            if name in SPLIT_TASKS:
                sub = data_dir and os.path.join(data_dir, "sst")
                splits = {s: _subset(*labeled.load_sst(s, SPLIT_TASKS[name], sub)[:2],
                                     max_examples, seed) for s in ("train", "dev", "test")}
                tasks.append(Task(name, "split", splits=splits))
                continue
            loader = labeled.load_mr if name == "mr" else labeled.load_subj
            texts, labels, _ = loader(data_dir and os.path.join(data_dir, name))
            tasks.append(Task(name, "kfold", *_subset(texts, labels, max_examples, seed)))
        for path in files:
            texts, labels, _ = labeled.load_labeled_text(path, text_column, label_column)
            name = os.path.splitext(os.path.basename(os.path.normpath(path)))[0]
            tasks.append(Task(name, "kfold", *_subset(texts, labels, max_examples, seed)))
    except FileNotFoundError as error:
        raise ValueError(str(error)) from None
    return tasks


def _subset(texts, labels, max_examples, seed):
    labels = np.asarray(labels)
    if max_examples is None or len(texts) <= max_examples:
        return list(texts), labels
    keep = np.sort(np.random.default_rng(seed).permutation(len(texts))[:max_examples])
    return [texts[i] for i in keep], labels[keep]


# ---------------------------------------------------------------------------------- the probe
MAX_ITER = 100  # scikit-learn's default; every probe recorded before --max-iter


def _classifier(c, seed, max_iter=MAX_ITER):
    from sklearn.linear_model import LogisticRegression
    return _QuietFit(LogisticRegression(C=c, max_iter=max_iter, random_state=seed))


class _QuietFit:
    """A classifier whose ``fit`` does not warn when lbfgs stops at ``max_iter`` iterations
    (the warning would repeat for every fold and ``C``)."""

    def __init__(self, model):
        self.model = model

    def fit(self, x, y):
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.model.fit(x, y)
        return self

    def predict(self, x):
        return self.model.predict(x)


def _fit_score(features, labels, train, test, c, seed, max_iter=MAX_ITER):
    model = _classifier(c, seed, max_iter).fit(features[train], labels[train])
    return float(np.mean(model.predict(features[test]) == labels[test]))


def choose_c(features, labels, c_values, inner_folds, seed, max_iter=MAX_ITER):
    """The ``C`` of the best mean validation accuracy over ``inner_folds`` folds (ties: the
    smallest ``C``, the strongest L2)."""
    from glomo_tf.data.labeled import kfold_splits
    folds = kfold_splits(len(labels), inner_folds, seed)
    scores = [np.mean([_fit_score(features, labels, tr, va, c, seed, max_iter)
                       for tr, va in folds]) for c in c_values]
    return float(c_values[int(np.argmax(scores))]), [float(s) for s in scores]


def probe_kfold(features, labels, folds=10, inner_folds=10, c_values=hparams.PROBE_C_VALUES,
                seed=0, max_iter=MAX_ITER):
    """SentEval's cross-validation: ``{"accuracy", "std", "fold_accuracies", "c"}`` (the ``C``
    chosen in each outer fold)."""
    from glomo_tf.data.labeled import kfold_splits
    features, labels = np.asarray(features), np.asarray(labels)
    accuracies, chosen = [], []
    for train, test in kfold_splits(len(labels), folds, seed):
        c, _ = choose_c(features[train], labels[train], c_values, inner_folds, seed, max_iter)
        accuracies.append(_fit_score(features, labels, train, test, c, seed, max_iter))
        chosen.append(c)
    return {"accuracy": float(np.mean(accuracies)), "std": float(np.std(accuracies)),
            "fold_accuracies": accuracies, "c": chosen}


def probe_split(train, dev, test, c_values=hparams.PROBE_C_VALUES, seed=0, max_iter=MAX_ITER):
    """SentEval's protocol for a task with a dev split: ``C`` chosen on dev, test accuracy of
    the classifier trained on train. Each argument is ``(features, labels)``."""
    (xtr, ytr), (xdev, ydev), (xte, yte) = [(np.asarray(x), np.asarray(y))
                                             for x, y in (train, dev, test)]
    dev_scores = [float(np.mean(_classifier(c, seed, max_iter).fit(xtr, ytr).predict(xdev)
                                == ydev)) for c in c_values]
    best = int(np.argmax(dev_scores))
    model = _classifier(c_values[best], seed, max_iter).fit(xtr, ytr)
    return {"accuracy": float(np.mean(model.predict(xte) == yte)),
            "dev_accuracy": dev_scores[best], "c": float(c_values[best])}


def probe_task(encoder, task, folds=10, inner_folds=10, c_values=hparams.PROBE_C_VALUES,
               seed=0, max_iter=MAX_ITER):
    """One encoder on one task (see the module's protocols)."""
    if task.protocol == "kfold":
        return probe_kfold(encoder.encode(task.texts), task.labels, folds, inner_folds, c_values,
                           seed, max_iter)
    encoded = {s: (encoder.encode(t), y) for s, (t, y) in task.splits.items()}
    return probe_split(encoded["train"], encoded["dev"], encoded["test"], c_values, seed,
                       max_iter)


def nearest_sentences(encoder, queries, pool, k=3):
    """For each query, the ``k`` sentences of ``pool`` of the highest cosine similarity:
    ``[(query, [(sentence, similarity), ...]), ...]`` (the thesis' Table 3.3). A pool sentence
    identical to the query is skipped."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}.")
    pool = list(dict.fromkeys(pool))
    if not pool:
        raise ValueError("the pool of sentences is empty.")
    vectors = _unit(encoder.encode(pool))
    query_vectors = _unit(encoder.encode(queries))
    out = []
    for query, v in zip(queries, query_vectors):
        similarity = vectors @ v
        ranked = [i for i in np.argsort(-similarity, kind="stable") if pool[i] != query][:k]
        out.append((query, [(pool[i], float(similarity[i])) for i in ranked]))
    return out


def _unit(x):
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


# ---------------------------------------------------------------------------------- the command
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
