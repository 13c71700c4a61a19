"""A KerasTuner search over GLoMo pretraining settings, resumable (what ``glomo tune`` runs).

``run_search(SearchConfig(planted=True, max_trials=6, ...))``: every trial pretrains a
:class:`~glomo_tf.GlomoPretrainer` (:class:`~glomo_tf.tuning.GlomoHyperModel`) and is scored by
``val_first_unit_loss``. A search lives in ``DIRECTORY/PROJECT``: KerasTuner's state (re-running
resumes), ``tune_config.json`` (the settings, checked when resuming), ``tokenizer/``, ``logs/``
(TensorBoard) and ``results.md``/``results.json`` (the trials, best first).
"""

import dataclasses
import json
import os
import sys
from typing import Optional

from glomo_tf import hparams
from glomo_tf.experiments.runs import refuse_changed_settings
from glomo_tf.experiments.settings import setting, verbose_setting

# Settings that may change when resuming a search (everything else must match).
RESUMABLE = ("max_trials", "overwrite", "verbose")
# The model of `glomo demo` (small, learns the planted edges fast): the fixed settings of
# planted trials. Text trials use GlomoHyperModel's defaults (those of `glomo pretrain`).
PLANTED_FIXED = dict(conv_layers=1, kernel_size=3, normalization="squared_relu",
                     composition="gru", decoder_layers=1, num_positions=None)
PLANTED_WINDOW = 48
TEXT_WINDOW = 200


_DATA = "data (one of `train`, `planted`)"


@dataclasses.dataclass(kw_only=True)
class SearchConfig:
    """The settings of a search (``glomo tune``'s flags, one field each): the data (``train``
    files or the ``planted`` corpus), the search space, the tuner and where the search lives."""

    # data
    train: Optional[list] = setting(None, "training text files or globs (plain or .gz), one "
                                    "paragraph per line", group=_DATA, metavar="FILE")
    planted: bool = setting(False, "the built-in generated corpus of glomo demo (no data "
                            "needed)", group=_DATA)
    validation_fraction: float = setting(0.1, "`train`: fraction of the lines held out; "
                                         "`planted`: held-out windows (a different seed) as "
                                         "this fraction of the training windows", group=_DATA)
    window: Optional[int] = setting(None, f"units per window T (default {TEXT_WINDOW}; "
                                    f"{PLANTED_WINDOW} with `planted`)", group=_DATA)
    shift: Optional[int] = setting(None, "`train`: units between window starts (default "
                                   "window / 2)", group=_DATA)
    vocab_size: int = setting(100_000, "`train`: most vocabulary ids, <pad>/<unk> included",
                              group=_DATA)
    batch_size: int = setting(32, "windows per step", group=_DATA)
    # search space
    context_lengths: list = setting(help="context lengths D to try", group="search space",
                                    parse=int, metavar="D",
                                    default_factory=lambda: [1, 2, 3, 4, 5])
    heads: list = setting(help="head counts to try (each must divide `hidden_dim`)",
                          group="search space", parse=int, metavar="K",
                          default_factory=lambda: [1, 2, 4, 8])
    layers: list = setting(help="graph layer counts to try", group="search space", parse=int,
                           metavar="L", default_factory=lambda: [1, 2, 3])
    thresholds: list = setting(help="graph thresholds to try: query, scalar",
                               group="search space", metavar="KIND",
                               default_factory=lambda: list(hparams.THRESHOLDS))
    learning_rates: list = setting(help="Adam learning rates to try", group="search space",
                                   parse=float, metavar="LR",
                                   default_factory=lambda: [1e-3, 3e-3])
    hidden_dim: int = setting(hparams.GRAPH_PREDICTOR["hidden_dim"], "fixed width d",
                              group="search space")
    # search
    tuner: str = setting("random", "random (RandomSearch), hyperband (Hyperband, at most "
                         "`epochs` per model) or bayesian (BayesianOptimization)",
                         group="search")
    max_trials: int = setting(10, "trials in all, finished ones included when resuming",
                              group="search")
    epochs: int = setting(3, "epochs per trial", group="search")
    steps_per_epoch: Optional[int] = setting(None, "default: one pass over the training "
                                             "windows", group="search")
    directory: str = setting("tuning", "where searches are kept", group="search")
    project: str = setting("glomo", "the search's name in `directory`", group="search")
    overwrite: bool = setting(False, "delete DIRECTORY/PROJECT and start afresh (default: "
                              "resume)", group="search")
    seed: int = setting(0, "seeds the data split, the oracle and every trial's initial weights",
                        group="search")
    verbose: int = verbose_setting(2, "search")

    def validated(self):
        """A copy with the choices sorted and deduplicated and the window and shift filled in;
        raises ``ValueError`` naming the setting to change."""
        s = dataclasses.replace(self)
        if bool(s.train) == bool(s.planted):
            raise ValueError("give the data with `train` FILE... (text files or globs) or "
                             "`planted` (the built-in generated corpus), one of them.")
        if s.tuner not in hparams.TUNERS:
            raise ValueError(f"`tuner` must be one of {', '.join(hparams.TUNERS)}; got "
                             f"{s.tuner!r}.")
        for name in ("max_trials", "epochs", "batch_size", "hidden_dim"):
            if getattr(s, name) < 1:
                raise ValueError(f"`{name}` must be >= 1, got "
                                 f"{getattr(s, name)}.")
        if s.steps_per_epoch is not None and s.steps_per_epoch < 1:
            raise ValueError(f"`steps_per_epoch` must be >= 1, got {s.steps_per_epoch}.")
        if not 0.0 < s.validation_fraction < 1.0:
            raise ValueError("`validation_fraction` must be in (0, 1): the objective is measured "
                             f"on held-out windows; got {s.validation_fraction}.")
        for name in ("context_lengths", "heads", "layers"):
            values = getattr(s, name)
            if min(values) < 1:
                raise ValueError(f"`{name}` must all be >= 1, got {values}.")
            setattr(s, name, sorted(set(values)))
        bad = [t for t in s.thresholds if t not in hparams.THRESHOLDS]
        if bad:
            raise ValueError(f"`thresholds` must be query and/or scalar, got {bad}.")
        s.thresholds = sorted(set(s.thresholds))
        if min(s.learning_rates) <= 0:
            raise ValueError(f"`learning_rates` must be > 0, got {s.learning_rates}.")
        s.learning_rates = sorted(set(s.learning_rates))
        for heads in s.heads:
            hparams.check_heads_divide(s.hidden_dim, heads, ("`hidden_dim`", "`heads`"))
        if s.window is None:
            s.window = PLANTED_WINDOW if s.planted else TEXT_WINDOW
        if s.window <= max(s.context_lengths):
            raise ValueError(f"`window` ({s.window}) must be longer than the largest context "
                             f"length ({max(s.context_lengths)}).")
        if s.planted:
            if s.shift is not None:
                raise ValueError("`shift` applies to `train`; the planted corpus comes in "
                                 "windows.")
        else:
            s.shift = s.shift or max(1, s.window // 2)
            if not 1 <= s.shift <= s.window:
                raise ValueError(f"`shift` must be in [1, `window`], got {s.shift}.")
            if s.vocab_size < 3:
                raise ValueError(f"`vocab_size` must be >= 3, got {s.vocab_size}.")
        return s


def check_resumable(saved, current):
    """Raises ``ValueError`` when a search is resumed with other settings."""
    refuse_changed_settings(saved, current, RESUMABLE, "the project holds a search",
                            "Resume with the same settings (only `max_trials` may change), pass "
                            "`overwrite` to start afresh, or use another `project`.")


# ---------------------------------------------------------------------- data
def planted_data(s):
    """``(train, validation, vocabulary_size, steps_per_epoch)`` from the built-in corpus."""
    import tensorflow as tf

    from glomo_tf.data import planted
    from glomo_tf.experiments.demo import CORPUS
    corpus_args = {**CORPUS, "seq_len": s.window}
    try:
        train = planted.builtin_corpus("train", **corpus_args)
        held_out = max(1, round(s.validation_fraction * len(train.token_ids)))
        validation = planted.builtin_corpus("test", held_out, **corpus_args)
    except ValueError as error:
        raise ValueError(f"`window` {s.window} does not suit the planted corpus: {error}") \
            from None
    if len(train.token_ids) < s.batch_size:
        raise ValueError(f"`batch_size` {s.batch_size} exceeds the {len(train.token_ids)} "
                         "planted training windows.")
    steps = len(train.token_ids) // s.batch_size
    train_ds = (tf.data.Dataset.from_tensor_slices(train.token_ids)
                .shuffle(len(train.token_ids), seed=s.seed)
                .batch(s.batch_size, drop_remainder=True).repeat()
                .prefetch(tf.data.AUTOTUNE))
    val_ds = tf.data.Dataset.from_tensor_slices(validation.token_ids).batch(s.batch_size)
    return train_ds, val_ds, train.vocabulary.size, steps


def text_tokenizer(s, lines, project_dir):
    """The search's tokenizer: the saved one when resuming, else built from the training text."""
    from glomo_tf.data.vocabulary import Tokenizer
    saved = os.path.join(project_dir, "tokenizer")
    if not s.overwrite and os.path.isfile(os.path.join(saved, "vocab.txt")):
        return Tokenizer.load(saved), True
    print(f"Building the vocabulary (at most {s.vocab_size} units) ...", flush=True)
    return Tokenizer.build(lines, max_size=s.vocab_size), False


def text_data(s, tokenizer, lines):
    """``(train, validation, vocabulary_size, steps_per_epoch)`` from --train files."""
    from glomo_tf.data.corpus import pretraining_datasets
    try:
        train, validation = pretraining_datasets(
            lines, tokenizer, window=s.window, shift=s.shift, batch_size=s.batch_size,
            validation_fraction=s.validation_fraction, seed=s.seed)
    except TypeError as error:
        raise ValueError(str(error)) from None
    steps = int(train.cardinality().numpy())
    return train.repeat(), validation, tokenizer.vocabulary_size, steps


# ---------------------------------------------------------------------- the search
def run_search(config):
    """Runs (or resumes) the search a :class:`SearchConfig` describes in
    ``DIRECTORY/PROJECT``; returns 0 when a trial finished, 1 when none did or KerasTuner gave up
    (the trials are written either way). Raises ``ValueError`` for settings or data to change."""
    s = config.validated()
    import keras

    from glomo_tf.tuning.hypermodel import GlomoHyperModel, make_tuner, results_table, trial_rows

    project_dir = os.path.join(s.directory, s.project)
    config_path = os.path.join(project_dir, "tune_config.json")
    resuming = not s.overwrite and os.path.isfile(os.path.join(project_dir, "oracle.json"))
    if resuming and os.path.isfile(config_path):
        with open(config_path) as f:
            check_resumable(json.load(f), dataclasses.asdict(s))

    keras.utils.set_random_seed(s.seed)
    tokenizer, tokenizer_loaded = None, False
    if s.planted:
        train, validation, vocabulary_size, steps = planted_data(s)
        fixed = PLANTED_FIXED
    else:
        from glomo_tf.data.corpus import text_lines
        try:
            lines = text_lines(s.train)
        except FileNotFoundError as error:
            raise ValueError(str(error)) from None
        tokenizer, tokenizer_loaded = text_tokenizer(s, lines, project_dir)
        train, validation, vocabulary_size, steps = text_data(s, tokenizer, lines)
        fixed = None
    steps = s.steps_per_epoch or steps

    hypermodel = GlomoHyperModel(
        vocabulary_size, context_lengths=s.context_lengths, num_heads=s.heads,
        num_layers=s.layers, thresholds=s.thresholds, hidden_dim=s.hidden_dim,
        learning_rates=s.learning_rates, fixed=fixed, seed=s.seed,
        evaluation_batch_size=s.batch_size)
    from glomo_tf import _keras_private

    _keras_private.keras_tuner_outside_notebooks()  # plain lines in logs and pipes
    tuner = make_tuner(s.tuner, hypermodel, s.directory, s.project,
                       max_trials=s.max_trials, seed=s.seed, overwrite=s.overwrite,
                       max_epochs=s.epochs)
    finished = sum(t.status == "COMPLETED" for t in tuner.oracle.trials.values())
    if resuming:
        print(f"Resuming the search in {project_dir}: {finished} finished trial(s) of "
              f"{s.max_trials}.", flush=True)
    os.makedirs(project_dir, exist_ok=True)
    with open(config_path, "w") as f:
        json.dump(dataclasses.asdict(s), f, indent=1)
    if tokenizer is not None and not tokenizer_loaded:
        tokenizer.save(os.path.join(project_dir, "tokenizer"))

    log_dir = os.path.join(project_dir, "logs")
    print(f"TensorBoard logs (curves, and per-trial hyper-parameters in the HPARAMS tab): "
          f"tensorboard --logdir {log_dir}", flush=True)
    try:
        tuner.search(train, validation_data=validation, epochs=s.epochs,
                     steps_per_epoch=steps, callbacks=[keras.callbacks.TensorBoard(log_dir)],
                     shuffle=False,
                     verbose=s.verbose)
    except RuntimeError as error:  # KerasTuner gives up after consecutive failed trials
        print(f"glomo tune: the search stopped: {str(error).splitlines()[0]}", file=sys.stderr)
        write_results(tuner, project_dir, results_table, trial_rows)
        return 1

    table = write_results(tuner, project_dir, results_table, trial_rows)
    if not any(t.status == "COMPLETED" for t in tuner.oracle.trials.values()):
        print(f"glomo tune: no trial finished; see the errors above and {project_dir}/results.md",
              file=sys.stderr)
        return 1
    print(f"\nTrials of {project_dir}, best first (objective: val_first_unit_loss, the first "
          "unit's cross-entropy on the validation windows):\n")
    print(table)
    print(f"Wrote {os.path.join(project_dir, 'results.md')} and results.json; TensorBoard: "
          f"tensorboard --logdir {log_dir}")
    return 0


def write_results(tuner, project_dir, results_table, trial_rows):
    """Writes ``results.md`` (every trial) and ``results.json``; returns the Markdown table."""
    table = results_table(tuner, top=None)
    with open(os.path.join(project_dir, "results.md"), "w", encoding="utf-8") as f:
        f.write(f"# {os.path.basename(project_dir)}: trials, best first\n\n{table}")
    rows = trial_rows(tuner)
    with open(os.path.join(project_dir, "results.json"), "w", encoding="utf-8") as f:
        json.dump({"objective": tuner.oracle.objective.name, "direction": "min",
                   "best": rows[0] if rows and rows[0]["objective"] is not None else None,
                   "trials": rows}, f, indent=1)
    return table
