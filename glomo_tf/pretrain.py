"""``glomo pretrain``: unsupervised GLoMo pretraining on a real corpus, resumable after a crash.

A run lives in one output directory::

    RUN/config.json              every setting of the run (checked again when resuming)
    RUN/tokenizer/               vocab.txt + tokenizer.json (the asset used at transfer/serving time)
    RUN/checkpoints/ckpt-N/      crash-safe checkpoints (weights, optimizer state, step, epoch)
    RUN/logs/                    TensorBoard: scalars, hyper-parameters, images of learned graphs
    RUN/pretrainer.keras         the whole model, at the end
    RUN/graph_predictor.keras    the graph predictor alone, for GlomoTransfer (glomo_tf.load_graph_predictor)
    RUN/metrics.json             final validation loss/perplexity, tokens/s, wall time

Running the same command again on the same ``--output-dir`` resumes from the newest checkpoint: the
step counter, the optimizer state and the data position carry on exactly (each epoch's shuffle
order is a function of the seed and the epoch number, and the batches already trained on in the
interrupted epoch are skipped).
"""

import argparse
import json
import os
import sys
import time

from glomo_tf.cli import UsageError, refuse_changed_settings

MODEL_ARGS = ("hidden_dim", "num_layers", "num_heads", "head_dim", "conv_layers", "kernel_size",
              "threshold", "normalization", "coupled", "composition", "context_length",
              "decoder_layers", "num_positions", "objective", "dropout", "live_row_weight",
              "live_row_margin")
# Settings that may change between a run and its resumption (everything else must match).
RESUMABLE = ("epochs", "checkpoint_every", "early_stopping", "probe", "verbose", "strategy", "tpu")


def register(subparsers):
    p = subparsers.add_parser(
        "pretrain", help="pretrain a GLoMo graph predictor on a text corpus",
        description=__doc__.split("\n\n")[0] + " Run it again with the same --output-dir to resume.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    data = p.add_argument_group("data")
    data.add_argument("--train", nargs="+", metavar="FILE",
                      help="training text files or globs (plain or .gz), one paragraph per line")
    data.add_argument("--tfds", metavar="NAME", help="a tensorflow-datasets corpus instead of files")
    data.add_argument("--tfds-split", default="train")
    data.add_argument("--tfds-text-key", default=None, help="feature holding the text")
    data.add_argument("--validation", nargs="+", metavar="FILE", help="validation text files")
    data.add_argument("--validation-fraction", type=float, default=0.0,
                      help="hold out this fraction of the lines for validation instead")
    data.add_argument("--vocab", metavar="DIR", help="an existing tokenizer directory to reuse")
    data.add_argument("--vocab-size", type=int, default=100_000, help="most ids, <pad>/<unk> included")
    data.add_argument("--min-count", type=int, default=1)
    data.add_argument("--splitter", choices=("whitespace", "unicode_script"), default="whitespace")
    data.add_argument("--lowercase", action="store_true")
    data.add_argument("--subword", action="store_true", help="WordPiece units instead of words")
    data.add_argument("--window", type=int, default=200, help="units per training window T")
    data.add_argument("--shift", type=int, default=100, help="units between window starts")

    model = p.add_argument_group("model")
    model.add_argument("--hidden-dim", type=int, default=256)
    model.add_argument("--num-layers", "--layers", dest="num_layers", type=int, default=3)
    model.add_argument("--num-heads", "--heads", dest="num_heads", type=int, default=8)
    model.add_argument("--head-dim", type=int, default=None, help="default hidden-dim / 2")
    model.add_argument("--conv-layers", type=int, default=4)
    model.add_argument("--kernel-size", type=int, default=3)
    model.add_argument("--threshold", choices=("query", "scalar"), default="query")
    model.add_argument("--normalization", choices=("squared_relu", "softmax", "entmax15"),
                       default="squared_relu",
                       help="graph normalisation: squared_relu (Eq. 1, learned threshold), "
                            "entmax15 (the same form, threshold solved per row) or softmax")
    model.add_argument("--coupled", action="store_true", help="the -decouple ablation")
    model.add_argument("--composition", choices=("gru", "residual", "projected"), default="gru",
                       help="feature composition: gru (the reference code's), residual, or "
                            "projected (value projection, residual and LayerNorm)")
    model.add_argument("--context-length", type=int, default=3, help="D, units decoded")
    model.add_argument("--decoder-layers", type=int, default=2)
    model.add_argument("--positions", dest="num_positions", default="20",
                       help="positions decoded per window, or 'all'")
    model.add_argument("--objective", choices=("unit", "sentence"), default="unit")
    model.add_argument("--dropout", type=float, default=0.0)
    model.add_argument("--live-row-weight", type=float, default=1.0,
                       help="weight of the hinge that keeps every graph row's best score above "
                            "its threshold (0 turns it off: rows that die stay empty)")
    model.add_argument("--live-row-margin", type=float, default=0.1,
                       help="how far above the threshold a row's best score must stay")

    opt = p.add_argument_group("optimisation")
    opt.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    opt.add_argument("--learning-rate", type=float, default=None,
                     help="default: 1.0 for sgd, 1e-3 for adam")
    opt.add_argument("--momentum", type=float, default=0.2, help="sgd momentum")
    opt.add_argument("--clipnorm", type=float, default=0.25, help="global gradient-norm clip")
    opt.add_argument("--schedule", choices=("plateau", "constant", "cosine"), default="plateau",
                     help="plateau: halve the learning rate when validation loss stalls")
    opt.add_argument("--epochs", type=int, default=10)
    opt.add_argument("--steps-per-epoch", type=int, default=None,
                     help="default: one pass over the training windows")
    opt.add_argument("--batch-size", type=int, default=None,
                     help="windows per replica per step (global = this x replicas)")
    opt.add_argument("--global-batch-size", type=int, default=None,
                     help="windows per step over all replicas (instead of --batch-size)")
    opt.add_argument("--early-stopping", type=int, default=0, metavar="PATIENCE",
                     help="stop after this many epochs without validation improvement (0: off)")
    opt.add_argument("--seed", type=int, default=0)
    opt.add_argument("--jit", action="store_true", help="compile the train step with XLA")
    opt.add_argument("--mixed-precision", action="store_true", help="mixed_bfloat16 policy")

    run = p.add_argument_group("run")
    run.add_argument("--output-dir", required=True, help="run directory (resumed if it exists)")
    run.add_argument("--strategy", choices=("default", "mirrored", "multi-worker", "tpu"),
                     default="default")
    run.add_argument("--tpu", default=None, help="TPU name or address for --strategy tpu")
    run.add_argument("--checkpoint-every", type=int, default=200, metavar="STEPS")
    run.add_argument("--probe", action="append", default=None, metavar="TEXT",
                     help="probe sentence drawn in TensorBoard every epoch (repeatable)")
    run.add_argument("--verbose", type=int, choices=(0, 1, 2), default=1,
                     help="1: progress bar, 2: one line per epoch")
    p.set_defaults(func=run_pretrain)


# ---------------------------------------------------------------------- settings
def settings_from_args(args):
    """The run's settings as a JSON-able dict (validated)."""
    s = {k: v for k, v in vars(args).items() if k not in ("func", "command", "version")}
    if not s["train"] and not s["tfds"]:
        raise UsageError("give the corpus with --train FILE... (text files or globs) or --tfds NAME.")
    if s["train"] and s["tfds"]:
        raise UsageError("--train and --tfds are alternatives; pass one of them.")
    positions = str(s["num_positions"]).lower()
    if positions == "all":
        s["num_positions"] = None
    else:
        try:
            s["num_positions"] = int(positions)
        except ValueError:
            raise UsageError(f"--positions must be a positive integer or 'all', got {positions!r}.")
    if s["batch_size"] is not None and s["global_batch_size"] is not None:
        raise UsageError("--batch-size (per replica) and --global-batch-size are alternatives.")
    if s["batch_size"] is None and s["global_batch_size"] is None:
        s["batch_size"] = 32
    if s["learning_rate"] is None:
        s["learning_rate"] = 1.0 if s["optimizer"] == "sgd" else 1e-3
    if s["live_row_weight"] < 0 or s["live_row_margin"] < 0:
        raise UsageError("--live-row-weight and --live-row-margin must be >= 0.")
    if s["window"] <= s["context_length"]:
        raise UsageError(f"--window ({s['window']}) must be longer than --context-length "
                         f"({s['context_length']}).")
    if s["hidden_dim"] % s["num_heads"]:
        raise UsageError(f"--hidden-dim ({s['hidden_dim']}) must be divisible by --num-heads "
                         f"({s['num_heads']}).")
    if s["validation"] and s["validation_fraction"]:
        raise UsageError("--validation and --validation-fraction are alternatives.")
    if s["probe"] is None:
        s["probe"] = []
    return s


def check_resumable(saved, current):
    """Raises a UsageError when a resumed run was started with different settings."""
    refuse_changed_settings(saved, current, RESUMABLE, "the run directory holds a run",
                            "Resume with the same settings, or start a new run with another "
                            "--output-dir.")


def make_optimizer(s):
    import keras

    from glomo_tf.training import clip_summed_gradient
    clip = s["clipnorm"] or None
    if s["optimizer"] == "sgd":
        optimizer = keras.optimizers.SGD(s["learning_rate"], momentum=s["momentum"],
                                         global_clipnorm=clip)
    else:
        optimizer = keras.optimizers.Adam(s["learning_rate"], global_clipnorm=clip)
    # --clipnorm then means the same under every --strategy (Keras clips each replica's share).
    return clip_summed_gradient(optimizer)


# ---------------------------------------------------------------------- data
def load_corpus(s):
    from glomo_tf.data import corpus
    try:
        if s["tfds"]:
            return corpus.tfds_lines(s["tfds"], s["tfds_split"], text_key=s["tfds_text_key"])
        return corpus.text_lines(s["train"])
    except (ValueError, FileNotFoundError, ImportError, TypeError) as error:
        raise UsageError(str(error)) from None


def load_or_build_tokenizer(s, lines, run_dir):
    """The run's tokenizer: the saved one when resuming, else ``--vocab``, else built (and saved
    by the chief; other workers build the same one from the same corpus, and never read a
    directory the chief may be writing)."""
    from glomo_tf import training
    from glomo_tf.data.vocabulary import Tokenizer
    saved = os.path.join(run_dir, "tokenizer")
    resuming = _resuming(run_dir) and os.path.isfile(os.path.join(saved, "vocab.txt"))
    source = saved if resuming else s["vocab"]
    if source:
        try:
            return Tokenizer.load(source)
        except (ValueError, FileNotFoundError, OSError) as error:
            raise UsageError(f"cannot load the tokenizer from {source}: {error}") from None
    print(f"Building the vocabulary (at most {s['vocab_size']} units) ...", flush=True)
    start = time.perf_counter()
    tokenizer = Tokenizer.build(lines, max_size=s["vocab_size"], min_count=s["min_count"],
                                splitter=s["splitter"], lowercase=s["lowercase"],
                                subword=s["subword"])
    where = ""
    if training.is_chief():
        tokenizer.save(saved)
        where = f" -> {saved}"
    print(f"  {tokenizer.vocabulary_size} units in {time.perf_counter() - start:.1f}s{where}")
    return tokenizer


def epoch_stream(windows, global_batch, steps_per_epoch, seed, first_epoch, last_epoch,
                 skip_batches=0):
    """Batches of epochs ``first_epoch .. last_epoch - 1``, each shuffled by ``(seed, epoch)``.

    Every epoch is ``steps_per_epoch`` batches of a shuffle that depends only on the seed and the
    epoch number, so a resumed run sees exactly the batches it would have seen; the first
    ``skip_batches`` batches (already trained on) are skipped.
    """
    import tensorflow as tf

    def one_epoch(epoch):
        shuffled = windows.shuffle(10_000, seed=seed * 100_003 + epoch,
                                   reshuffle_each_iteration=False)
        return shuffled.repeat().batch(global_batch, drop_remainder=True).take(steps_per_epoch)

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
def run_pretrain(args):
    from glomo_tf import training
    s = settings_from_args(args)
    run_dir = s["output_dir"]
    os.makedirs(run_dir, exist_ok=True)
    config_path = os.path.join(run_dir, "config.json")
    # Only a run with a checkpoint is resumed; a directory whose run never got that far (e.g. it
    # stopped on a usage error) starts afresh with the new settings.
    if _resuming(run_dir) and os.path.isfile(config_path):
        with open(config_path) as f:
            check_resumable(json.load(f), s)
    if training.is_chief():  # on a shared file system, one writer
        with open(config_path, "w") as f:
            json.dump(s, f, indent=1)
    return pretrain(s, run_dir)


def _resuming(run_dir):
    from glomo_tf import training
    return bool(training.list_checkpoints(os.path.join(run_dir, "checkpoints")))


def pretrain(s, run_dir):
    import keras
    import tensorflow as tf

    from glomo_tf import training
    from glomo_tf.data.corpus import pretraining_datasets
    from glomo_tf.data.vocabulary import check_vocabulary_matches
    from glomo_tf.models.pretrainer import GlomoPretrainer
    from glomo_tf.saving import save_graph_predictor

    started = time.perf_counter()
    keras.utils.set_random_seed(s["seed"])
    if s["mixed_precision"]:
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        strategy = training.make_strategy(s["strategy"], s["tpu"])
    except training.ConfigurationError as error:
        raise UsageError(str(error)) from None
    replicas = strategy.num_replicas_in_sync
    global_batch = s["global_batch_size"] or s["batch_size"] * replicas
    if global_batch % replicas:
        raise UsageError(f"--global-batch-size {global_batch} is not divisible by the "
                         f"{replicas} replicas.")

    lines = load_corpus(s)
    tokenizer = load_or_build_tokenizer(s, lines, run_dir)
    validation_lines = load_corpus({**s, "train": s["validation"], "tfds": None}) \
        if s["validation"] else None
    try:
        stream_batches, validation = pretraining_datasets(
            lines, tokenizer, window=s["window"], shift=s["shift"], batch_size=global_batch,
            validation_fraction=s["validation_fraction"], validation_lines=validation_lines,
            seed=s["seed"], shuffle_buffer=0)
    except (ValueError, TypeError) as error:
        raise UsageError(str(error)) from None
    windows = stream_batches.unbatch()
    steps_per_epoch = s["steps_per_epoch"] or _count_batches(stream_batches)

    with strategy.scope():
        model = GlomoPretrainer.from_sizes(tokenizer.vocabulary_size,
                                           **{k: s[k] for k in MODEL_ARGS}, seed=s["seed"])
        model.compile(optimizer=make_optimizer(s), jit_compile=bool(s["jit"]))
        model.build()
    try:
        check_vocabulary_matches(tokenizer, model)
    except ValueError as error:
        raise UsageError(str(error)) from None

    checkpoints = os.path.join(run_dir, "checkpoints")
    restored = training.restore_latest(model, checkpoints)
    step = int(model.optimizer.iterations.numpy())
    first_epoch, done_in_epoch = divmod(step, steps_per_epoch)
    if restored:
        print(f"Resuming from {restored['path']}: step {step}, epoch {first_epoch + 1}, "
              f"batch {done_in_epoch} of {steps_per_epoch}.", flush=True)
    if first_epoch >= s["epochs"]:
        print(f"Already trained for {s['epochs']} epochs ({step} steps); raise --epochs to "
              "train more.")
        _save_outputs(model, run_dir, s, validation, started, save_graph_predictor, tokens_per_s=None)
        return 0

    callbacks = _callbacks(s, model, tokenizer, run_dir, checkpoints, global_batch, validation)
    fit_kwargs = dict(validation_data=validation, callbacks=callbacks, verbose=s["verbose"],
                      shuffle=False)
    if validation is not None:  # a known length keeps Keras from warning at the end of each pass
        fit_kwargs["validation_steps"] = int(validation.reduce(0, lambda n, _: n + 1).numpy())
    history = []
    if done_in_epoch:  # finish the interrupted epoch first
        data = epoch_stream(windows, global_batch, steps_per_epoch, s["seed"], first_epoch,
                            first_epoch + 1, skip_batches=done_in_epoch)
        history.append(model.fit(data, initial_epoch=first_epoch, epochs=first_epoch + 1,
                                 steps_per_epoch=steps_per_epoch - done_in_epoch, **fit_kwargs))
        first_epoch += 1
    if first_epoch < s["epochs"] and not model.stop_training:
        data = epoch_stream(windows, global_batch, steps_per_epoch, s["seed"], first_epoch,
                            s["epochs"])
        history.append(model.fit(data, initial_epoch=first_epoch, epochs=s["epochs"],
                                 steps_per_epoch=steps_per_epoch, **fit_kwargs))
    tokens_per_s = [v for h in history for v in h.history.get("tokens_per_s", [])]
    _save_outputs(model, run_dir, s, validation, started, save_graph_predictor,
                  tokens_per_s=tokens_per_s[-1] if tokens_per_s else None)
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
        training.ThroughputLogger(global_batch * s["window"]),
        training.CrashSafeCheckpoint(checkpoints, every_steps=s["checkpoint_every"]),
    ]
    if validation is not None and s["schedule"] == "plateau":
        callbacks.append(keras.callbacks.ReduceLROnPlateau("val_loss", factor=0.5, patience=0,
                                                           verbose=1))
    if s["schedule"] == "cosine":
        base, total = s["learning_rate"], s["epochs"]
        callbacks.append(keras.callbacks.LearningRateScheduler(
            lambda epoch, lr: 0.5 * base * (1 + __import__("math").cos(3.14159265 * epoch / total))))
    if s["early_stopping"]:
        callbacks.append(keras.callbacks.EarlyStopping(
            "val_loss" if validation is not None else "loss", patience=s["early_stopping"]))
    log_dir = os.path.join(run_dir, "logs") if training.is_chief() else \
        os.path.join(run_dir, "logs", f".worker-{os.getpid()}")
    callbacks.append(training.HyperparameterLogger(log_dir, s))
    probes = s["probe"] or training.DEFAULT_PROBES
    callbacks.append(training.GraphImageLogger(log_dir, tokenizer, probes, max_length=s["window"]))
    callbacks.append(training.StepTensorBoard(log_dir, update_freq=max(1, s["checkpoint_every"]
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
                          for z, d in enumerate(("forward", "backward"))},
            "dead_graphs": int((live == 0).sum())}


def _save_outputs(model, run_dir, s, validation, started, save_graph_predictor, tokens_per_s):
    from glomo_tf import training
    metrics = {"steps": int(model.optimizer.iterations.numpy()),
               "train_tokens_per_s": tokens_per_s,
               "wall_time_s": round(time.perf_counter() - started, 1)}
    if validation is not None:  # on every worker: evaluate's collective ops need them all
        result = model.evaluate(validation, verbose=0, return_dict=True)
        metrics.update({"val_loss": float(result["loss"]),
                        "val_perplexity": float(result["perplexity"])})
        metrics.update(_liveness(model, validation))
    if not training.is_chief():
        return
    model.save(os.path.join(run_dir, "pretrainer.keras"))
    save_graph_predictor(model.graph_predictor, os.path.join(run_dir, "graph_predictor.keras"))
    with open(os.path.join(run_dir, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    print(json.dumps(metrics))
    print(f"Saved {run_dir}/pretrainer.keras, graph_predictor.keras and tokenizer/.")


if __name__ == "__main__":
    from glomo_tf.cli import main
    sys.exit(main(["pretrain"] + sys.argv[1:]))
