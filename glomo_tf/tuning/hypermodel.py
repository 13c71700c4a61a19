"""KerasTuner search over GLoMo pretraining: context length ``D``, heads, layers, threshold, rate.

The pretraining loss cannot rank models with different context lengths ``D``: a model that decodes
more units per position averages over harder, farther targets (``x_{t+3}`` is harder to predict
than ``x_{t+1}``), so a larger ``D`` looks worse even when its graphs are better. Every trial is
therefore scored on the same task, whatever its ``D``: :func:`first_unit_loss`, the mean
cross-entropy of the *first* predicted unit only (``x_{t+1}`` forward, ``x_{t-1}`` backward) at
every valid position of the validation windows. :meth:`GlomoHyperModel.fit` reports it as
``val_first_unit_loss``, the objective :data:`OBJECTIVE`.

Example::

    import keras_tuner
    from glomo_tf.tuning import GlomoHyperModel, make_tuner, results_table

    hypermodel = GlomoHyperModel(vocabulary_size=10_000, context_lengths=(1, 3, 5))
    tuner = make_tuner("random", hypermodel, "tuning", "wiki", max_trials=20, seed=0)
    tuner.search(train_windows, validation_data=validation_windows, epochs=5)
    print(results_table(tuner))

Running the same code again on the same ``directory``/``project_name`` continues the search: the
finished trials are reloaded, not re-run (``overwrite=True`` starts afresh).
"""

import math
import os

import keras
import keras_tuner
import numpy as np
import tensorflow as tf

from glomo_tf import hparams
from glomo_tf._keras_private import omit_retracing_warning
from glomo_tf.models.pretrainer import GlomoPretrainer, _ids_from_data

OBJECTIVE_NAME = "val_first_unit_loss"
OBJECTIVE = keras_tuner.Objective(OBJECTIVE_NAME, "min")
TUNERS = hparams.TUNERS
# Names of the tuned hyper-parameters, and their column in results_table.
HYPERPARAMETERS = (("context_length", "D"), ("num_heads", "heads"), ("num_layers", "layers"),
                   ("threshold", "threshold"), ("learning_rate", "lr"))
# Fixed GlomoPretrainer settings of every trial unless ``fixed`` overrides them.
DEFAULT_FIXED = {k: hparams.PRETRAIN_COMMAND[k] for k in (
    "conv_layers", "kernel_size", "normalization", "composition", "decoder_layers",
    "num_positions", "dropout")}
# Most logits held at once by first_unit_loss (the decoder computes all D units' logits).
LOGITS_BUDGET = 2 ** 25


class GlomoHyperModel(keras_tuner.HyperModel):
    """A compiled :class:`~glomo_tf.GlomoPretrainer` per trial, scored comparably across ``D``.

    Tuned (each an ``hp.Choice``): ``context_length`` (``D``), ``num_heads``, ``num_layers``,
    ``threshold`` and ``learning_rate``. The width ``hidden_dim`` is fixed and must be divisible by
    every head count (the feature predictor splits the features into heads). The optimizer is
    Adam with a global gradient-norm clip.

    :meth:`fit` trains with ``model.fit`` and then computes ``val_first_unit_loss`` on
    ``validation_data`` (:func:`first_unit_loss`), which it returns with the last epoch's history
    metrics; use :data:`OBJECTIVE` (``keras_tuner.Objective("val_first_unit_loss", "min")``) as
    the tuner's objective, e.g. through :func:`make_tuner`.

    Args:
        vocabulary_size: int, token ids in ``[0, vocabulary_size)``; 0 is padding.
        context_lengths: ints, the values of ``D`` to try.
        num_heads: ints, head counts to try.
        num_layers: ints, graph layer counts to try.
        thresholds: ``"query"`` and/or ``"scalar"``, the graph thresholds to try.
        hidden_dim: int, the fixed width ``d``.
        learning_rates: floats, Adam learning rates to try.
        fixed: dict of further ``GlomoPretrainer`` arguments shared by every trial; merged over
            :data:`DEFAULT_FIXED` (``conv_layers=4``, ``decoder_layers=2``, ``num_positions=20``, ...).
        clipnorm: float, Adam's ``global_clipnorm``.
        seed: int or None. Every trial's weights start from this seed (``build`` calls
            ``keras.utils.set_random_seed``), so trials differ by their hyper-parameters only.
        evaluation_batch_size: int, windows per batch when ``first_unit_loss`` gets arrays.
        jit_compile: passed to ``compile``.
    """

    def __init__(self, vocabulary_size, context_lengths=(1, 2, 3, 4, 5), num_heads=(1, 2, 4, 8),
                 num_layers=(1, 2, 3), thresholds=("query", "scalar"), hidden_dim=256,
                 learning_rates=(1e-3, 3e-3), fixed=None, clipnorm=1.0, seed=0,
                 evaluation_batch_size=32, jit_compile="auto", name=None, tunable=True):
        super().__init__(name=name, tunable=tunable)
        self.vocabulary_size = int(vocabulary_size)
        self.context_lengths = _choices("context_lengths", context_lengths, int, minimum=1)
        self.num_heads = _choices("num_heads", num_heads, int, minimum=1)
        self.num_layers = _choices("num_layers", num_layers, int, minimum=1)
        self.thresholds = _choices("thresholds", thresholds, str)
        self.learning_rates = _choices("learning_rates", learning_rates, float, minimum=0.0)
        unknown = [t for t in self.thresholds if t not in ("query", "scalar")]
        if unknown:
            raise ValueError(f"thresholds must be 'query' or 'scalar', got {unknown}.")
        self.hidden_dim = int(hidden_dim)
        for heads in self.num_heads:  # every head count
            hparams.check_heads_divide(self.hidden_dim, heads)
        tuned = {"context_length", "num_heads", "num_layers", "threshold", "hidden_dim",
                 "vocabulary_size", "seed"}
        clash = sorted(tuned & set(fixed or {}))
        if clash:
            raise ValueError(f"fixed must not set the tuned or given settings {clash}.")
        self.fixed = {**DEFAULT_FIXED, **(fixed or {})}
        if self.fixed.get("objective", "unit") != "unit":
            raise ValueError("The hypermodel tunes the unit-level objective; fixed must not set "
                             "objective='sentence' (first_unit_loss scores unit-level decoders).")
        self.clipnorm = clipnorm
        self.seed = seed
        self.evaluation_batch_size = int(evaluation_batch_size)
        self.jit_compile = jit_compile

    def build(self, hp):
        context_length = hp.Choice("context_length", self.context_lengths)
        heads = hp.Choice("num_heads", self.num_heads)
        layers = hp.Choice("num_layers", self.num_layers)
        threshold = hp.Choice("threshold", self.thresholds)
        learning_rate = hp.Choice("learning_rate", self.learning_rates)
        if self.seed is not None:
            keras.utils.set_random_seed(self.seed)
        model = GlomoPretrainer.from_sizes(
            self.vocabulary_size, hidden_dim=self.hidden_dim, num_layers=layers, num_heads=heads,
            threshold=threshold, context_length=context_length, seed=self.seed, **self.fixed)
        model.compile(optimizer=keras.optimizers.Adam(learning_rate,
                                                      global_clipnorm=self.clipnorm),
                      jit_compile=self.jit_compile)
        model.build()
        return model

    def fit(self, hp, model, x, validation_data=None, **kwargs):
        """``model.fit(x, validation_data=..., **kwargs)``, then ``val_first_unit_loss``.

        Returns a dict of floats: ``val_first_unit_loss`` and the last epoch's value of every
        history metric (``loss``, ``perplexity``, ``val_loss``, ``val_perplexity``). When a
        ``keras.callbacks.TensorBoard`` is among the callbacks, ``val_first_unit_loss`` is also
        written to its (per-trial) log directory, beside the hyper-parameters KerasTuner logs.
        """
        if validation_data is None:
            raise ValueError("GlomoHyperModel.fit needs validation_data: the objective "
                             f"{OBJECTIVE_NAME} is measured on held-out windows.")
        history = model.fit(x, validation_data=validation_data, **kwargs)
        results = {name: float(values[-1]) for name, values in history.history.items()
                   if values}
        batch_size = kwargs.get("batch_size") or self.evaluation_batch_size
        results[OBJECTIVE_NAME] = first_unit_loss(model, validation_data, batch_size)
        last_epoch = history.epoch[-1] if history.epoch else int(kwargs.get("initial_epoch", 0))
        _log_objective(kwargs.get("callbacks") or [], results[OBJECTIVE_NAME], step=last_epoch)
        return results


def _choices(name, values, kind, minimum=None):
    if isinstance(values, (str, int, float)):
        values = [values]
    values = [kind(v) for v in values]
    if not values:
        raise ValueError(f"{name} needs at least one value.")
    if len(set(values)) != len(values):
        raise ValueError(f"{name} has repeated values: {values}.")
    if minimum is not None and any(v < minimum or (kind is float and v <= minimum)
                                   for v in values):
        raise ValueError(f"{name} must be {'>' if kind is float else '>='} {minimum}, got "
                         f"{values}.")
    return values


def _log_objective(callbacks, value, step):
    for callback in callbacks:
        if isinstance(callback, keras.callbacks.TensorBoard):
            log_dir = os.path.join(str(callback.log_dir), "validation")
            writer = tf.summary.create_file_writer(log_dir)
            with writer.as_default():
                tf.summary.scalar("epoch_first_unit_loss", value, step=step)
            writer.close()


# ------------------------------------------------------------------------------ the objective
def first_unit_loss(model, dataset_or_array, batch_size=32):
    """Mean cross-entropy of the first predicted unit, at every valid position (a float).

    For each window, the graph and feature predictors give the top features ``F^L_t`` of both
    directions; each decoder then starts from *every* position ``t`` and only its first prediction
    counts: ``x_{t+1}`` forward, ``x_{t-1}`` backward (``logits[:, :, 0]``), whatever the model's
    context length ``D``. A position is valid when both ``t`` and its target are real units (not
    padding, inside the window). Each direction's cross-entropy is averaged over all its valid
    positions in the data, and the result is the mean of the two directions (the convention of
    ``GlomoPretrainer.context_loss``; with ``D = 1``, ``num_positions=None`` and windows without
    padding the two coincide on a batch).

    Args:
        model: a unit-level :class:`~glomo_tf.GlomoPretrainer`.
        dataset_or_array: int token ids ``[N, T]`` (array or tensor), or a ``tf.data.Dataset`` of
            batches ``[B, T]`` (or ``(ids, ...)`` tuples, or dicts with ``"token_ids"``).
        batch_size: int, windows per batch for arrays (datasets keep their own batches).
    """
    if getattr(model, "objective", "unit") != "unit":
        raise ValueError("first_unit_loss scores unit-level decoders; this model was built with "
                         f"objective={model.objective!r}.")
    if isinstance(dataset_or_array, tf.data.Dataset):
        batches = dataset_or_array
    else:
        array = np.asarray(_ids_from_data(dataset_or_array))
        if array.ndim != 2 or not np.issubdtype(array.dtype, np.integer):
            raise ValueError(f"Expected int token ids [N, T], got {array.dtype} {array.shape}.")
        batches = [array[i:i + batch_size] for i in range(0, len(array), batch_size)]
    # One trace each, whatever the batch and window sizes (fixed signatures never retrace).
    ids_spec = tf.TensorSpec([None, None], tf.int32)
    features = tf.function(lambda ids: _top_features(model, ids), input_signature=[ids_spec])
    decoder_sums = [
        tf.function(lambda top, ids, mask, positions, z=z: _first_unit_sums(
            model, z, top, ids, mask, positions),
            input_signature=[tf.TensorSpec([None, None, None], model.compute_dtype), ids_spec,
                             tf.TensorSpec([None, None], tf.bool),
                             tf.TensorSpec([None], tf.int32)])
        for z in range(len(model.decoders))]
    for function in [features, *decoder_sums]:
        # Every trial brings a new model, hence one new trace each: expected, not a retracing bug.
        omit_retracing_warning(function)
    totals = np.zeros((len(model.decoders), 2), np.float64)  # [direction, (ce sum, count)]
    vocabulary_size = model.graph_predictor.embeddings.shape[0]
    for batch in batches:
        ids = tf.cast(_ids_from_data(batch), tf.int32)
        top, mask = features(ids)
        batch_len, length = ids.shape[0], ids.shape[1]
        context_length = model.decoders[0].context_length
        chunk = max(1, LOGITS_BUDGET // max(1, batch_len * context_length * vocabulary_size))
        for start in range(0, length, chunk):
            positions = tf.range(start, min(start + chunk, length), dtype=tf.int32)
            for z in range(len(model.decoders)):
                ce, count = decoder_sums[z](top[:, z], ids, mask, positions)
                totals[z] += (float(ce), float(count))
    if not totals[:, 1].all():
        raise ValueError("first_unit_loss found no valid position in a direction: the data needs "
                         "windows with at least two real units.")
    return float(np.mean(totals[:, 0] / totals[:, 1]))


def _top_features(model, ids):
    out = model(ids, training=False)
    return out["features"][:, :, -1], out["padding_mask"]  # [B, 2, T, d], [B, T]


def _first_unit_sums(model, direction, top, ids, mask, positions):
    """Sum of the first unit's cross-entropy and the number of valid positions, one direction."""
    decoder = model.decoders[direction]
    states = tf.gather(top, positions, axis=1)  # [B, S, d]
    dec = decoder(states, positions, ids, model.graph_predictor.embeddings, training=False)
    logits = tf.cast(dec["logits"][:, :, 0], tf.float32)  # [B, S, V]: x_{t+1} / x_{t-1} only
    targets = dec["targets"][:, :, 0]
    weights = dec["weights"][:, :, 0] * tf.cast(tf.gather(mask, positions, axis=1), tf.float32)
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)
    return tf.reduce_sum(ce * weights), tf.reduce_sum(weights)


# ------------------------------------------------------------------------------ tuners
def make_tuner(kind, hypermodel, directory, project_name, max_trials, seed=0, overwrite=False,
               max_epochs=None, executions_per_trial=1, **kwargs):
    """A KerasTuner tuner minimising ``val_first_unit_loss``, resumable from its directory.

    Args:
        kind: ``"random"`` (RandomSearch), ``"hyperband"`` (Hyperband) or ``"bayesian"``
            (BayesianOptimization).
        hypermodel: a :class:`GlomoHyperModel`.
        directory, project_name: the search lives in ``directory/project_name``.
        max_trials: int >= 1, trials in all (finished ones included when resuming). Hyperband
            chooses its own number of trials from ``max_epochs``; ``max_trials`` caps it.
        seed: int, the oracle's seed.
        overwrite: False (default) reloads the finished trials of an existing project and runs
            only the missing ones (an interrupted trial is run again); True deletes the project.
        max_epochs: int, Hyperband's most epochs per model (required for ``"hyperband"``).
        executions_per_trial: int, models trained per trial (their objectives averaged).
        **kwargs: passed to the tuner.
    """
    hparams.check_choice("kind", kind, TUNERS)
    if not isinstance(max_trials, int) or max_trials < 1:
        raise ValueError(f"max_trials must be a positive int, got {max_trials!r}.")
    common = dict(objective=OBJECTIVE, seed=seed, directory=directory, project_name=project_name,
                  overwrite=overwrite, executions_per_trial=executions_per_trial, **kwargs)
    if kind == "random":
        return keras_tuner.RandomSearch(hypermodel, max_trials=max_trials, **common)
    if kind == "bayesian":
        return keras_tuner.BayesianOptimization(hypermodel, max_trials=max_trials, **common)
    if not max_epochs or max_epochs < 1:
        raise ValueError(f"Hyperband needs max_epochs >= 1, got {max_epochs!r}.")
    tuner = keras_tuner.Hyperband(hypermodel, max_epochs=max_epochs, **common)
    tuner.oracle.max_trials = max_trials  # the base oracle stops creating trials beyond it
    return tuner


def trial_rows(tuner, top=None):
    """The trials, best first, as dicts: id, status, hyper-parameters, objective and metrics."""
    oracle = tuner.oracle
    trials = list(oracle.trials.values())
    done = sorted((t for t in trials if t.status == "COMPLETED" and t.score is not None),
                  key=lambda t: t.score, reverse=oracle.objective.direction == "max")
    rest = sorted((t for t in trials if t not in done), key=lambda t: t.trial_id)
    rows = []
    for trial in (done + rest)[:top]:
        metrics = {}
        for name in trial.metrics.metrics:
            value = trial.metrics.get_last_value(name)
            if value is not None:
                metrics[name] = float(value)
        rows.append({"trial_id": trial.trial_id, "status": trial.status,
                     "hyperparameters": dict(trial.hyperparameters.values),
                     "objective": None if trial.score is None or trial.status != "COMPLETED"
                     else float(trial.score),
                     "metrics": metrics})
    return rows


def results_table(tuner, top=10):
    """Markdown table of the ``top`` best trials: trial id, D, heads, layers, threshold, lr and
    the objective (failed or unfinished trials last, with their status instead)."""
    header = (["rank", "trial"] + [column for _, column in HYPERPARAMETERS]
              + [tuner.oracle.objective.name])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for rank, row in enumerate(trial_rows(tuner, top), 1):
        values = row["hyperparameters"]
        cells = [str(rank), row["trial_id"]]
        for name, _ in HYPERPARAMETERS:
            value = values.get(name, "")
            cells.append(f"{value:g}" if isinstance(value, float) else str(value))
        objective = row["objective"]
        cells.append(row["status"].lower() if objective is None or math.isnan(objective)
                     else f"{objective:.4f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
