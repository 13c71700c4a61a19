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

The settings are :class:`~glomo_tf.experiments.pretraining_config.PretrainingConfig`'s
(:mod:`glomo_tf.experiments.pretraining_config`), the corpus, tokenizer and epochs
:mod:`glomo_tf.experiments.pretraining_data`'s; this module runs them, and hands on their names.
"""

import dataclasses
import json
import math
import os
import time

from glomo_tf import hparams
from glomo_tf.precision import precision_scope
from glomo_tf.experiments.pretraining_config import (MODEL_ARGS, OPTIMIZERS, RESUMABLE, SCHEDULES,
                                                     SPLITTERS, PretrainingConfig,
                                                     check_resumable)
from glomo_tf.experiments.pretraining_data import (SHUFFLE_BUFFER, check_decodable, epoch_stream,
                                                   epochs_to_read, load_corpus,
                                                   load_or_build_tokenizer)
from glomo_tf.experiments.runs import RunDirectory

__all__ = [
    "MODEL_ARGS", "OPTIMIZERS", "RESUMABLE", "SCHEDULES", "SHUFFLE_BUFFER", "SPLITTERS",
    "PretrainingConfig", "check_decodable", "check_resumable", "epoch_stream", "epochs_to_read",
    "load_corpus", "load_or_build_tokenizer", "make_optimizer", "run_pretraining",
]


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
