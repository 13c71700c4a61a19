"""The scaffolding the experiments share: run directories (the settings a run or a search was
started with, checked when it resumes) and ``glomo transfer``'s comparisons (the splits, one
fit-and-evaluate sequence, the results files a comparison resumes from)."""

import json
import os

import numpy as np

# Where the run lives: a run directory that was moved, copied or named by another relative path
# is the same run.
LOCATION = ("output_dir", "directory")


def _resolved(value):
    """A path setting (a string or a list of them) as the file it names."""
    if isinstance(value, str):
        return os.path.realpath(value)
    if isinstance(value, list):
        return [os.path.realpath(v) if isinstance(v, str) else v for v in value]
    return value


def refuse_changed_settings(saved, current, may_change, holder, remedy, paths=()):
    """Raises ``ValueError`` when ``current`` settings differ from ``saved`` ones.

    Keys in ``may_change`` (and the run's own location, :data:`LOCATION`) are free to differ;
    keys in ``paths`` name files, compared as the files they resolve to. ``holder`` names what
    holds the saved settings ("the run directory holds a run") and ``remedy`` says what to do
    instead.
    """
    free = set(may_change) | set(LOCATION)

    def differs(k):
        if k in paths:  # the same files, named by another relative or absolute path
            return _resolved(saved.get(k)) != _resolved(current[k])
        return saved.get(k) != current[k]

    changed = [k for k in current if k not in free and differs(k)]
    if changed:
        details = ", ".join(f"{k}: {saved.get(k)!r} -> {current[k]!r}" for k in changed)
        raise ValueError(f"{holder} with other settings ({details}). {remedy}")


class RunDirectory:
    """A run's directory, as ``glomo pretrain`` and ``glomo sentence-pretrain`` keep it: the
    settings it was started with (``config.json``, checked when the run resumes, written by the
    chief worker only), its crash-safe checkpoints (``checkpoints/``) and the files it writes.

    >>> run = RunDirectory("runs/wiki")
    >>> run.file("metrics.json")
    'runs/wiki/metrics.json'
    """

    def __init__(self, path):
        self.path = path

    def file(self, *names):
        """The path of ``names`` inside the run directory."""
        return os.path.join(self.path, *names)

    @property
    def checkpoints(self):
        return self.file("checkpoints")

    @property
    def resuming(self):
        """True when the directory holds a checkpoint: a run that got that far, which a new
        start of the same command continues (a directory whose run stopped before, e.g. on a
        usage error, starts afresh with the new settings)."""
        from glomo_tf import training
        return bool(training.list_checkpoints(self.checkpoints))

    def open(self, settings, check_resumable):
        """Creates the directory; when it holds a run to resume, raises ``ValueError`` (through
        ``check_resumable(saved, settings)``) if that run was started with other settings; then
        writes ``settings`` (JSON-ready) as its ``config.json``, on the chief worker only (on a
        shared file system, one writer)."""
        from glomo_tf import training
        os.makedirs(self.path, exist_ok=True)
        config_path = self.file("config.json")
        settings = json.loads(json.dumps(settings))  # tuples as lists, as saved
        if self.resuming and os.path.isfile(config_path):
            with open(config_path) as f:
                check_resumable(json.load(f), settings)
        if training.is_chief():
            with open(config_path, "w") as f:
                json.dump(settings, f, indent=1)
        return self

    def restore(self, model, steps_per_epoch):
        """Restores ``model`` (weights, optimizer state) from the newest checkpoint, if any, and
        says so; returns ``(step, epoch, batch)``: the optimizer steps taken, the epoch they
        reached (from 0) and the batches of it already trained on."""
        from glomo_tf import training
        restored = training.restore_latest(model, self.checkpoints)
        step = int(model.optimizer.iterations.numpy())
        epoch, batch = divmod(step, steps_per_epoch)
        if restored:
            print(f"Resuming from {restored['path']}: step {step}, epoch {epoch + 1}, "
                  f"batch {batch} of {steps_per_epoch}.", flush=True)
        return step, epoch, batch


# ------------------------------------------------------------------ glomo transfer's comparisons
VALIDATION_FRACTION = 0.1
TEST_FRACTION = 0.1
# Settings a resumed comparison may change: which runs it holds, and how progress is printed.
RESUMABLE_SETTINGS = ("seeds", "variants", "resume", "verbose", "save_models")
# Settings that results.json files written before them lack, read back as their defaults then.
EARLIER_DEFAULTS = {"precision": "float32", "transfer_form": "fusion", "propagation_steps": 3,
                    "propagation_aggregation": "mean", "propagation_update": "gru",
                    "propagation_directions": "both", "propagation_hidden_units": None,
                    "propagation_layer_norm": False,
                    "gold_form": "tree"}
# Settings naming files: the same files named by another path are the same settings.
PATH_SETTINGS = ("model", "tokenizer", "file", "test_file", "data_dir")


def split_indices(num_examples, split, folds, seed):
    """``[(fold, train, validation, test)]`` index arrays for one seed (``fold`` None when
    ``split`` is ``"seeded"``: a seeded :data:`TEST_FRACTION` held out; ``"kfold"``: every fold);
    the validation set, :data:`VALIDATION_FRACTION` of the training part, is carved from it."""
    from glomo_tf.data.labeled import kfold_splits, seeded_split

    if split == "kfold":
        parts = [(fold, train, test) for fold, (train, test)
                 in enumerate(kfold_splits(num_examples, folds, seed))]
    else:
        train, test = seeded_split(num_examples, TEST_FRACTION, seed)
        parts = [(None, train, test)]
    out = []
    for fold, train, test in parts:
        keep, validation = seeded_split(len(train), VALIDATION_FRACTION, seed)
        out.append((fold, train[keep], train[validation], test))
    return out


def fit_with_early_stopping(model, batches, validation_data, *, learning_rate, patience, epochs,
                            verbose, monitor="val_accuracy", loss="sparse_categorical_crossentropy",
                            metrics=("accuracy",), callbacks=()):
    """Compiles ``model`` with Adam at ``learning_rate`` and fits it on ``batches`` (a dataset
    that reshuffles itself) for at most ``epochs``, stopping after ``patience`` epochs without a
    better ``monitor`` (best weights restored); returns the epochs run. ``validation_data`` may
    be None when one of ``callbacks`` writes ``monitor`` into the epoch's logs."""
    import keras

    model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss=loss,
                  metrics=list(metrics))
    stop = keras.callbacks.EarlyStopping(monitor=monitor, mode="max", patience=patience,
                                         restore_best_weights=True)
    history = model.fit(batches, validation_data=validation_data, epochs=epochs, shuffle=False,
                        callbacks=[*callbacks, stop], verbose=verbose)
    return len(history.history["loss"])


def predict_in_order(model, data, order):
    """``model``'s outputs on ``data``, batches in the order ``order`` gives (row ``i`` of the
    batches is example ``order[i]``), put back in the examples' order."""
    outputs = model.predict(data, verbose=0)
    restored = np.empty_like(outputs)
    restored[order] = outputs
    return restored


def training_settings(config):
    """The fitting settings of a :class:`~glomo_tf.experiments.transfer.TransferConfig`."""
    return dict(learning_rate=config.learning_rate, patience=config.patience,
                epochs=config.epochs, batch_size=config.batch_size, verbose=config.verbose)


class Comparison:
    """The runs of one ``glomo transfer`` comparison in ``config.output_dir``: ``results.json``
    (the settings, every run, the paired summary) and ``results.md``, rewritten after each run.

    Opening it keeps the runs of an earlier ``results.json`` (``config.resume``, the same
    settings; see :func:`previous_runs`) so that only the missing (variant, seed, fold) runs
    are trained. ``primary`` is the runs' main figure (``exact_match`` for SQuAD), ``metrics``
    their other figures (``"f1"``, ``"test_hard_accuracy"``), summarised the same way.
    """

    def __init__(self, config, record, class_names, split_description, *, metrics=(),
                 primary="accuracy"):
        try:
            os.makedirs(config.output_dir, exist_ok=True)
        except OSError as error:
            raise ValueError(f"Cannot create `output_dir` {config.output_dir!r}: {error}") from None
        self.output_dir, self.split_description = config.output_dir, split_description
        self.metrics, self.primary = tuple(metrics), primary
        import dataclasses

        self.settings = {**dataclasses.asdict(config), **(record or {}),
                         "class_names": class_names}
        self.runs = previous_runs(config, self.settings)
        if self.runs:
            self.settings["seeds"] = list(dict.fromkeys([*(r["seed"] for r in self.runs),
                                                         *config.seeds]))
            self.settings["variants"] = list(dict.fromkeys([*(r["variant"] for r in self.runs),
                                                            *config.variants]))
        self._done = {(r["variant"], r["seed"], r["fold"]) for r in self.runs}

    def done(self, variant, seed, fold=None):
        """True when the comparison holds the run."""
        return (variant, seed, fold) in self._done

    def announce(self, config, data):
        """Prints what the comparison runs (``data``: a line about the data) and what it kept."""
        print(f"{config.dataset}: {data}; variants {' '.join(config.variants)}; seeds "
              f"{' '.join(map(str, config.seeds))}; {self.split_description}")
        if self.runs:
            print(f"Resuming: {len(self.runs)} run(s) kept from "
                  f"{os.path.join(self.output_dir, 'results.json')}")

    def add(self, run):
        """Records a finished run and rewrites the files; returns the Markdown report."""
        self.runs.append(run)
        self._done.add((run["variant"], run["seed"], run["fold"]))
        return self.write()

    def write(self):
        """Writes ``results.json`` and ``results.md``; returns the Markdown report."""
        from glomo_tf import evaluation

        variants = self.settings["variants"]
        summary = evaluation.summarize(self.runs, variants, metric=self.primary)
        if self.metrics:
            summary["metrics"] = {m: evaluation.summarize(self.runs, variants, metric=m)
                                  for m in self.metrics}
        with open(os.path.join(self.output_dir, "results.json"), "w", encoding="utf-8") as f:
            json.dump({"config": self.settings, "split_description": self.split_description,
                       "primary": self.primary, "runs": self.runs, "summary": summary}, f,
                      indent=2)
        dataset = self.settings["dataset"]
        markdown = evaluation.format_markdown(summary, dataset, self.split_description,
                                              metric=self.primary)
        for metric in self.metrics:
            markdown += "\n" + evaluation.format_markdown(
                summary["metrics"][metric], dataset, self.split_description, metric=metric)
        with open(os.path.join(self.output_dir, "results.md"), "w", encoding="utf-8") as f:
            f.write(markdown)
        return markdown


def previous_runs(config, settings):
    """The runs of ``config.output_dir/results.json`` to keep (``[]`` when there is none).

    Raises ``ValueError`` when the directory holds runs and ``config.resume`` is off (they would
    be overwritten), when the file cannot be read, or when it was made with other settings than
    ``settings`` (anything but :data:`RESUMABLE_SETTINGS`; see :func:`refuse_changed_settings`)."""
    path = os.path.join(config.output_dir, "results.json")
    if not os.path.exists(path):
        return []
    try:
        with open(path, encoding="utf-8") as handle:
            previous = json.load(handle)
        runs, saved = list(previous["runs"]), {**EARLIER_DEFAULTS, **previous["config"]}
        keys = {(r["variant"], r["seed"], r["fold"]) for r in runs}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path} cannot be read as a glomo transfer result ({error}): move it "
                         "away or choose another `output_dir`.") from None
    if not runs:
        return []
    if not config.resume:
        raise ValueError(f"`output_dir` {config.output_dir} already holds {len(runs)} run(s) in "
                         "results.json: pass `resume` to keep them and run only the missing "
                         "ones, or choose another `output_dir`.")
    refuse_changed_settings(saved, json.loads(json.dumps(settings)), RESUMABLE_SETTINGS,
                            f"`resume`: {path} holds runs made",
                            "Resume with its settings or choose another `output_dir`.",
                            paths=PATH_SETTINGS)
    if len(keys) != len(runs):
        raise ValueError(f"{path} holds the same (variant, seed, fold) run twice: move it away "
                         "or choose another `output_dir`.")
    return runs


def load_pretrained(config):
    """``(predictor, tokenizer)`` of ``config.model`` / ``config.tokenizer`` (None, None without
    a model); the predictor runs in ``config.precision``."""
    from glomo_tf.data.vocabulary import Tokenizer, check_vocabulary_matches
    from glomo_tf.saving import load_graph_predictor

    if not config.model:
        return None, None
    try:
        tokenizer = Tokenizer.load(config.tokenizer)
        predictor = load_graph_predictor(config.model, dtype=config.precision)
    except FileNotFoundError as error:
        raise ValueError(str(error).replace("\n", " ")) from None
    check_vocabulary_matches(tokenizer.vocabulary, predictor)
    if config.init_embeddings == "predictor" and config.embedding_dim != predictor.hidden_dim:
        raise ValueError(f"`init_embeddings` predictor needs `embedding_dim` "
                         f"{predictor.hidden_dim} (the predictor's width), got "
                         f"{config.embedding_dim}.")
    return predictor, tokenizer


def initial_embeddings(model, predictor, config):
    """``model`` with its word embeddings (the layer named ``embedding``) set to the predictor's
    table when ``config.init_embeddings == "predictor"``; unchanged otherwise."""
    if config.init_embeddings != "predictor":
        return model
    import keras

    table = np.asarray(keras.ops.convert_to_numpy(predictor.embeddings), np.float32)
    model.get_layer("embedding").set_weights([table])
    return model


def save_model(model, output_dir, variant, seed, fold, tokenizer=None):
    """Saves a trained model as ``output_dir/models/<variant>-seed<seed>[-fold<k>].keras``; with
    a ``tokenizer`` (a run without a pretrained one builds its own from each split's training
    texts), that too, as ``models/tokenizer-seed<seed>[-fold<k>]/``, to encode new texts as the
    model read them."""
    directory = os.path.join(output_dir, "models")
    os.makedirs(directory, exist_ok=True)
    split = f"seed{seed}" + ("" if fold is None else f"-fold{fold + 1}")
    model.save(os.path.join(directory, f"{variant}-{split}.keras"))
    if tokenizer is not None:
        tokenizer.save(os.path.join(directory, f"tokenizer-{split}"))
