"""Speed of :class:`glomo_tf.OrderedMemory` on ListOps batches: inference and training steps per
second, with and without XLA, with and without Appendix A.3's dynamic computation threshold.

The recurrence costs ``T x N`` cell calls per batch. The layer already batches what the maths
allows: the attention (Eq. 4.8) over all slots at once, and the memory half of the cell's first
layer (``W1 M_t^i`` of Eq. 4.12) for all slots in one product; only the candidate half runs slot
by slot. This script times the remaining choices:

* ``infer``: the classifier's forward pass (``Embedding -> OrderedMemory -> MLP``) as a
  ``tf.function``; ``infer_dynamic``: the same with ``dynamic_threshold`` (default ``1e-5``, the
  paper's), which skips the cell of a slot that no sequence of the batch reaches;
  ``infer_xla`` / ``infer_xla_dynamic``: the same compiled with XLA (``jit_compile=True``);
* ``train``: ``model.train_on_batch`` (Adam); ``train_xla``: compiled with XLA.

Batches are generated ListOps expressions (seeded), all padded to ``--max-length`` (one shape:
every mode traces and compiles once; padded steps still cost their cells), or each to its own
longest with ``--pad-to-batch`` (every width traced and compiled before the timings).
The dynamic threshold only pays when the attention is sharp, as after training: ``--weights``
loads a trained classifier's weights (e.g. the checkpoint of
``examples/ordered_memory_listops.py``; the flags must match its sizes); without it the weights
are fresh. Rounds interleave the modes so that they see the same machine load; the JSON holds the
median and the per-round times, their spread, steps/s and real tokens/s.

Examples::

    python benchmarks/ordered_memory_speed.py
    python benchmarks/ordered_memory_speed.py \
        --weights runs/ordered_memory_listops/ordered_memory.weights.h5
"""

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402

MODES = ("infer", "infer_dynamic", "infer_xla", "infer_xla_dynamic", "train", "train_xla")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--max-length", type=int, default=40, help="tokens per expression at most")
    p.add_argument("--max-depth", type=int, default=4)
    p.add_argument("--units", type=int, default=48, help="slot width D")
    p.add_argument("--slots", type=int, default=8, help="slots N")
    p.add_argument("--threshold", type=float, default=1e-5, help="the dynamic modes' threshold")
    p.add_argument("--attention", choices=("stick_breaking", "softmax"),
                   default="stick_breaking", help="OrderedMemory's attention normalisation")
    p.add_argument("--weights", default=None, help="a trained classifier's .weights.h5")
    p.add_argument("--pad-to-batch", action="store_true",
                   help="pad each batch to its own longest expression instead of --max-length "
                        "(every width is traced, and compiled, before the timings)")
    p.add_argument("--mode", action="append", choices=MODES, default=None,
                   help="modes to time (repeatable; default all)")
    p.add_argument("--iters", type=int, default=10, help="timed batches per round")
    p.add_argument("--warmup", type=int, default=2, help="untimed batches per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None,
                   help="TF intra- and inter-op threads (default: TensorFlow's, all cores)")
    p.add_argument("--seed", type=int, default=1111)
    a = p.parse_args(argv)
    a.mode = list(dict.fromkeys(a.mode or MODES))
    if min(a.batch, a.units, a.slots, a.iters, a.rounds) < 1 or a.warmup < 0:
        p.error("need batch, units, slots, iters, rounds >= 1 and warmup >= 0")
    if a.weights and not os.path.isfile(a.weights):
        p.error(f"--weights {a.weights} does not exist")
    return a


def build_classifier(keras, OrderedMemory, vocabulary_size, units, slots, threshold,
                     attention):
    ids = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(vocabulary_size, units, mask_zero=True)(ids)
    h = OrderedMemory(units, num_slots=slots, dynamic_threshold=threshold, attention=attention,
                      name="ordered_memory")(x)
    hidden = keras.layers.Dense(units, activation="relu")(h)
    return keras.Model(ids, keras.layers.Dense(10)(hidden))


def main(argv=None):
    started = time.perf_counter()
    a = parse_args(argv)
    import keras
    import numpy as np
    import tensorflow as tf

    _harness.set_threads(tf, a.threads)
    sys.path.insert(0, _harness.REPO_ROOT)
    from glomo_tf import OrderedMemory
    from glomo_tf.data.listops import VOCABULARY, encode_listops, generate_listops

    examples = generate_listops(a.batch * (a.warmup + a.iters), seed=a.seed,
                                max_depth=a.max_depth, max_length=a.max_length)
    batches, real_tokens = [], 0
    for start in range(0, len(examples), a.batch):
        # Padded to --max-length: one shape, one trace (and one XLA compilation); or to the
        # batch's longest (--pad-to-batch; with --batch 1 no padding at all).
        ids, labels = encode_listops(examples[start:start + a.batch],
                                     None if a.pad_to_batch else a.max_length)
        batches.append((ids, labels))
    real_tokens = sum(int((ids > 0).sum()) for ids, _ in batches[a.warmup:])
    timed_batches = len(batches) - a.warmup

    steps, first = {}, {}
    for mode in a.mode:
        keras.utils.set_random_seed(a.seed)
        threshold = a.threshold if mode.endswith("dynamic") else None
        model = build_classifier(keras, OrderedMemory, len(VOCABULARY), a.units, a.slots,
                                 threshold, a.attention)
        if a.weights:
            model.load_weights(a.weights)
        xla = "xla" in mode
        if mode.startswith("train"):
            model.compile(keras.optimizers.Adam(1e-3),
                          keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                          jit_compile=xla)

            def step(batch, model=model):
                return float(model.train_on_batch(*batch))  # NumPy loss: the step has finished
        else:
            forward = tf.function(lambda ids, model=model: model(ids, training=False),
                                  jit_compile=xla, reduce_retracing=True)

            def step(batch, forward=forward):
                return forward(tf.constant(batch[0])).numpy()
        for batch in batches if a.pad_to_batch else batches[:1]:
            step(batch)  # traces (and compiles) every shape: out of the timings
        steps[mode] = step
        if not mode.startswith("train"):
            first[mode] = np.concatenate([step(b) for b in batches[:2]])

    per_round = {mode: [] for mode in a.mode}
    for _ in range(a.rounds):
        for mode in a.mode:
            per_round[mode].append(_harness.median_seconds(steps[mode], batches, a.warmup))
    med = {m: statistics.median(ts) for m, ts in per_round.items()}
    tokens_per_batch = real_tokens / timed_batches
    agreement, accuracy = {}, {}
    labels = np.concatenate([b[1] for b in batches[:2]])
    for mode, logits in first.items():  # trained weights (--weights) score above chance
        accuracy[mode] = round(float(np.mean(np.argmax(logits, -1) == labels)), 4)
    if "infer" in first:
        for mode, logits in first.items():
            agreement[mode] = float(np.abs(logits - first["infer"]).max())
    result = {
        "benchmark": "OrderedMemory classifier (Embedding -> OrderedMemory -> Dense -> Dense) on "
                     "generated ListOps batches padded to max_length (padded steps cost as much "
                     "as real ones)",
        "recorded": _harness.recorded(tf),
        "config": {k: getattr(a, k) for k in ("batch", "max_length", "max_depth", "units",
                                              "slots", "threshold", "attention", "weights",
                                              "pad_to_batch", "mode", "iters", "warmup",
                                              "rounds", "seed")},
        "batch_shape": list(batches[0][0].shape),
        "mean_batch_width": round(float(np.mean([b[0].shape[1] for b in batches])), 1),
        "real_tokens_per_batch": round(tokens_per_batch, 1),
        "ms_per_step_median": {m: round(1000 * t, 2) for m, t in med.items()},
        "ms_per_step_rounds": {m: [round(1000 * t, 2) for t in ts] for m, ts in per_round.items()},
        "ms_per_step_spread": {m: [round(1000 * min(ts), 2), round(1000 * max(ts), 2)]
                               for m, ts in per_round.items()},
        "steps_per_s": {m: round(1 / t, 2) for m, t in med.items()},
        "tokens_per_s": {m: round(tokens_per_batch / t, 1) for m, t in med.items()},
        "max_abs_logit_difference_vs_infer": agreement,
        "accuracy_first_two_batches": accuracy,
        "command": "python benchmarks/ordered_memory_speed.py "
                   + " ".join(sys.argv[1:] if argv is None else argv),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                    "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
                    "note": "0 = TensorFlow's default (all cores)", "cpu_count": os.cpu_count()},
    }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
    sys.exit(0)
