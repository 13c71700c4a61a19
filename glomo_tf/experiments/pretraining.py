"""Unsupervised GLoMo pretraining on a real corpus, resumable after a crash (``glomo pretrain``).

``run_pretraining(PretrainingConfig(output_dir=..., train=[...], ...))`` runs what the command runs.

A run lives in one output directory::

    RUN/config.json              every setting of the run (checked again when resuming)
    RUN/tokenizer/               vocab.txt + tokenizer.json (the asset used at transfer/serving time)
    RUN/checkpoints/ckpt-N/      crash-safe checkpoints (weights, optimizer state, step, epoch)
    RUN/logs/                    TensorBoard: scalars, hyper-parameters, images of learned graphs
    RUN/pretrainer.keras         the whole model, at the end
    RUN/graph_predictor.keras    the graph predictor alone, for GlomoTransfer (glomo_tf.load_graph_predictor)
    RUN/preset/                  the predictor, its tokenizer and the run's metadata as a preset
                                 (glomo_tf.load_preset, --preset on glomo extract/transfer/export)
    RUN/metrics.json             final validation loss/perplexity, tokens/s, wall time

Running the same command again on the same ``--output-dir`` resumes from the newest checkpoint: the
step counter, the optimizer state and the data position carry on exactly (each epoch's shuffle
order is a function of the seed and the epoch number, and the batches already trained on in the
interrupted epoch are skipped).
"""

import dataclasses
import json
import math
import os
import time
from typing import Optional

from glomo_tf import hparams
from glomo_tf.precision import check_precision, precision_scope
from glomo_tf.experiments.runs import RunDirectory, refuse_changed_settings
from glomo_tf.experiments.settings import (count_or_all, precision_setting, setting,
                                           verbose_setting)

_MODEL = hparams.PRETRAIN_COMMAND
# GlomoPretrainer.from_sizes' arguments among the settings (initial_threshold keeps its default).
MODEL_ARGS = tuple(k for k in _MODEL if k != "initial_threshold")
# Settings that may change between a run and its resumption (everything else must match).
RESUMABLE = ("epochs", "checkpoint_every", "early_stopping", "probe", "verbose", "strategy", "tpu",
             "max_undecodable", "data_licence")
OPTIMIZERS = ("sgd", "adam")
SCHEDULES = ("plateau", "constant", "cosine")
SPLITTERS = ("whitespace", "unicode_script")


# ---------------------------------------------------------------------- settings
@dataclasses.dataclass(kw_only=True)
class PretrainingConfig:
    """Every setting of a pretraining run (``glomo pretrain``'s flags, one field each).

    The model's defaults are :data:`glomo_tf.hparams.PRETRAIN_COMMAND`. :meth:`validated` checks
    the settings and fills the defaults that depend on others; :func:`run_pretraining` runs them.
    """

    # data
    train: Optional[list] = setting(None, "training text files or globs (plain or .gz), one "
                                    "paragraph per line", group="data", metavar="FILE")
    tfds: Optional[str] = setting(None, "a tensorflow-datasets corpus instead of files",
                                  group="data", metavar="NAME")
    tfds_split: str = setting("train", "tfds split of `tfds`, e.g. train or train[:10%]",
                              group="data")
    tfds_text_key: Optional[str] = setting(None, "feature holding the text", group="data")
    validation: Optional[list] = setting(None, "validation text files", group="data",
                                         metavar="FILE")
    validation_fraction: float = setting(0.0, "hold out this fraction of the lines for "
                                         "validation instead", group="data")
    vocab: Optional[str] = setting(None, "an existing tokenizer directory to reuse",
                                   group="data", metavar="DIR")
    vocab_size: int = setting(100_000, "most ids, <pad>/<unk> included", group="data")
    min_count: int = setting(1, "least occurrences for a unit to enter the vocabulary",
                             group="data")
    splitter: str = setting("whitespace", "how text splits into words: at whitespace, or where "
                            "the Unicode script changes", group="data", choices=SPLITTERS)
    lowercase: bool = setting(False, "lowercase the text before splitting (then pass lower-case "
                              "text everywhere after)", group="data")
    subword: bool = setting(False, "WordPiece units instead of words", group="data")
    window: int = setting(200, "units per training window T", group="data")
    shift: int = setting(100, "units between window starts", group="data")
    max_undecodable: float = setting(0.01, "refuse files whose share of lines with invalid "
                                     "UTF-8 is larger", group="data", metavar="SHARE")
    # model (GlomoPretrainer.from_sizes)
    hidden_dim: int = setting(_MODEL["hidden_dim"], "width d of embeddings, features and "
                              "decoder states", group="model")
    num_layers: int = setting(_MODEL["num_layers"], "graph layers L", group="model",
                              flags=("--num-layers", "--layers"))
    num_heads: int = setting(_MODEL["num_heads"], "graph heads K per layer (must divide "
                             "`hidden_dim`)", group="model", flags=("--num-heads", "--heads"))
    head_dim: Optional[int] = setting(_MODEL["head_dim"], "default hidden-dim / 2",
                                      group="model")
    conv_layers: int = setting(_MODEL["conv_layers"], "convolution layers of the key and query "
                               "networks", group="model")
    kernel_size: int = setting(_MODEL["kernel_size"], "width of those convolutions",
                               group="model")
    threshold: str = setting(_MODEL["threshold"], "Eq. 1's threshold: one per query (query) or "
                             "one per head (scalar)", group="model", choices=hparams.THRESHOLDS)
    normalization: str = setting(
        _MODEL["normalization"], "graph normalisation: squared_relu (Eq. 1, learned threshold), "
        "entmax15 (the same form, threshold solved per row), entmax (alpha-entmax, "
        "`entmax_alpha`) or softmax", group="model", choices=hparams.NORMALIZATIONS)
    entmax_alpha: float = setting(
        _MODEL["entmax_alpha"], "alpha of `normalization` entmax, in (1, 2]: towards 1 rows keep "
        "more sources (softmax at 1), 1.5 is entmax15, 2 sparsemax", group="model")
    coupled: bool = setting(_MODEL["coupled"], "the -decouple ablation", group="model")
    composition: str = setting(_MODEL["composition"], "feature composition: gru (the reference "
                               "code's), residual, or projected (value projection, residual and "
                               "LayerNorm)", group="model", choices=hparams.COMPOSITIONS)
    context_length: int = setting(_MODEL["context_length"], "D, units decoded", group="model")
    decoder_layers: int = setting(_MODEL["decoder_layers"], "GRU layers of each direction's "
                                  "decoder", group="model")
    num_positions: Optional[int] = setting(_MODEL["num_positions"], "positions decoded per "
                                           "window, or 'all'", group="model", metavar="N",
                                           flags=("--positions",), parse=str)
    objective: str = setting(_MODEL["objective"], "decode units from each position (unit) or "
                             "across the window's middle (sentence)", group="model",
                             choices=hparams.OBJECTIVES)
    dropout: float = setting(_MODEL["dropout"], "dropout of the predictor and the decoders",
                             group="model")
    live_row_weight: float = setting(
        _MODEL["live_row_weight"], "weight of the hinge that keeps every graph row's best score "
        "above its threshold (0 turns it off: rows that die stay empty)", group="model")
    live_row_margin: float = setting(_MODEL["live_row_margin"], "how far above the threshold a "
                                     "row's best score must stay", group="model")
    # optimisation
    optimizer: str = setting("sgd", "sgd (with `momentum`, the reference code's) or adam",
                             group="optimisation", choices=OPTIMIZERS)
    learning_rate: Optional[float] = setting(None, "default: 1.0 for sgd, 1e-3 for adam",
                                             group="optimisation")
    momentum: float = setting(0.2, "sgd momentum", group="optimisation")
    clipnorm: float = setting(0.25, "global gradient-norm clip", group="optimisation")
    schedule: str = setting("plateau", "plateau: halve the learning rate when validation loss "
                            "stalls", group="optimisation", choices=SCHEDULES)
    epochs: int = setting(10, "epochs in all (a resumed run trains the ones missing)",
                          group="optimisation")
    steps_per_epoch: Optional[int] = setting(None, "default: one pass over the training "
                                             "windows; shorter epochs read them part after part",
                                             group="optimisation")
    batch_size: Optional[int] = setting(None, "windows per replica per step (global = this x "
                                        "replicas; default 32)", group="optimisation")
    global_batch_size: Optional[int] = setting(None, "windows per step over all replicas "
                                               "(instead of `batch_size`)",
                                               group="optimisation")
    early_stopping: int = setting(0, "stop after this many epochs without validation "
                                  "improvement (0: off)", group="optimisation",
                                  metavar="PATIENCE")
    seed: int = setting(0, "seed of the initial weights, the shuffles and the position "
                        "sampling", group="optimisation")
    jit: bool = setting(False, "compile the train step with XLA (float32 on a CPU: XLA computes "
                        "bfloat16 at the float32 rate there)", group="optimisation")
    precision: str = precision_setting("optimisation")
    # run
    output_dir: str = setting(help="run directory (resumed if it exists)", group="run")
    strategy: str = setting("default", "tf.distribute strategy: one device, every local GPU, "
                            "several workers, or a TPU", group="run", choices=hparams.STRATEGIES)
    tpu: Optional[str] = setting(None, "TPU name or address for `strategy` tpu", group="run")
    checkpoint_every: int = setting(200, "steps between crash-safe checkpoints", group="run",
                                    metavar="STEPS")
    probe: Optional[list] = setting(None, "a probe sentence drawn in TensorBoard every epoch "
                                    "(repeatable)", group="run", metavar="TEXT", repeat=True)
    verbose: int = verbose_setting(group="run")
    data_licence: Optional[str] = setting(None, "the corpus' licence, recorded in the preset's "
                                          "metadata.json", group="run", metavar="TEXT")

    def validated(self):
        """A copy with the defaults that depend on other settings filled in (batch size 32,
        learning rate 1.0 for SGD and 1e-3 for Adam, no probes); raises ``ValueError`` naming the
        setting to change."""
        c = dataclasses.replace(self)
        _check_ranges(c)
        check_precision(c.precision)
        if not c.train and not c.tfds:
            raise ValueError("give the corpus with `train` FILE... (text files or globs) or "
                             "`tfds` NAME.")
        if c.train and c.tfds:
            raise ValueError("`train` and `tfds` are alternatives; pass one of them.")
        c.num_positions = count_or_all(c.num_positions, "num_positions")
        if c.batch_size is not None and c.global_batch_size is not None:
            raise ValueError("`batch_size` (per replica) and `global_batch_size` are alternatives.")
        if c.batch_size is None and c.global_batch_size is None:
            c.batch_size = 32
        if c.learning_rate is None:
            c.learning_rate = 1.0 if c.optimizer == "sgd" else 1e-3
        hparams.check_entmax_alpha(c.entmax_alpha, "`entmax_alpha`", "`normalization` softmax")
        if c.live_row_weight < 0 or c.live_row_margin < 0:
            raise ValueError("`live_row_weight` and `live_row_margin` must be >= 0.")
        if c.window <= c.context_length:
            raise ValueError(f"`window` ({c.window}) must be longer than `context_length` "
                             f"({c.context_length}).")
        hparams.check_heads_divide(c.hidden_dim, c.num_heads, ("`hidden_dim`", "`num_heads`"))
        if c.validation and c.validation_fraction:
            raise ValueError("`validation` and `validation_fraction` are alternatives.")
        if c.probe is None:
            c.probe = []
        return c

    def model_args(self):
        """``GlomoPretrainer.from_sizes``' keyword arguments."""
        return {k: getattr(self, k) for k in MODEL_ARGS}

# Each setting's smallest value (None allowed where the default is None).
_AT_LEAST = dict(hidden_dim=1, num_layers=1, num_heads=1, head_dim=1, conv_layers=0, kernel_size=1,
                 context_length=1, decoder_layers=1, vocab_size=3, min_count=1, window=2, shift=1,
                 epochs=1, steps_per_epoch=1, batch_size=1, global_batch_size=1, momentum=0,
                 clipnorm=0, early_stopping=0, checkpoint_every=1)


def _check_ranges(c):
    """Raises ``ValueError`` naming the first flag whose value is out of range."""
    for name, least in _AT_LEAST.items():
        value = getattr(c, name)
        if value is not None and value < least:
            raise ValueError(f"`{name}` must be at least {least}, got {value}.")
    if not 0.0 <= c.max_undecodable <= 1.0:
        raise ValueError(f"`max_undecodable` must be in [0, 1], got {c.max_undecodable}.")
    for name in ("validation_fraction", "dropout"):
        value = getattr(c, name)
        if not 0.0 <= value < 1.0:
            raise ValueError(f"`{name}` must be in [0, 1), got {value}.")
    if c.learning_rate is not None and c.learning_rate <= 0:
        raise ValueError(f"`learning_rate` must be > 0, got {c.learning_rate}.")


def check_resumable(saved, current):
    """Raises ``ValueError`` when a resumed run was started with different settings."""
    if "precision" not in saved:  # a run directory written before --precision
        saved = dict(saved)
        saved["precision"] = "mixed_bfloat16" if saved.pop("mixed_precision", False) \
            else "float32"
    if "entmax_alpha" not in saved:  # a run directory written before --entmax-alpha
        saved = dict(saved, entmax_alpha=_MODEL["entmax_alpha"])
    refuse_changed_settings(saved, current, RESUMABLE, "the run directory holds a run",
                            "Resume with the same settings, or start a new run with another "
                            "`output_dir`.", paths=("train", "validation", "vocab"))


def make_optimizer(s):
    """The run's optimizer (SGD with momentum or Adam, global gradient-norm clip) of a
    :class:`PretrainingConfig`."""
    import keras

    from glomo_tf.training import clip_summed_gradient
    clip = s.clipnorm or None
    if s.optimizer == "sgd":
        optimizer = keras.optimizers.SGD(s.learning_rate, momentum=s.momentum,
                                         global_clipnorm=clip)
    else:
        optimizer = keras.optimizers.Adam(s.learning_rate, global_clipnorm=clip)
    # --clipnorm then means the same under every --strategy (Keras clips each replica's share).
    return clip_summed_gradient(optimizer)


# ---------------------------------------------------------------------- data
def load_corpus(s, check_encoding=True):
    """The lines of the run's corpus (``train`` files or ``tfds``); with ``check_encoding``, files
    whose share of lines with invalid UTF-8 exceeds ``max_undecodable`` are refused (see
    :func:`check_decodable`: one more pass over the files, which a resumed run skips)."""
    from glomo_tf.data import corpus
    try:
        if s.tfds:
            return corpus.tfds_lines(s.tfds, s.tfds_split, text_key=s.tfds_text_key)
        lines = corpus.text_lines(s.train)
        if check_encoding:
            check_decodable(s.train, s.max_undecodable)
        return lines
    except (ValueError, FileNotFoundError, ImportError, TypeError) as error:
        raise ValueError(str(error)) from None


def check_decodable(patterns, max_share):
    """Counts the lines of ``patterns`` that are not valid UTF-8: says how many when some are
    (they are read with U+FFFD in place of the bad bytes) and raises ``ValueError`` when their
    share exceeds ``max_share`` (binary files, another encoding)."""
    from glomo_tf.data import corpus

    found = corpus.count_undecodable(patterns)
    if not found.lines_with_errors:
        return found
    share = found.lines_with_errors / max(found.lines, 1)
    summary = (f"{found.lines_with_errors} of {found.lines} lines ({100 * share:.1f}%) hold bytes "
               f"that are not UTF-8 ({found.replaced_characters} replaced by U+FFFD)")
    if share > max_share:
        raise ValueError(f"{summary}: is the corpus text in UTF-8? Convert it (e.g. iconv -t "
                         f"UTF-8), or pass `max_undecodable` {share:.2f} to train on it anyway.")
    print(f"Note: {summary}.", flush=True)
    return found


def load_or_build_tokenizer(s, lines, run_dir):
    """The run's tokenizer: the saved one when resuming, else ``--vocab``, else built (and saved
    by the chief; other workers build the same one from the same corpus, and never read a
    directory the chief may be writing)."""
    from glomo_tf import training
    from glomo_tf.data.vocabulary import Tokenizer
    saved = os.path.join(run_dir, "tokenizer")
    resumed = RunDirectory(run_dir).resuming and os.path.isfile(os.path.join(saved, "vocab.txt"))
    source = saved if resumed else s.vocab
    if source:
        try:
            tokenizer = Tokenizer.load(source)
        except (ValueError, FileNotFoundError, OSError) as error:
            raise ValueError(f"cannot load the tokenizer from {source}: {error}") from None
        if not resumed and training.is_chief():  # the run holds its tokenizer, as when built
            tokenizer.save(saved)
        return tokenizer
    print(f"Building the vocabulary (at most {s.vocab_size} units) ...", flush=True)
    start = time.perf_counter()
    tokenizer = Tokenizer.build(lines, max_size=s.vocab_size, min_count=s.min_count,
                                splitter=s.splitter, lowercase=s.lowercase,
                                subword=s.subword)
    where = ""
    if training.is_chief():
        tokenizer.save(saved)
        where = f" -> {saved}"
    print(f"  {tokenizer.vocabulary_size} units in {time.perf_counter() - start:.1f}s{where}")
    return tokenizer


# Examples in the shuffle buffer of each epoch (epoch_stream).
SHUFFLE_BUFFER = 10_000


def epochs_to_read(count, per_epoch, global_batch):
    """How many epochs of ``per_epoch`` examples read a corpus of ``count`` when they are shorter
    than it (less a partial batch) and :func:`epoch_stream` reads it part after part; ``None``
    when each epoch is the whole corpus (or ``count`` is unknown)."""
    if not count or per_epoch + global_batch > count:
        return None
    return -(-count // per_epoch)


def epoch_stream(examples, global_batch, steps_per_epoch, seed, first_epoch, last_epoch,
                 skip_batches=0, count=None):
    """Batches of epochs ``first_epoch .. last_epoch - 1``, each shuffled by ``(seed, epoch)``.

    An epoch of ``S`` steps of ``B`` examples as long as the corpus (``count`` examples, or the
    dataset's cardinality when known), less a partial batch, or longer, is the corpus shuffled in
    a buffer of ``SHUFFLE_BUFFER`` examples (and repeated as needed). A shorter epoch ``e`` holds
    the examples ``e S B .. (e + 1) S B - 1`` of the corpus repeated end to end (modulo
    ``count``), shuffled in the same buffer: such epochs walk through the corpus one after the
    other, so every example is trained on before any comes back. Each epoch depends only on the
    seed and its number, so a resumed run sees exactly the batches it would have seen; the first
    ``skip_batches`` batches (already trained on) are skipped.
    """
    import tensorflow as tf

    per_epoch = steps_per_epoch * global_batch
    if count is None:
        known = int(examples.cardinality().numpy())
        count = known if known > 0 else None

    whole = count is not None and epochs_to_read(count, per_epoch, global_batch) is None

    def one_epoch(epoch):
        def shuffled(dataset):
            return dataset.shuffle(SHUFFLE_BUFFER, seed=seed * 100_003 + epoch,
                                   reshuffle_each_iteration=False)

        if whole:  # an epoch is the corpus (less a partial batch): all of it, each time
            return shuffled(examples).repeat().batch(global_batch, drop_remainder=True) \
                .take(steps_per_epoch)
        start = epoch * per_epoch % count if count else epoch * per_epoch
        part = examples.repeat().skip(start).take(per_epoch)
        return shuffled(part).batch(global_batch, drop_remainder=True)

    stream = one_epoch(first_epoch)
    for epoch in range(first_epoch + 1, last_epoch):
        stream = stream.concatenate(one_epoch(epoch))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    options.deterministic = True
    # The trailing repeat() is never consumed (fit takes exactly the steps asked for); it keeps
    # Keras from reporting the end of a finite dataset as running out of data.
    return stream.skip(skip_batches).repeat().prefetch(tf.data.AUTOTUNE).with_options(options)


# ---------------------------------------------------------------------- the run
def run_pretraining(config):
    """Runs (or resumes) the pretraining a :class:`PretrainingConfig` describes, in its
    ``output_dir``; returns 0. Raises ``ValueError`` for settings or data to change."""
    s = config.validated()  # before TensorFlow loads: a bad setting fails at once
    run_dir = s.output_dir
    RunDirectory(run_dir).open(dataclasses.asdict(s), check_resumable)
    with precision_scope(s.precision):
        return _pretrain(s, run_dir)


def _pretrain(s, run_dir):
    import keras

    from glomo_tf import training
    from glomo_tf.data.corpus import pretraining_datasets
    from glomo_tf.data.vocabulary import check_vocabulary_matches
    from glomo_tf.models.pretrainer import GlomoPretrainer
    from glomo_tf.saving import save_graph_predictor

    started = time.perf_counter()
    keras.utils.set_random_seed(s.seed)
    strategy = training.make_strategy(s.strategy, s.tpu)  # a ConfigurationError is a ValueError
    replicas = strategy.num_replicas_in_sync
    global_batch = s.global_batch_size or s.batch_size * replicas
    if global_batch % replicas:
        raise ValueError(f"`global_batch_size` {global_batch} is not divisible by the "
                         f"{replicas} replicas.")

    first_start = not RunDirectory(run_dir).resuming  # a resumed run's corpus passed the checks already
    lines = load_corpus(s, check_encoding=first_start)
    tokenizer = load_or_build_tokenizer(s, lines, run_dir)
    validation_lines = load_corpus(dataclasses.replace(s, train=s.validation, tfds=None),
                                   check_encoding=first_start) \
        if s.validation else None
    try:
        stream_batches, validation = pretraining_datasets(
            lines, tokenizer, window=s.window, shift=s.shift, batch_size=global_batch,
            validation_fraction=s.validation_fraction, validation_lines=validation_lines,
            seed=s.seed, shuffle_buffer=0)
    except (ValueError, TypeError) as error:
        raise ValueError(str(error)) from None
    windows = stream_batches.unbatch()
    batches = int(stream_batches.cardinality().numpy())  # known when the windows were counted
    window_count = batches * global_batch if batches > 0 else None
    steps_per_epoch = s.steps_per_epoch or _count_batches(stream_batches)
    parts = epochs_to_read(window_count, steps_per_epoch * global_batch, global_batch)
    if parts:
        print(f"{window_count} windows; an epoch of {steps_per_epoch * global_batch} reads the "
              f"next part of them (all in {parts} epochs).", flush=True)

    with strategy.scope():
        model = GlomoPretrainer.from_sizes(tokenizer.vocabulary_size, **s.model_args(),
                                           seed=s.seed)
        model.compile(optimizer=make_optimizer(s), jit_compile=bool(s.jit))
        model.build()
    check_vocabulary_matches(tokenizer, model)

    run = RunDirectory(run_dir)
    checkpoints = run.checkpoints
    step, first_epoch, done_in_epoch = run.restore(model, steps_per_epoch)
    if first_epoch >= s.epochs:
        print(f"Already trained for {s.epochs} epochs ({step} steps); raise --epochs to "
              "train more.")
        _save_outputs(model, run_dir, s, validation, started, save_graph_predictor,
                      tokens_per_s=None, global_batch=global_batch, tokenizer=tokenizer)
        return 0

    callbacks = _callbacks(s, model, tokenizer, run_dir, checkpoints, global_batch, validation)
    fit_kwargs = dict(validation_data=validation, callbacks=callbacks, verbose=s.verbose,
                      shuffle=False)
    if validation is not None:  # a known length keeps Keras from warning at the end of each pass
        fit_kwargs["validation_steps"] = int(validation.reduce(0, lambda n, _: n + 1).numpy())
    history = []
    if done_in_epoch:  # finish the interrupted epoch first
        data = epoch_stream(windows, global_batch, steps_per_epoch, s.seed, first_epoch,
                            first_epoch + 1, skip_batches=done_in_epoch, count=window_count)
        history.append(model.fit(data, initial_epoch=first_epoch, epochs=first_epoch + 1,
                                 steps_per_epoch=steps_per_epoch - done_in_epoch, **fit_kwargs))
        first_epoch += 1
    if first_epoch < s.epochs and not model.stop_training:
        data = epoch_stream(windows, global_batch, steps_per_epoch, s.seed, first_epoch,
                            s.epochs, count=window_count)
        history.append(model.fit(data, initial_epoch=first_epoch, epochs=s.epochs,
                                 steps_per_epoch=steps_per_epoch, **fit_kwargs))
    tokens_per_s = [v for h in history for v in h.history.get("tokens_per_s", [])]
    last_epoch = [v for h in history for v in h.history.get("val_perplexity", [])]
    _save_outputs(model, run_dir, s, validation, started, save_graph_predictor,
                  tokens_per_s=tokens_per_s[-1] if tokens_per_s else None,
                  last_epoch_val_perplexity=last_epoch[-1] if last_epoch else None,
                  global_batch=global_batch, tokenizer=tokenizer)
    return 0


def _count_batches(dataset):
    print("Counting the training windows (pass --steps-per-epoch to skip this) ...", flush=True)
    count = int(dataset.reduce(0, lambda n, _: n + 1).numpy())
    print(f"  {count} batches per epoch")
    return count


def _callbacks(s, model, tokenizer, run_dir, checkpoints, global_batch, validation):
    import keras

    from glomo_tf import training
    callbacks = [
        training.ThroughputLogger(global_batch * s.window),
        training.CrashSafeCheckpoint(checkpoints, every_steps=s.checkpoint_every),
    ]
    if validation is not None and s.schedule == "plateau":
        callbacks.append(keras.callbacks.ReduceLROnPlateau("val_loss", factor=0.5, patience=0,
                                                           verbose=1))
    if s.schedule == "cosine":
        base, total = s.learning_rate, s.epochs
        callbacks.append(keras.callbacks.LearningRateScheduler(
            lambda epoch, lr: 0.5 * base * (1 + math.cos(math.pi * epoch / total))))
    if s.early_stopping:
        callbacks.append(keras.callbacks.EarlyStopping(
            "val_loss" if validation is not None else "loss", patience=s.early_stopping))
    log_dir = os.path.join(run_dir, "logs") if training.is_chief() else \
        os.path.join(run_dir, "logs", f".worker-{os.getpid()}")
    callbacks.append(training.HyperparameterLogger(log_dir, dataclasses.asdict(s)))
    probes = s.probe or training.DEFAULT_PROBES
    callbacks.append(training.GraphImageLogger(log_dir, tokenizer, probes, max_length=s.window))
    callbacks.append(training.StepTensorBoard(log_dir, update_freq=max(1, s.checkpoint_every
                                                                        // 4)))
    return callbacks


def _liveness(model, dataset, batches=4):
    """Live-row shares of the learned graphs on a few validation batches (see ops.live_rows)."""
    import numpy as np

    from glomo_tf import ops
    shares = []
    for batch in dataset.take(batches):
        ids = batch[0] if isinstance(batch, tuple) else batch
        outputs = model.graph_predictor(ids, training=False)
        shares.append(ops.live_rows(outputs["graphs"], outputs["padding_mask"]).numpy())
    if not shares:
        return {}
    live = np.mean(shares, axis=0)  # [2, L, K]
    return {"live_rows": {d: np.round(live[z], 3).tolist()
                          for z, d in enumerate(hparams.DIRECTIONS)},
            "dead_graphs": int((live == 0).sum())}


def _save_outputs(model, run_dir, s, validation, started, save_graph_predictor, tokens_per_s,
                  last_epoch_val_perplexity=None, global_batch=None, tokenizer=None):
    """Evaluates the final model on the validation windows and writes the run's outputs.

    With sampled decoding positions (``num_positions``), each evaluation decodes from other
    positions, so this final evaluation's perplexity differs a little from the one the progress
    bar showed after the last epoch; metrics.json keeps both and the run says which is which.
    """
    from glomo_tf import training
    metrics = {"steps": int(model.optimizer.iterations.numpy()),
               "train_tokens_per_s": tokens_per_s,
               "wall_time_s": round(time.perf_counter() - started, 1)}
    if validation is not None:  # on every worker: evaluate's collective ops need them all
        result = model.evaluate(validation, verbose=0, return_dict=True)
        metrics.update({"val_loss": float(result["loss"]),
                        "val_perplexity": float(result["perplexity"])})
        if last_epoch_val_perplexity is not None:
            metrics["last_epoch_val_perplexity"] = float(last_epoch_val_perplexity)
        metrics.update(_liveness(model, validation))
    if not training.is_chief():
        return
    model.save(os.path.join(run_dir, "pretrainer.keras"))
    save_graph_predictor(model.graph_predictor, os.path.join(run_dir, "graph_predictor.keras"))
    with open(os.path.join(run_dir, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    _save_preset(model, tokenizer, run_dir, s, metrics, global_batch)
    print(json.dumps(metrics))
    if "last_epoch_val_perplexity" in metrics and s.num_positions is not None:
        print(f"Validation perplexity of the final model: {metrics['val_perplexity']:.2f} (a "
              f"fresh evaluation; the bar's {metrics['last_epoch_val_perplexity']:.2f} after the "
              f"last epoch decoded from other sampled positions: --positions {s.num_positions}).")
    print(f"Saved {run_dir}/pretrainer.keras, graph_predictor.keras, tokenizer/ and preset/.")


def _save_preset(model, tokenizer, run_dir, s, metrics, global_batch):
    """``RUN/preset``: the predictor and tokenizer with what the run knows about them."""
    from glomo_tf.presets import save_preset
    corpus = ([os.path.basename(path) for path in s.train] if s.train
              else [f"tfds:{s.tfds}/{s.tfds_split}"])
    steps = metrics["steps"]
    save_preset(model.graph_predictor, tokenizer, os.path.join(run_dir, "preset"),
                metadata={"corpus": corpus, "data_licence": s.data_licence,
                          "training_steps": steps,
                          "tokens_seen": steps * global_batch * s.window if global_batch else None,
                          "validation_perplexity": metrics.get("val_perplexity"),
                          "made_by": "glomo pretrain"})


