"""Self-supervised sentence-encoder pretraining, resumable after a crash (``glomo
sentence-pretrain``).

``run_sentence_pretraining(SentencePretrainingConfig(output_dir=..., train=[...]))`` runs what
the command runs. A run lives in one output directory, like ``glomo pretrain``'s::

    RUN/config.json                  every setting (checked again when resuming)
    RUN/tokenizer/                   vocab.txt (with [MASK]) + tokenizer.json
    RUN/checkpoints/ckpt-N/          crash-safe checkpoints (weights, optimizer state, step)
    RUN/sentence_pretrainer.keras    the model, at the end (read by ``glomo probe --run RUN``)
    RUN/metrics.json                 steps, final losses per objective, sentences/s, wall time

Running the same command again resumes from the newest checkpoint with the same batches: each
epoch's order is a function of the seed and the epoch (:func:`glomo_tf.experiments.pretraining.epoch_stream`)
and the batches already trained on are skipped.
"""

import dataclasses
import json
import os
import time
from typing import Optional

from glomo_tf import hparams
from glomo_tf.precision import check_precision, precision_scope
from glomo_tf.experiments.runs import open_run_directory, refuse_changed_settings

MODEL_FILE = "sentence_pretrainer.keras"
# Settings that may change between a run and its resumption.
RESUMABLE = ("epochs", "checkpoint_every", "verbose")
_ENC, _P, _CMD = hparams.SENTENCE_ENCODER, hparams.SENTENCE_PRETRAINER, \
    hparams.SENTENCE_PRETRAIN_COMMAND


@dataclasses.dataclass
class SentencePretrainingConfig:
    """Every setting of ``glomo sentence-pretrain`` (one field per flag)."""

    output_dir: str
    train: Optional[list] = None
    format: str = "wikitext"
    validation: Optional[list] = None
    vocab: Optional[str] = None
    vocab_size: int = 20_000
    min_count: int = 1
    lowercase: bool = False
    max_length: int = _CMD["max_length"]
    embedding_dim: int = _ENC["embedding_dim"]
    units: int = _ENC["units"]
    objectives: tuple = _P["objectives"]
    objectives_per_batch: Optional[int] = _P["objectives_per_batch"]
    neighbours: str = _P["neighbours"]
    l2_weight: float = _P["l2_weight"]
    graph_run: Optional[str] = None
    num_mixtures: int = 1
    learning_rate: float = _CMD["learning_rate"]
    clipnorm: float = 0.0
    epochs: int = 10
    steps_per_epoch: Optional[int] = None
    batch_size: int = _CMD["batch_size"]
    seed: int = 0
    jit: bool = False
    precision: str = "float32"
    checkpoint_every: int = 200
    verbose: int = 1

    def validated(self):
        """A checked copy; raises ``ValueError`` naming the flag to change."""
        from glomo_tf.data.sentences import CORPUS_FORMATS
        c = dataclasses.replace(self, objectives=tuple(self.objectives))
        if not c.train:
            raise ValueError("give the corpus with --train FILE... (WikiText files, or one "
                             "sentence per line with --format lines).")
        if c.format not in CORPUS_FORMATS:
            raise ValueError(f"--format must be one of {', '.join(CORPUS_FORMATS)}.")
        bad = [o for o in c.objectives if o not in hparams.SENTENCE_OBJECTIVES]
        if bad or not c.objectives or len(set(c.objectives)) != len(c.objectives):
            raise ValueError(f"--objectives must be distinct names among "
                             f"{' '.join(hparams.SENTENCE_OBJECTIVES)}.")
        if c.neighbours not in hparams.SENTENCE_NEIGHBOURS:
            raise ValueError(f"--neighbours must be one of "
                             f"{', '.join(hparams.SENTENCE_NEIGHBOURS)}.")
        for name, least in dict(vocab_size=4, min_count=1, max_length=2, embedding_dim=1,
                                units=1, num_mixtures=1, epochs=1, steps_per_epoch=1,
                                batch_size=2, checkpoint_every=1, objectives_per_batch=1).items():
            value = getattr(c, name)
            if value is not None and value < least:
                raise ValueError(f"--{name.replace('_', '-')} must be at least {least}, got "
                                 f"{value}.")
        check_precision(c.precision)
        if c.learning_rate <= 0 or c.clipnorm < 0 or c.l2_weight < 0:
            raise ValueError("--learning-rate must be > 0, --clipnorm and --l2-weight >= 0.")
        if c.graph_run:
            if c.vocab:
                raise ValueError("--graph-run brings its own tokenizer (the encoders read the "
                                 "predictor's ids); leave out --vocab.")
            if not os.path.isfile(os.path.join(c.graph_run, "graph_predictor.keras")):
                raise ValueError(f"--graph-run {c.graph_run!r} holds no graph_predictor.keras: "
                                 "pass the --output-dir of a finished glomo pretrain run.")
        return c


def check_resumable(saved, current):
    saved = {"precision": "float32", **saved}  # a run directory written before --precision
    refuse_changed_settings(saved, current, RESUMABLE, "the run directory holds a run",
                            "Resume with the same settings, or start a new run with another "
                            "--output-dir.", paths=("train", "validation", "vocab", "graph_run"))


def run_sentence_pretraining(config):
    """Runs (or resumes) the run a :class:`SentencePretrainingConfig` describes; returns 0."""
    s = config.validated()
    run_dir = s.output_dir
    open_run_directory(run_dir, dataclasses.asdict(s), check_resumable)
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
            os.path.join(s.graph_run, "tokenizer") if s.graph_run else s.vocab)
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
        raise ValueError(f"{', '.join(map(str, s.train))}: {error} Check --format "
                         f"({s.format!r}).") from None
    validation = None
    if s.validation:
        validation = sentences.encode_documents(documents(s.validation), tokenizer,
                                                s.max_length, s.neighbours)
    return tokenizer, train, validation


def _train(s, run_dir):
    import keras
    import tensorflow as tf

    from glomo_tf import training
    from glomo_tf.data.sentences import mask_id
    from glomo_tf.models.sentence_pretrainer import SentencePretrainer
    from glomo_tf.experiments.pretraining import epoch_stream
    from glomo_tf.saving import load_graph_predictor

    started = time.perf_counter()
    keras.utils.set_random_seed(s.seed)
    tokenizer, train, validation = load_data(s, run_dir=run_dir)
    tokenizer.save(os.path.join(run_dir, "tokenizer"))
    pairs = len(train["source"])
    if pairs < s.batch_size:
        raise ValueError(f"the corpus gives {pairs} sentence pairs, fewer than one batch of "
                         f"--batch-size {s.batch_size}; lower it or add text.")
    steps_per_epoch = s.steps_per_epoch or pairs // s.batch_size
    print(f"{pairs} sentence pairs, {tokenizer.vocabulary_size} units, {steps_per_epoch} steps "
          f"of {s.batch_size} per epoch.", flush=True)

    predictor = None
    if s.graph_run:
        predictor = load_graph_predictor(os.path.join(s.graph_run, "graph_predictor.keras"))
    model = SentencePretrainer(
        tokenizer.vocabulary_size, mask_id(tokenizer), embedding_dim=s.embedding_dim,
        units=s.units, objectives=s.objectives, objectives_per_batch=s.objectives_per_batch,
        neighbours=s.neighbours, l2_weight=s.l2_weight, graph_predictor=predictor,
        num_mixtures=s.num_mixtures, seed=s.seed)
    model.compile(optimizer=keras.optimizers.Adam(s.learning_rate,
                                                  global_clipnorm=s.clipnorm or None),
                  jit_compile=bool(s.jit))
    model.build()

    checkpoints = os.path.join(run_dir, "checkpoints")
    restored = training.restore_latest(model, checkpoints)
    step = int(model.optimizer.iterations.numpy())
    first_epoch, done_in_epoch = divmod(step, steps_per_epoch)
    if restored:
        print(f"Resuming from {restored['path']}: step {step}, epoch {first_epoch + 1}, "
              f"batch {done_in_epoch} of {steps_per_epoch}.", flush=True)
    examples = tf.data.Dataset.from_tensor_slices(train)
    validation_data = None
    if validation is not None and len(validation["source"]):
        validation_data = tf.data.Dataset.from_tensor_slices(validation).batch(s.batch_size)
    callbacks = [training.CrashSafeCheckpoint(checkpoints, every_steps=s.checkpoint_every)]
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
