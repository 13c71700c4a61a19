"""Self-supervised sentence-encoder pretraining, resumable after a crash (``glomo
sentence-pretrain``).

``run_sentence_pretraining(SentencePretrainingConfig(output_dir=..., train=[...]))`` runs what
the command runs. A run lives in one output directory, like ``glomo pretrain``'s::

    RUN/config.json                  every setting (checked again when resuming)
    RUN/tokenizer/                   vocab.txt (with [MASK]) + tokenizer.json
    RUN/checkpoints/ckpt-N/          crash-safe checkpoints (weights, optimizer state, step)
    RUN/sentence_pretrainer.keras    the model, at the end (read by ``glomo probe --run RUN``)
    RUN/metrics.json                 steps, final losses per objective, sentences/s, wall time
    RUN/snapshots/step-N/            with ``snapshot_every_epoch``: the model and tokenizer after
                                     each epoch, each a run directory ``glomo probe --run`` reads
                                     (the probe accuracy against pairs seen)

Running the same command again resumes from the newest checkpoint with the same batches: each
epoch's order is a function of the seed and the epoch
(:func:`glomo_tf.experiments.pretraining_data.epoch_stream`) and the batches already trained on
are skipped. Epochs shorter than the corpus
(``steps_per_epoch``) read it part after part.
"""

import dataclasses
import json
import os
import shutil
import time
from typing import Optional

from glomo_tf import hparams
from glomo_tf.precision import check_precision, precision_scope
from glomo_tf.data.sentences import CORPUS_FORMATS
from glomo_tf.experiments.runs import RunDirectory, refuse_changed_settings
from glomo_tf.experiments.settings import (count_or_all, precision_setting, setting,
                                           verbose_setting)

MODEL_FILE = "sentence_pretrainer.keras"
# Settings that may change between a run and its resumption.
RESUMABLE = ("epochs", "checkpoint_every", "snapshot_every_epoch", "verbose")
_ENC, _P, _CMD = hparams.SENTENCE_ENCODER, hparams.SENTENCE_PRETRAINER, \
    hparams.SENTENCE_PRETRAIN_COMMAND


@dataclasses.dataclass(kw_only=True)
class SentencePretrainingConfig:
    """Every setting of ``glomo sentence-pretrain`` (one field per flag)."""

    # data
    train: Optional[list] = setting(None, "training text files", group="data", metavar="FILE")
    format: str = setting(
        "wikitext", "wikitext: one paragraph per line, ' = Title = ' between articles; lines: "
        "one sentence per line, blank lines between documents; books: one paragraph of prose per "
        "line, blank lines between books (.gz read as is)", group="data", choices=CORPUS_FORMATS)
    validation: Optional[list] = setting(None, "validation files in the same format",
                                         group="data", metavar="FILE")
    vocab: Optional[str] = setting(None, "an existing tokenizer directory ([MASK] is added when "
                                   "missing)", group="data", metavar="DIR")
    vocab_size: int = setting(20_000, "most ids, <pad>/<unk> included, [MASK] added",
                              group="data")
    min_count: int = setting(1, "least occurrences for a word to enter the vocabulary",
                             group="data")
    lowercase: bool = setting(False, "lowercase the text", group="data")
    max_length: int = setting(_CMD["max_length"], "units per sentence (longer ones are cut)",
                              group="data")
    # model
    embedding_dim: int = setting(_ENC["embedding_dim"], "word embedding width", group="model")
    units: int = setting(_ENC["units"], "GRU units per direction (a sentence vector has 4 x "
                         "units)", group="model")
    objectives: tuple = setting(_P["objectives"], "qt: Quick Thoughts (Eq. 3.3); sp: Self "
                                "Prediction (Eq. 3.4); g2l: Global-to-Local (Eq. 3.5)",
                                group="model", choices=hparams.SENTENCE_OBJECTIVES)
    objectives_per_batch: Optional[int] = setting(
        _P["objectives_per_batch"], "objectives sampled for each batch, or 'all'", group="model",
        parse=str, metavar="N")
    neighbours: str = setting(_P["neighbours"], "Quick Thoughts' targets: the next sentence, or "
                              "both neighbours", group="model",
                              choices=hparams.SENTENCE_NEIGHBOURS)
    l2_weight: float = setting(_P["l2_weight"], "Global-to-Local's L2 penalty on the "
                               "representations", group="model")
    g2l_reduction: str = setting(_P["g2l_reduction"], "Global-to-Local's loss over a target's "
                                 "positions: sum (Eq. 3.5) or mean", group="model",
                                 choices=hparams.G2L_REDUCTIONS)
    graph_run: Optional[str] = setting(None, "a glomo pretrain run, or a preset (a built-in "
                                       "name such as glomo_books_en, or a directory), whose "
                                       "frozen graphs feed both encoders (GlomoTransfer on the "
                                       "embeddings; its tokenizer is used)", group="model",
                                       metavar="RUN_OR_PRESET")
    num_mixtures: int = setting(1, "GlomoTransfer mixtures per direction (with `graph_run`)",
                                group="model")
    # optimisation
    learning_rate: float = setting(_CMD["learning_rate"], "Adam's", group="optimisation")
    clipnorm: float = setting(0.0, "global gradient-norm clip (0: none)", group="optimisation")
    epochs: int = setting(10, "epochs in all (a resumed run trains the ones missing)",
                          group="optimisation")
    steps_per_epoch: Optional[int] = setting(None, "default: one pass over the sentence pairs; "
                                             "shorter epochs read them part after part",
                                             group="optimisation")
    batch_size: int = setting(_CMD["batch_size"], "sentence pairs per step; the other pairs are "
                              "the negatives", group="optimisation")
    seed: int = setting(0, "seed of the weights, the order, the objectives and corruptions",
                        group="optimisation")
    jit: bool = setting(False, "compile the train step with XLA", group="optimisation")
    precision: str = precision_setting("optimisation")
    # run
    output_dir: str = setting(help="run directory (resumed if it exists)", group="run")
    checkpoint_every: int = setting(200, "steps between crash-safe checkpoints", group="run",
                                    metavar="STEPS")
    snapshot_every_epoch: bool = setting(
        False, "after each epoch keep the model in RUN/snapshots/step-N (a run directory glomo "
        "probe --run reads: probe accuracy against pairs seen)", group="run")
    verbose: int = verbose_setting(group="run")

    def validated(self):
        """A checked copy; raises ``ValueError`` naming the flag to change."""
        c = dataclasses.replace(
            self, objectives=tuple(self.objectives),
            objectives_per_batch=count_or_all(self.objectives_per_batch, "objectives_per_batch"))
        if not c.train:
            raise ValueError("give the corpus with `train` FILE... (WikiText files, or one "
                             "sentence per line with `format` lines).")
        if c.format not in CORPUS_FORMATS:
            raise ValueError(f"`format` must be one of {', '.join(CORPUS_FORMATS)}.")
        bad = [o for o in c.objectives if o not in hparams.SENTENCE_OBJECTIVES]
        if bad or not c.objectives or len(set(c.objectives)) != len(c.objectives):
            raise ValueError(f"`objectives` must be distinct names among "
                             f"{' '.join(hparams.SENTENCE_OBJECTIVES)}.")
        if c.neighbours not in hparams.SENTENCE_NEIGHBOURS:
            raise ValueError(f"`neighbours` must be one of "
                             f"{', '.join(hparams.SENTENCE_NEIGHBOURS)}.")
        for name, least in dict(vocab_size=4, min_count=1, max_length=2, embedding_dim=1,
                                units=1, num_mixtures=1, epochs=1, steps_per_epoch=1,
                                batch_size=2, checkpoint_every=1, objectives_per_batch=1).items():
            value = getattr(c, name)
            if value is not None and value < least:
                raise ValueError(f"`{name}` must be at least {least}, got "
                                 f"{value}.")
        check_precision(c.precision)
        if c.g2l_reduction not in hparams.G2L_REDUCTIONS:
            raise ValueError(f"`g2l_reduction` must be one of {', '.join(hparams.G2L_REDUCTIONS)}.")
        if c.learning_rate <= 0 or c.clipnorm < 0 or c.l2_weight < 0:
            raise ValueError("`learning_rate` must be > 0, `clipnorm` and `l2_weight` >= 0.")
        if c.graph_run:
            if c.vocab:
                raise ValueError("`graph_run` brings its own tokenizer (the encoders read the "
                                 "predictor's ids); leave out `vocab`.")
            graph_source(c.graph_run)
        return c


def graph_source(graph_run):
    """``(predictor, tokenizer directory)`` paths of ``graph_run``: a ``glomo pretrain`` run
    directory (its ``graph_predictor.keras``), or a preset, a built-in name or a directory
    (:func:`glomo_tf.load_graph_predictor` reads both); raises ``ValueError`` naming the fix."""
    from glomo_tf import presets

    run_file = os.path.join(graph_run, "graph_predictor.keras")
    if os.path.isfile(run_file):
        return run_file, os.path.join(graph_run, "tokenizer")
    try:
        directory = presets.preset_directory(graph_run)
    except presets.PresetError:
        names = ", ".join(presets.list_presets()) or "none installed"
        raise ValueError(f"`graph_run` {graph_run!r} holds no graph_predictor.keras and is no "
                         f"preset: pass the `output_dir` of a finished glomo pretrain run, or a "
                         f"preset directory or built-in name ({names}).") from None
    return directory, presets.tokenizer_directory(directory)


def check_resumable(saved, current):
    # run directories written before --precision and --g2l-reduction
    saved = {"precision": "float32", "g2l_reduction": "sum", **saved}
    refuse_changed_settings(saved, current, RESUMABLE, "the run directory holds a run",
                            "Resume with the same settings, or start a new run with another "
                            "`output_dir`.", paths=("train", "validation", "vocab", "graph_run"))


def run_sentence_pretraining(config):
    """Runs (or resumes) the run a :class:`SentencePretrainingConfig` describes; returns 0."""
    s = config.validated()
    run_dir = s.output_dir
    RunDirectory(run_dir).open(dataclasses.asdict(s), check_resumable)
    with precision_scope(s.precision):
        return _train(s, run_dir)


def load_data(s, tokenizer=None, run_dir=None):
    """``(tokenizer, train ids, validation ids or None)``: the documents read, the tokenizer
    (given, saved in the run, the graph run's or ``--vocab`` plus [MASK], or built) and the
    consecutive sentences as id columns ``{"source", "target"[, "previous"]}``."""
    from glomo_tf.data import sentences
    from glomo_tf.data.vocabulary import Tokenizer

    def documents(paths):  # streamed: read again for each pass, never held as text
        return sentences.iter_documents(paths, s.format)

    if tokenizer is None:
        saved = run_dir and os.path.join(run_dir, "tokenizer")
        source = saved if saved and os.path.isfile(os.path.join(saved, "vocab.txt")) else (
            graph_source(s.graph_run)[1] if s.graph_run else s.vocab)
        if source:
            try:
                tokenizer = Tokenizer.load(source)
            except (ValueError, FileNotFoundError, OSError) as error:
                raise ValueError(f"cannot load the tokenizer from {source}: {error}") from None
        else:
            tokenizer = Tokenizer.build(
                (sentence for document in documents(s.train) for sentence in document),
                max_size=s.vocab_size, min_count=s.min_count, lowercase=s.lowercase)
        tokenizer = sentences.with_mask_unit(tokenizer)
    try:
        train = sentences.encode_documents(documents(s.train), tokenizer, s.max_length,
                                           s.neighbours)
    except ValueError as error:
        if "no document holds" not in str(error):
            raise
        raise ValueError(f"{', '.join(map(str, s.train))}: {error} Check `format` "
                         f"({s.format!r}).") from None
    validation = None
    if s.validation:
        validation = sentences.encode_documents(documents(s.validation), tokenizer,
                                                s.max_length, s.neighbours)
    return tokenizer, train, validation


def heldout_losses(run_dir, paths, corpus_format="books", max_pairs=20000, batch_size=400,
                   max_length=None):
    """Each objective's mean loss over held-out text: ``{"qt_loss", "sp_loss", "g2l_loss",
    "loss", "pairs"}`` for the model of a run or snapshot directory ``run_dir``.

    The pairs are the first ``max_pairs`` consecutive-sentence pairs of ``paths`` (read in order,
    one book at a time, never across books), in batches of ``batch_size`` in that order, the
    last partial batch dropped: Quick Thoughts' and Global-to-Local's negatives are the batch's
    other sentences, so a loss is comparable to another's at the same batch size only (give
    the runs' own). Every objective is computed on every batch (``Model.evaluate``), and Self
    Prediction's corruptions are drawn from the model's seed at a fixed counter, so two models
    of the same seed see the same corrupted sentences. Training losses are means over the steps
    of an epoch while the weights move; these compare models at one point of their training.
    """
    import tensorflow as tf

    from glomo_tf.data import sentences
    from glomo_tf.experiments.probe_encoders import load_sentence_run

    if max_pairs < batch_size:
        raise ValueError(f"max_pairs ({max_pairs}) is below one batch of {batch_size}; raise it.")
    model, tokenizer = load_sentence_run(run_dir)
    max_length = max_length or hparams.SENTENCE_PRETRAIN_COMMAND["max_length"]
    wanted = max_pairs - max_pairs % batch_size

    def first_documents():  # enough books for the pairs wanted, and no more read
        seen, per_pair = 0, 2 if model.neighbours == "both" else 1
        for document in sentences.iter_documents(paths, corpus_format):
            yield document
            seen += max(len(document) - per_pair, 0)
            if seen >= wanted:
                return

    columns = sentences.encode_documents(first_documents(), tokenizer, max_length,
                                         model.neighbours)
    found = len(columns["source"])
    if found < batch_size:
        raise ValueError(f"{', '.join(map(str, paths))}: {found} sentence pairs, fewer than one "
                         f"batch of {batch_size}; pass more held-out text.")
    count = min(found, wanted) // batch_size * batch_size
    data = tf.data.Dataset.from_tensor_slices(
        {k: v[:count] for k, v in columns.items()}).batch(batch_size)
    state = model.seed_generator.state
    state.assign(tf.stack([state[0], tf.zeros([], state.dtype)]))
    model.compile(jit_compile=False)
    losses = model.evaluate(data, verbose=0, return_dict=True)
    return {**{k: float(v) for k, v in losses.items()}, "pairs": int(count)}


def epoch_snapshot(run_dir, batch_size):
    """A Keras callback: after each epoch, the model and the tokenizer in
    ``RUN/snapshots/step-N/`` with ``metrics.json`` (steps, pairs seen, the epoch's seconds and
    mean losses over its ``loss_steps`` steps: after a resumption, its resumed part only). A
    snapshot already there (written before the run was interrupted and resumed from an earlier
    checkpoint) is kept: the resumed run reaches the same weights, and its losses cover the
    whole epoch."""
    import keras

    from glomo_tf.training import is_chief

    class EpochSnapshot(keras.callbacks.Callback):
        started = first_step = None

        def on_epoch_begin(self, epoch, logs=None):
            self.started = time.perf_counter()
            self.first_step = int(self.model.optimizer.iterations.numpy())

        def on_epoch_end(self, epoch, logs=None):
            if not is_chief():
                return
            step = int(self.model.optimizer.iterations.numpy())
            target = os.path.join(run_dir, "snapshots", f"step-{step:07d}")
            if os.path.isfile(os.path.join(target, "metrics.json")):
                return
            partial = target + ".partial"
            shutil.rmtree(partial, ignore_errors=True)
            shutil.copytree(os.path.join(run_dir, "tokenizer"), os.path.join(partial, "tokenizer"))
            self.model.save(os.path.join(partial, MODEL_FILE))
            with open(os.path.join(partial, "metrics.json"), "w") as f:
                json.dump({"steps": step, "epochs": epoch + 1, "pairs_seen": step * batch_size,
                           "epoch_seconds": round(time.perf_counter() - self.started, 1),
                           "loss_steps": step - self.first_step,
                           "last_epoch": {k: float(v) for k, v in (logs or {}).items()
                                          if k.endswith("loss")}}, f, indent=1)
            shutil.rmtree(target, ignore_errors=True)
            os.replace(partial, target)  # a snapshot is whole or absent

    return EpochSnapshot()


def _train(s, run_dir):
    import keras
    import tensorflow as tf

    from glomo_tf import training
    from glomo_tf.data.sentences import mask_id
    from glomo_tf.models.sentence_pretrainer import SentencePretrainer
    from glomo_tf.experiments.pretraining_data import epoch_stream, epochs_to_read
    from glomo_tf.saving import load_graph_predictor

    started = time.perf_counter()
    keras.utils.set_random_seed(s.seed)
    tokenizer, train, validation = load_data(s, run_dir=run_dir)
    tokenizer.save(os.path.join(run_dir, "tokenizer"))
    pairs = len(train["source"])
    if pairs < s.batch_size:
        raise ValueError(f"the corpus gives {pairs} sentence pairs, fewer than one batch of "
                         f"`batch_size` {s.batch_size}; lower it or add text.")
    steps_per_epoch = s.steps_per_epoch or pairs // s.batch_size
    parts = epochs_to_read(pairs, steps_per_epoch * s.batch_size, s.batch_size)
    walk = f" (an epoch reads the next part of them: all in {parts} epochs)" if parts else ""
    print(f"{pairs} sentence pairs, {tokenizer.vocabulary_size} units, {steps_per_epoch} steps "
          f"of {s.batch_size} per epoch{walk}.", flush=True)

    predictor = None
    if s.graph_run:
        predictor = load_graph_predictor(graph_source(s.graph_run)[0])
    model = SentencePretrainer(
        tokenizer.vocabulary_size, mask_id(tokenizer), embedding_dim=s.embedding_dim,
        units=s.units, objectives=s.objectives, objectives_per_batch=s.objectives_per_batch,
        neighbours=s.neighbours, l2_weight=s.l2_weight, g2l_reduction=s.g2l_reduction,
        graph_predictor=predictor,
        num_mixtures=s.num_mixtures, seed=s.seed)
    model.compile(optimizer=keras.optimizers.Adam(s.learning_rate,
                                                  global_clipnorm=s.clipnorm or None),
                  jit_compile=bool(s.jit))
    model.build()

    run = RunDirectory(run_dir)
    checkpoints = run.checkpoints
    step, first_epoch, done_in_epoch = run.restore(model, steps_per_epoch)
    examples = tf.data.Dataset.from_tensor_slices(train)
    validation_data = None
    if validation is not None and len(validation["source"]):
        validation_data = tf.data.Dataset.from_tensor_slices(validation).batch(s.batch_size)
    callbacks = [training.CrashSafeCheckpoint(checkpoints, every_steps=s.checkpoint_every)]
    if s.snapshot_every_epoch:
        callbacks.append(epoch_snapshot(run_dir, s.batch_size))
    fit_kwargs = dict(validation_data=validation_data, callbacks=callbacks, verbose=s.verbose,
                      shuffle=False)
    history = []
    fit_started = time.perf_counter()
    if first_epoch < s.epochs and done_in_epoch:  # finish the interrupted epoch first
        data = epoch_stream(examples, s.batch_size, steps_per_epoch, s.seed, first_epoch,
                            first_epoch + 1, skip_batches=done_in_epoch)
        history.append(model.fit(data, initial_epoch=first_epoch, epochs=first_epoch + 1,
                                 steps_per_epoch=steps_per_epoch - done_in_epoch,
                                 **fit_kwargs))
        first_epoch += 1
    if first_epoch < s.epochs:
        data = epoch_stream(examples, s.batch_size, steps_per_epoch, s.seed, first_epoch,
                            s.epochs)
        history.append(model.fit(data, initial_epoch=first_epoch, epochs=s.epochs,
                                 steps_per_epoch=steps_per_epoch, **fit_kwargs))
    else:
        print(f"Already trained for {s.epochs} epochs ({step} steps); raise --epochs to train "
              "more.")
        if os.path.isfile(os.path.join(run_dir, MODEL_FILE)) and \
                os.path.isfile(os.path.join(run_dir, "metrics.json")):
            return 0  # the finished run's outputs stay as they are
    trained_steps = int(model.optimizer.iterations.numpy()) - step
    fit_seconds = time.perf_counter() - fit_started
    logs = {}
    for h in history:
        logs.update({k: v[-1] for k, v in h.history.items()})
    metrics = {"steps": int(model.optimizer.iterations.numpy()), "pairs": pairs,
               "wall_time_s": round(time.perf_counter() - started, 1),
               "pairs_per_s": round(trained_steps * s.batch_size / fit_seconds, 1)
               if trained_steps else None,
               "last_epoch": {k: float(v) for k, v in logs.items()
                              if k.endswith("loss")}}
    model.save(os.path.join(run_dir, MODEL_FILE))
    with open(os.path.join(run_dir, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    print(json.dumps(metrics))
    print(f"Saved {run_dir}/{MODEL_FILE} and tokenizer/; probe it with: glomo probe --run "
          f"{run_dir} --baselines bow random")
    return 0
