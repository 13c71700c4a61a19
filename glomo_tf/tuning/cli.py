"""``glomo tune``: search context length, heads, layers, threshold and learning rate with KerasTuner.

Every trial pretrains a :class:`~glomo_tf.GlomoPretrainer` and is scored by
``val_first_unit_loss``, the cross-entropy of the first predicted unit only (``x_{t+1}`` forward,
``x_{t-1}`` backward) at every position of the validation windows: unlike the pretraining loss,
it does not grow with the context length ``D``, so trials with different ``D`` compare fairly.

A search lives in ``DIRECTORY/PROJECT``::

    DIRECTORY/PROJECT/oracle.json, trial_*/   KerasTuner's state: re-running the same command
                                              resumes (finished trials are kept, not re-run)
    DIRECTORY/PROJECT/tune_config.json        the settings (checked again when resuming)
    DIRECTORY/PROJECT/tokenizer/              the vocabulary of --train (reused when resuming)
    DIRECTORY/PROJECT/logs/                   TensorBoard: curves and, in the HPARAMS tab, every
                                              trial's hyper-parameters against its metrics
    DIRECTORY/PROJECT/results.md, .json       the trials, best first

Examples::

    glomo tune --planted --max-trials 6 --epochs 2 --steps-per-epoch 50 --hidden-dim 32
    glomo tune --train "corpus/*.txt.gz" --validation-fraction 0.01 --vocab-size 50000 \\
        --window 200 --batch-size 32 --tuner bayesian --max-trials 30 --epochs 3 \\
        --steps-per-epoch 2000 --context-lengths 1 2 3 4 5 --heads 2 4 8 --layers 1 2 3 \\
        --hidden-dim 256 --directory tuning --project wiki
"""

import argparse
import json
import os
import sys

from glomo_tf.cli import UsageError, refuse_changed_settings

TUNER_NAMES = ("random", "hyperband", "bayesian")
# Settings that may change when resuming a search (everything else must match).
RESUMABLE = ("max_trials", "overwrite")
# The model of `glomo demo` (small, learns the planted edges fast): the fixed settings of
# --planted trials. --train trials use GlomoHyperModel's defaults (those of `glomo pretrain`).
PLANTED_FIXED = dict(conv_layers=1, kernel_size=3, normalization="squared_relu",
                     composition="gru", decoder_layers=1, num_positions=None)
PLANTED_WINDOW = 48
TEXT_WINDOW = 200


def register(subparsers):
    p = subparsers.add_parser(
        "tune", help="search GLoMo pretraining settings (D, heads, layers, ...) with KerasTuner",
        description=__doc__.split("\n\n")[0] + " Run it again with the same --directory and "
                                               "--project to resume.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    data = p.add_argument_group("data (one of --train, --planted)")
    data.add_argument("--train", nargs="+", metavar="FILE",
                      help="training text files or globs (plain or .gz), one paragraph per line")
    data.add_argument("--planted", action="store_true",
                      help="the built-in generated corpus of `glomo demo` (no data needed)")
    data.add_argument("--validation-fraction", type=float, default=0.1,
                      help="--train: fraction of the lines held out; --planted: held-out windows "
                           "(a different seed) as this fraction of the training windows")
    data.add_argument("--window", type=int, default=None,
                      help=f"units per window T (default {TEXT_WINDOW}; {PLANTED_WINDOW} with "
                           "--planted)")
    data.add_argument("--shift", type=int, default=None,
                      help="--train: units between window starts (default window / 2)")
    data.add_argument("--vocab-size", type=int, default=100_000,
                      help="--train: most vocabulary ids, <pad>/<unk> included")
    data.add_argument("--batch-size", type=int, default=32, help="windows per step")

    space = p.add_argument_group("search space")
    space.add_argument("--context-lengths", type=int, nargs="+", default=[1, 2, 3, 4, 5],
                       metavar="D", help="context lengths D to try")
    space.add_argument("--heads", type=int, nargs="+", default=[1, 2, 4, 8], metavar="K",
                       help="head counts to try (each must divide --hidden-dim)")
    space.add_argument("--layers", type=int, nargs="+", default=[1, 2, 3], metavar="L",
                       help="graph layer counts to try")
    space.add_argument("--thresholds", nargs="+", default=["query", "scalar"],
                       metavar="KIND", help="graph thresholds to try: query, scalar")
    space.add_argument("--learning-rates", type=float, nargs="+", default=[1e-3, 3e-3],
                       metavar="LR", help="Adam learning rates to try")
    space.add_argument("--hidden-dim", type=int, default=256, help="fixed width d")

    search = p.add_argument_group("search")
    search.add_argument("--tuner", default="random",
                        help="random (RandomSearch), hyperband (Hyperband, at most --epochs per "
                             "model) or bayesian (BayesianOptimization)")
    search.add_argument("--max-trials", type=int, default=10,
                        help="trials in all, finished ones included when resuming")
    search.add_argument("--epochs", type=int, default=3, help="epochs per trial")
    search.add_argument("--steps-per-epoch", type=int, default=None,
                        help="default: one pass over the training windows")
    search.add_argument("--directory", default="tuning", help="where searches are kept")
    search.add_argument("--project", default="glomo", help="the search's name in --directory")
    search.add_argument("--overwrite", action="store_true",
                        help="delete DIRECTORY/PROJECT and start afresh (default: resume)")
    search.add_argument("--seed", type=int, default=0,
                        help="seeds the data split, the oracle and every trial's initial weights")
    p.set_defaults(func=run)
    return p


# ---------------------------------------------------------------------- settings
def settings_from_args(args):
    """The search's settings as a JSON-able dict, validated (UsageError on bad input)."""
    s = {k: v for k, v in vars(args).items() if k not in ("func", "command", "version")}
    if bool(s["train"]) == bool(s["planted"]):
        raise UsageError("give the data with --train FILE... (text files or globs) or --planted "
                         "(the built-in generated corpus), one of them.")
    if s["tuner"] not in TUNER_NAMES:
        raise UsageError(f"--tuner must be one of {', '.join(TUNER_NAMES)}; got {s['tuner']!r}.")
    for name in ("max_trials", "epochs", "batch_size", "hidden_dim"):
        if s[name] < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {s[name]}.")
    if s["steps_per_epoch"] is not None and s["steps_per_epoch"] < 1:
        raise UsageError(f"--steps-per-epoch must be >= 1, got {s['steps_per_epoch']}.")
    if not 0.0 < s["validation_fraction"] < 1.0:
        raise UsageError("--validation-fraction must be in (0, 1): the objective is measured on "
                         f"held-out windows; got {s['validation_fraction']}.")
    for name in ("context_lengths", "heads", "layers"):
        if min(s[name]) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must all be >= 1, got {s[name]}.")
        s[name] = sorted(set(s[name]))
    bad = [t for t in s["thresholds"] if t not in ("query", "scalar")]
    if bad:
        raise UsageError(f"--thresholds must be query and/or scalar, got {bad}.")
    s["thresholds"] = sorted(set(s["thresholds"]))
    if min(s["learning_rates"]) <= 0:
        raise UsageError(f"--learning-rates must be > 0, got {s['learning_rates']}.")
    s["learning_rates"] = sorted(set(s["learning_rates"]))
    bad = [k for k in s["heads"] if s["hidden_dim"] % k]
    if bad:
        raise UsageError(f"--hidden-dim {s['hidden_dim']} is not divisible by --heads {bad}: the "
                         "feature predictor splits the features into heads.")
    if s["window"] is None:
        s["window"] = PLANTED_WINDOW if s["planted"] else TEXT_WINDOW
    if s["window"] <= max(s["context_lengths"]):
        raise UsageError(f"--window ({s['window']}) must be longer than the largest context "
                         f"length ({max(s['context_lengths'])}).")
    if s["planted"]:
        if s["shift"] is not None:
            raise UsageError("--shift applies to --train; the planted corpus comes in windows.")
    else:
        s["shift"] = s["shift"] or max(1, s["window"] // 2)
        if not 1 <= s["shift"] <= s["window"]:
            raise UsageError(f"--shift must be in [1, --window], got {s['shift']}.")
        if s["vocab_size"] < 3:
            raise UsageError(f"--vocab-size must be >= 3, got {s['vocab_size']}.")
    return s


def check_resumable(saved, current):
    """Raises a UsageError when a search is resumed with other settings."""
    refuse_changed_settings(saved, current, RESUMABLE, "the project holds a search",
                            "Resume with the same settings (only --max-trials may change), pass "
                            "--overwrite to start afresh, or use another --project.")


# ---------------------------------------------------------------------- data
def planted_data(s):
    """``(train, validation, vocabulary_size, steps_per_epoch)`` from the built-in corpus."""
    import tensorflow as tf

    from glomo_tf.data import planted
    from glomo_tf.demo import CORPUS
    corpus_args = {**CORPUS, "seq_len": s["window"]}
    try:
        train = planted.builtin_corpus("train", **corpus_args)
        held_out = max(1, round(s["validation_fraction"] * len(train.token_ids)))
        validation = planted.builtin_corpus("test", held_out, **corpus_args)
    except ValueError as error:
        raise UsageError(f"--window {s['window']} does not suit the planted corpus: {error}") \
            from None
    if len(train.token_ids) < s["batch_size"]:
        raise UsageError(f"--batch-size {s['batch_size']} exceeds the {len(train.token_ids)} "
                         "planted training windows.")
    steps = len(train.token_ids) // s["batch_size"]
    train_ds = (tf.data.Dataset.from_tensor_slices(train.token_ids)
                .shuffle(len(train.token_ids), seed=s["seed"])
                .batch(s["batch_size"], drop_remainder=True).repeat()
                .prefetch(tf.data.AUTOTUNE))
    val_ds = tf.data.Dataset.from_tensor_slices(validation.token_ids).batch(s["batch_size"])
    return train_ds, val_ds, train.vocabulary.size, steps


def text_tokenizer(s, lines, project_dir):
    """The search's tokenizer: the saved one when resuming, else built from the training text."""
    from glomo_tf.data.vocabulary import Tokenizer
    saved = os.path.join(project_dir, "tokenizer")
    if not s["overwrite"] and os.path.isfile(os.path.join(saved, "vocab.txt")):
        return Tokenizer.load(saved), True
    print(f"Building the vocabulary (at most {s['vocab_size']} units) ...", flush=True)
    return Tokenizer.build(lines, max_size=s["vocab_size"]), False


def text_data(s, tokenizer, lines):
    """``(train, validation, vocabulary_size, steps_per_epoch)`` from --train files."""
    from glomo_tf.data.corpus import pretraining_datasets
    try:
        train, validation = pretraining_datasets(
            lines, tokenizer, window=s["window"], shift=s["shift"], batch_size=s["batch_size"],
            validation_fraction=s["validation_fraction"], seed=s["seed"])
    except (ValueError, TypeError) as error:
        raise UsageError(str(error)) from None
    steps = int(train.cardinality().numpy())
    return train.repeat(), validation, tokenizer.vocabulary_size, steps


# ---------------------------------------------------------------------- the search
def run(args):
    s = settings_from_args(args)
    try:
        import keras_tuner  # noqa: F401
    except ImportError:
        raise UsageError("glomo tune needs KerasTuner: pip install -e \".[tune]\" (or "
                         "pip install keras-tuner==1.4.8).") from None
    import keras

    from glomo_tf.tuning.hypermodel import GlomoHyperModel, make_tuner, results_table, trial_rows

    project_dir = os.path.join(s["directory"], s["project"])
    config_path = os.path.join(project_dir, "tune_config.json")
    resuming = not s["overwrite"] and os.path.isfile(os.path.join(project_dir, "oracle.json"))
    if resuming and os.path.isfile(config_path):
        with open(config_path) as f:
            check_resumable(json.load(f), s)

    keras.utils.set_random_seed(s["seed"])
    tokenizer, tokenizer_loaded = None, False
    if s["planted"]:
        train, validation, vocabulary_size, steps = planted_data(s)
        fixed = PLANTED_FIXED
    else:
        from glomo_tf.data.corpus import text_lines
        try:
            lines = text_lines(s["train"])
        except (ValueError, FileNotFoundError) as error:
            raise UsageError(str(error)) from None
        tokenizer, tokenizer_loaded = text_tokenizer(s, lines, project_dir)
        train, validation, vocabulary_size, steps = text_data(s, tokenizer, lines)
        fixed = None
    steps = s["steps_per_epoch"] or steps

    hypermodel = GlomoHyperModel(
        vocabulary_size, context_lengths=s["context_lengths"], num_heads=s["heads"],
        num_layers=s["layers"], thresholds=s["thresholds"], hidden_dim=s["hidden_dim"],
        learning_rates=s["learning_rates"], fixed=fixed, seed=s["seed"],
        evaluation_batch_size=s["batch_size"])
    tuner = make_tuner(s["tuner"], hypermodel, s["directory"], s["project"],
                       max_trials=s["max_trials"], seed=s["seed"], overwrite=s["overwrite"],
                       max_epochs=s["epochs"])
    finished = sum(t.status == "COMPLETED" for t in tuner.oracle.trials.values())
    if resuming:
        print(f"Resuming the search in {project_dir}: {finished} finished trial(s) of "
              f"{s['max_trials']}.", flush=True)
    os.makedirs(project_dir, exist_ok=True)
    with open(config_path, "w") as f:
        json.dump(s, f, indent=1)
    if tokenizer is not None and not tokenizer_loaded:
        tokenizer.save(os.path.join(project_dir, "tokenizer"))

    log_dir = os.path.join(project_dir, "logs")
    print(f"TensorBoard logs (curves, and per-trial hyper-parameters in the HPARAMS tab): "
          f"tensorboard --logdir {log_dir}", flush=True)
    try:
        tuner.search(train, validation_data=validation, epochs=s["epochs"],
                     steps_per_epoch=steps, callbacks=[keras.callbacks.TensorBoard(log_dir)],
                     shuffle=False,
                     verbose=2)
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


if __name__ == "__main__":
    from glomo_tf.cli import main
    sys.exit(main(["tune"] + sys.argv[1:]))
