"""SentEval's probing protocol: the tasks, logistic regression on frozen vectors, neighbours.

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

:func:`nearest_sentences` gives the thesis' Table 3.3 (the nearest sentences of a query in a
pool).
"""

import dataclasses
import os
from typing import Optional

import numpy as np

from glomo_tf import hparams

# Tasks with an official split: name -> loader arguments of glomo_tf.data.labeled.load_sst.
SPLIT_TASKS = {"sst2": False}


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
