"""Training infrastructure: distribution strategies, crash-safe checkpoints, progress and logging.

Checkpoints are written with Keras's own weight saving (``model.save_weights``, which stores the
optimizer's state too), into a fresh directory that is renamed into place only when complete; a ``latest`` file,
replaced atomically, names the newest complete checkpoint. A run killed at any moment (SIGKILL
included) therefore leaves either the previous checkpoint or the new one, never a torn one.
"""

import json
import os
import shutil
import time

import keras
import tensorflow as tf

from glomo_tf import _keras_private, ops
from glomo_tf.hparams import STRATEGIES

LATEST = "latest"


class ConfigurationError(ValueError):
    """A training setup the user must change (strategy, checkpoint directory, data)."""


# ---------------------------------------------------------------------- strategies
def make_strategy(name="default", tpu=None):
    """Returns the ``tf.distribute`` strategy called ``name``.

    * ``default``: the current (single-device) strategy;
    * ``mirrored``: ``MirroredStrategy`` over every GPU of this machine (or the CPU);
    * ``multi-worker``: ``MultiWorkerMirroredStrategy``; the cluster comes from ``TF_CONFIG``;
    * ``tpu``: ``TPUStrategy`` on the TPU named by ``tpu`` (or found by the cluster resolver).
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi-worker":
        if "TF_CONFIG" not in os.environ:
            raise ConfigurationError(
                "`strategy` multi-worker needs the cluster in the TF_CONFIG environment variable, "
                'e.g. TF_CONFIG=\'{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
                '"task": {"type": "worker", "index": 0}}\' on each worker.')
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except (ValueError, tf.errors.OpError) as error:
            raise ConfigurationError(
                f"`strategy` tpu found no TPU ({error}). Pass `tpu` with the TPU's name or "
                "address, or choose `strategy` default/mirrored.") from None
        return tf.distribute.TPUStrategy(resolver)
    raise ConfigurationError(f"Unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}.")


def is_chief():
    """True on the worker that writes checkpoints and logs (the chief, worker 0, or no cluster)."""
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = config.get("task")
    if not task:
        return True
    if "chief" in config.get("cluster", {}):
        return task.get("type") == "chief"
    return task.get("type") == "worker" and int(task.get("index", 0)) == 0


# ---------------------------------------------------------------------- optimizers
def clip_summed_gradient(optimizer):
    """Makes ``optimizer.global_clipnorm`` clip the gradient summed over replicas, as on one device.

    Keras 3 clips each replica's gradient *before* the all-reduce, so with several replicas the
    clip bounds every replica's share instead of the gradient applied: the step can be up to
    ``replicas`` times longer and points elsewhere than the single-device step (tf.keras refused
    clipping under distribution strategies for this reason, tensorflow/tensorflow#33929). With
    this, the replicas first sum their gradients (one extra all-reduce, only while clipping with
    several replicas) and each scales its own share by the factor of that sum. The optimizer
    stays a plain Keras optimizer (it is saved and loaded as one; a loaded copy clips the Keras
    way again). Returns ``optimizer``.

    Keras has no public hook for this: :func:`glomo_tf._keras_private.replace_gradient_clipping`
    installs it.
    """

    def clip_gradients(grads, keras_clip):
        context = tf.distribute.get_replica_context()
        if (not optimizer.global_clipnorm or context is None
                or context.num_replicas_in_sync == 1):
            return keras_clip(grads)
        present = [g for g in grads if g is not None]
        summed = context.all_reduce(tf.distribute.ReduceOp.SUM, present)
        norm = tf.linalg.global_norm([tf.cast(g, tf.float32) for g in summed])
        clip = tf.constant(optimizer.global_clipnorm, tf.float32)
        scale = clip / tf.maximum(norm, clip)  # the formula of keras.ops.clip_by_global_norm
        return [None if g is None else g * tf.cast(scale, g.dtype) for g in grads]

    return _keras_private.replace_gradient_clipping(optimizer, clip_gradients)


# ---------------------------------------------------------------------- checkpoints
def write_checkpoint(model, directory, metadata, keep=2):
    """Atomically writes ``model``'s weights, optimizer state and ``metadata`` under ``directory``.

    Returns the path of the new checkpoint. Older checkpoints beyond ``keep`` are deleted.
    """
    os.makedirs(directory, exist_ok=True)
    _remove_leftovers(directory)
    step = int(metadata["step"])
    name = f"ckpt-{step:010d}"
    final = os.path.join(directory, name)
    staging = os.path.join(directory, f".{name}.tmp-{os.getpid()}")
    os.makedirs(staging)
    model.save_weights(os.path.join(staging, "model.weights.h5"))  # includes the optimizer
    with open(os.path.join(staging, "metadata.json"), "w") as f:
        json.dump({**metadata, "written_at": time.time()}, f, indent=1)
    for entry in os.listdir(staging):
        _fsync(os.path.join(staging, entry))
    shutil.rmtree(final, ignore_errors=True)
    os.rename(staging, final)
    _atomic_write(os.path.join(directory, LATEST), name + "\n")
    for old in list_checkpoints(directory)[:-keep]:
        shutil.rmtree(os.path.join(directory, old), ignore_errors=True)
    return final


def _remove_leftovers(directory):
    """Deletes what writers killed mid-write left: staging directories and pointer drafts.

    Only the chief writes checkpoints, one at a time, so any leftover belongs to a dead writer.
    """
    for entry in os.listdir(directory):
        path = os.path.join(directory, entry)
        if entry.startswith(".ckpt-") and ".tmp-" in entry:
            shutil.rmtree(path, ignore_errors=True)
        elif entry.startswith(LATEST + ".tmp-"):
            os.remove(path)


def list_checkpoints(directory):
    """Names of the complete checkpoints in ``directory``, oldest first."""
    if not os.path.isdir(directory):
        return []
    names = [n for n in os.listdir(directory)
             if n.startswith("ckpt-") and os.path.isfile(os.path.join(directory, n, "metadata.json"))]
    return sorted(names)


def restore_latest(model, directory):
    """Restores the newest readable checkpoint into a built, compiled ``model``.

    Returns its metadata dict, or None when ``directory`` holds no checkpoint. A checkpoint that
    cannot be read (for example a disk error) is skipped in favour of the previous one.
    """
    names = list_checkpoints(directory)
    pointer = os.path.join(directory, LATEST)
    if os.path.isfile(pointer):
        with open(pointer) as f:
            latest = f.read().strip()
        if latest in names:  # prefer the pointer; newer unnamed ones were never completed
            names = names[:names.index(latest) + 1]
    for name in reversed(names):
        path = os.path.join(directory, name)
        try:
            return _restore(model, path)
        except (OSError, ValueError, KeyError) as error:
            print(f"warning: checkpoint {path} is unreadable ({error}); trying an older one")
    return None


def _restore(model, path):
    with open(os.path.join(path, "metadata.json")) as f:
        metadata = json.load(f)
    if model.optimizer is not None and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)  # so its state is restored too
    model.load_weights(os.path.join(path, "model.weights.h5"))
    metadata["path"] = path
    return metadata


def _fsync(path):
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _atomic_write(path, text):
    staging = f"{path}.tmp-{os.getpid()}"
    with open(staging, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(staging, path)


class CrashSafeCheckpoint(keras.callbacks.Callback):
    """Writes a checkpoint every ``every_steps`` optimizer steps and at the end of training.

    The step counter is the optimizer's ``iterations``, so it continues across restarts.
    Only the chief worker writes; ``extra_metadata`` (a dict) is stored with every checkpoint.
    """

    def __init__(self, directory, every_steps=500, keep=2, extra_metadata=None):
        super().__init__()
        if every_steps < 1:
            raise ConfigurationError(f"checkpoint interval must be >= 1 step, got {every_steps}.")
        self.directory = directory
        self.every_steps = int(every_steps)
        self.keep = keep
        self.extra_metadata = dict(extra_metadata or {})
        self._epoch = 0
        self._last_saved = None

    def _step(self):
        return int(self.model.optimizer.iterations.numpy())

    def save(self):
        step = self._step()
        if step == self._last_saved or not is_chief():
            return
        write_checkpoint(self.model, self.directory,
                         {"step": step, "epoch": self._epoch, **self.extra_metadata}, self.keep)
        self._last_saved = step

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self._step() % self.every_steps == 0:
            self.save()

    def on_train_end(self, logs=None):
        self.save()


# ---------------------------------------------------------------------- logging
class ThroughputLogger(keras.callbacks.Callback):
    """Adds ``tokens_per_s`` (and ``learning_rate``) to the logs, so the progress bar shows them.

    The rate is the steady one: measured from the end of each epoch's first batch (the first
    batch of a run also traces and compiles the step, seconds that would weigh on the rate for
    the whole epoch); an epoch of one batch reports that batch's rate. Must be placed before the
    progress bar and TensorBoard callbacks (``model.fit`` appends its progress bar after the
    user's callbacks).
    """

    def __init__(self, tokens_per_batch):
        super().__init__()
        self.tokens_per_batch = int(tokens_per_batch)
        self._start = self._first_end = None
        self._batches = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._start, self._first_end, self._batches = time.perf_counter(), None, 0

    def _rate(self):
        now = time.perf_counter()
        if self._batches > 1:
            return (self._batches - 1) * self.tokens_per_batch / max(now - self._first_end, 1e-9)
        return self._batches * self.tokens_per_batch / max(now - self._start, 1e-9)

    def on_train_batch_end(self, batch, logs=None):
        self._batches += 1
        if self._batches == 1:
            self._first_end = time.perf_counter()
        elif logs is not None:  # from the second batch on: the steady rate
            logs["tokens_per_s"] = self._rate()

    def on_epoch_end(self, epoch, logs=None):
        if logs is None or self._start is None:
            return
        logs["tokens_per_s"] = self._rate()
        logs["learning_rate"] = float(keras.ops.convert_to_numpy(
            self.model.optimizer.learning_rate))


class StepTensorBoard(keras.callbacks.TensorBoard):
    """``keras.callbacks.TensorBoard`` whose per-batch scalars are numbered by the optimizer step.

    Keras numbers them from 1 in every ``fit`` call, so a resumed run (or the second ``fit`` of a
    run that finishes an interrupted epoch first) would draw its curves over the earlier steps.
    """

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        self._global_train_batch = int(self.model.optimizer.iterations.numpy())


DEFAULT_PROBES = (
    "the cat that the dog chased ran up the tree",
    "he said that she would arrive after the meeting ended",
)


class HyperparameterLogger(keras.callbacks.Callback):
    """Writes the run's settings to TensorBoard's HParams dashboard when training starts."""

    def __init__(self, log_dir, settings):
        super().__init__()
        self.log_dir = log_dir
        self.settings = settings

    def on_train_begin(self, logs=None):
        from tensorboard.plugins.hparams import api as hp
        values = {k: (v if isinstance(v, (bool, int, float, str)) else json.dumps(v))
                  for k, v in self.settings.items()}
        writer = tf.summary.create_file_writer(os.path.join(self.log_dir, "hparams"))
        with writer.as_default():
            hp.hparams(values)
        writer.close()


class GraphImageLogger(keras.callbacks.Callback):
    """Draws the learned graphs of fixed probe sentences into TensorBoard every epoch.

    One image per probe, direction and graph layer: the graph averaged over heads, with the
    probe's units on both axes (receiving units as rows, sources as columns), under
    ``log_dir/graphs``; and, under ``log_dir/liveness``, the scalars ``live_rows/{direction}``
    (share of the probes' rows that are not empty, over layers and heads) and ``dead_graphs`` (how
    many of the ``2 * L * K`` graphs have no live row on the probes; see ``ops.live_rows``).
    """

    def __init__(self, log_dir, tokenizer, probes, max_length=64):
        super().__init__()
        self.log_dir = log_dir
        self.tokenizer = tokenizer
        self.probes = list(probes)
        self.max_length = max_length
        self._writer = None
        self._liveness_writer = None

    def on_epoch_end(self, epoch, logs=None):
        from glomo_tf import viz
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(os.path.join(self.log_dir, "graphs"))
            self._liveness_writer = tf.summary.create_file_writer(
                os.path.join(self.log_dir, "liveness"))
        ids = self.tokenizer.encode(self.probes, max_length=self.max_length)
        outputs = self.model.graph_predictor(ids, training=False)
        graphs = outputs["graphs"]
        live = ops.live_rows(graphs, outputs["padding_mask"]).numpy()  # [2, L, K]
        graphs = tf.reduce_mean(tf.cast(graphs, tf.float32), axis=3).numpy()  # [B, 2, L, T, T]
        lengths = tf.reduce_sum(tf.cast(ids != 0, tf.int32), axis=1).numpy()
        tokens = self.tokenizer.ids_to_tokens(ids).numpy()
        # record_if(True): a TensorBoard callback with a step-based update_freq leaves a
        # record_if(step % update_freq == 0) active during fit, which would drop these images.
        with self._liveness_writer.as_default(), tf.summary.record_if(True):
            for z, direction in enumerate(("forward", "backward")):
                tf.summary.scalar(f"live_rows/{direction}", float(live[z].mean()), step=epoch)
            tf.summary.scalar("dead_graphs", int((live == 0).sum()), step=epoch)
        self._liveness_writer.flush()
        with self._writer.as_default(), tf.summary.record_if(True):
            for i, n in enumerate(lengths):
                words = [t.decode("utf-8", "replace") for t in tokens[i, :n]]
                for z, direction in enumerate(("forward", "backward")):
                    for layer in range(graphs.shape[2]):
                        image = viz.graph_image(graphs[i, z, layer, :n, :n], words,
                                                title=f"{direction} layer {layer + 1}")
                        tf.summary.image(f"probe{i}/{direction}/layer{layer + 1}",
                                         image[None], step=epoch)
        self._writer.flush()

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._liveness_writer.close()
            self._writer = self._liveness_writer = None
