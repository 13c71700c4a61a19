"""What :class:`glomo_tf.GlomoTransfer` adds to a downstream training step, against self-attention.

Three tiny classifiers with the same embedding, pooling and output layer, differing only in the
layer between them:

* ``none``:  ``Embedding -> GlobalAveragePooling1D -> Dense``;
* ``glomo``: ``Embedding -> GlomoTransfer -> GlobalAveragePooling1D -> Dense``, the transfer layer
  holding a frozen :class:`glomo_tf.GraphPredictor` (``--d`` wide, ``--layers`` graph layers,
  ``--heads`` heads, fresh weights: the cost does not depend on them) that computes the graphs of
  every batch in inference mode, mixed (``--mixtures`` per direction, conditioned weights,
  hierarchical products) into the embeddings with the gated fusion;
* ``mha``: ``Embedding -> keras.layers.MultiHeadAttention`` self-attention (``--heads`` heads of
  ``d // heads``, so the same width ``d``) ``-> GlobalAveragePooling1D -> Dense``.

Each model is compiled (Adam, sparse categorical cross-entropy; ``jit_compile`` from ``--xla``) and
``model.train_on_batch`` is timed on random token ids with every position real (the call returns
the loss as NumPy, so the step has finished). Rounds interleave the three models so that they see
the same machine load. The JSON holds the median ms per step of each model, the cost each layer
adds over ``none``, and the ratio ``(glomo - none) / (mha - none)``, of the medians and round by
round. It also checks that the frozen predictor's weights did not change.

Examples::

    python benchmarks/transfer_overhead.py
    python benchmarks/transfer_overhead.py --batch 32 --seq 64 --d 128 --layers 2 --heads 4
    python benchmarks/transfer_overhead.py --xla --iters 20 --rounds 5
    python benchmarks/transfer_overhead.py --propagation chained  # the O(T^2) form at any T
"""

import argparse
import json
import os
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402

VARIANTS = ("none", "glomo", "mha")
NUM_CLASSES = 2


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _harness.add_model_arguments(p)
    p.add_argument("--mixtures", type=int, default=2, help="GlomoTransfer mixtures per direction")
    p.add_argument("--propagation", choices=("auto", "chained", "explicit"), default="auto",
                   help="GlomoTransfer's propagation (how M H is computed; default auto)")
    p.add_argument("--xla", action="store_true", help="compile the models with jit_compile=True")
    p.add_argument("--iters", type=int, default=10, help="timed steps per round")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per round")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds; each times every model (interleaved)")
    p.add_argument("--threads", type=int, default=None,
                   help="TF intra- and inter-op threads (default: TensorFlow's, all cores)")
    p.add_argument("--seed", type=int, default=1111)
    a = p.parse_args(argv)
    a.head_dim = a.head_dim or a.d // 2
    if min(a.batch, a.seq, a.d, a.layers, a.heads, a.mixtures, a.iters, a.rounds) < 1 \
            or a.warmup < 0:
        p.error("need batch, seq, d, layers, heads, mixtures, iters, rounds >= 1, warmup >= 0")
    if a.d % a.heads:
        p.error("--d must be a multiple of --heads (MultiHeadAttention key_dim = d // heads)")
    return a


def build_model(a, variant, keras):
    from glomo_tf import GlomoTransfer, GraphPredictor

    ids = keras.Input((None,), dtype="int32", name="ids")
    h = keras.layers.Embedding(a.vocab, a.d, mask_zero=True, name="embedding")(ids)
    predictor = None
    if variant == "glomo":
        predictor = GraphPredictor(
            vocabulary_size=a.vocab, hidden_dim=a.d, num_layers=a.layers, num_heads=a.heads,
            head_dim=a.head_dim, conv_layers=a.conv_layers, kernel_size=a.kernel,
            name="graph_predictor")
        h = GlomoTransfer(predictor, num_mixtures=a.mixtures, propagation=a.propagation,
                          name="glomo_transfer")([h, ids])
    elif variant == "mha":
        h = keras.layers.MultiHeadAttention(a.heads, a.d // a.heads, name="mha")(h, h)
    pooled = keras.layers.GlobalAveragePooling1D(name="pool")(h)
    logits = keras.layers.Dense(NUM_CLASSES, name="classifier")(pooled)
    model = keras.Model(ids, logits, name=f"classifier_{variant}")
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=a.xla)
    return model, predictor


def main(argv=None):
    a = parse_args(argv)
    import numpy as np
    import keras
    import tensorflow as tf

    _harness.set_threads(tf, a.threads)
    sys.path.insert(0, _harness.REPO_ROOT)

    rng = np.random.default_rng(a.seed)
    batches = [(rng.integers(1, a.vocab, (a.batch, a.seq)).astype("int32"),
                rng.integers(0, NUM_CLASSES, (a.batch,)).astype("int32"))
               for _ in range(a.warmup + a.iters)]

    models, steps, first_loss, params = {}, {}, {}, {}
    predictor, predictor_before = None, None
    for variant in VARIANTS:
        keras.utils.set_random_seed(a.seed)
        model, p = build_model(a, variant, keras)
        if p is not None:
            predictor = p
            predictor_before = [w.numpy().copy() for w in predictor.weights]

        def step(batch, model=model):
            return float(model.train_on_batch(*batch))  # NumPy loss: the step has finished

        models[variant], steps[variant] = model, step
        first_loss[variant] = round(step(batches[0]), 4)  # traces; out of the timings
        params[variant] = {
            "trainable": int(sum(np.prod(w.shape) for w in model.trainable_weights)),
            "non_trainable": int(sum(np.prod(w.shape) for w in model.non_trainable_weights))}

    per_round = {v: [] for v in VARIANTS}
    for _ in range(a.rounds):
        for variant in VARIANTS:
            per_round[variant].append(_harness.median_seconds(steps[variant], batches, a.warmup))
    predictor_unchanged = all(np.array_equal(before, w.numpy())
                              for before, w in zip(predictor_before, predictor.weights))

    med = {v: statistics.median(ts) for v, ts in per_round.items()}
    added = {v: med[v] - med["none"] for v in ("glomo", "mha")}
    rounds_ratio = [(g - n) / (m - n) if m != n else None
                    for n, g, m in zip(*(per_round[v] for v in VARIANTS))]
    result = {
        "benchmark": "downstream training step (train_on_batch): Embedding -> [none | "
                     "GlomoTransfer with frozen GraphPredictor | MultiHeadAttention] -> "
                     "GlobalAveragePooling1D -> Dense, no padding",
        "config": {k: getattr(a, k) for k in ("batch", "seq", "d", "vocab", "layers", "heads",
                                              "head_dim", "conv_layers", "kernel", "mixtures",
                                              "propagation", "xla", "iters", "warmup", "rounds",
                                              "seed")},
        "ms_per_step_median": {v: round(1000 * t, 3) for v, t in med.items()},
        "ms_per_step_rounds": {v: [round(1000 * t, 3) for t in ts] for v, ts in per_round.items()},
        "added_ms_per_step": {v: round(1000 * t, 3) for v, t in added.items()},
        "ratio_glomo_added_over_mha_added": (round(added["glomo"] / added["mha"], 3)
                                             if added["mha"] else None),
        "ratio_glomo_added_over_mha_added_rounds": [None if r is None else round(r, 3)
                                                    for r in rounds_ratio],
        "ratio_step_glomo_over_mha": round(med["glomo"] / med["mha"], 3),
        "parameters": params,
        "first_step_loss": first_loss,
        "predictor_frozen_and_unchanged": bool(predictor_unchanged and not predictor.trainable),
        "what_glomo_adds": "per step: the frozen predictor's forward (embeddings, key/query CNNs, "
                           "projections, graphs [B, 2, L, K, T, T]) in inference mode, the mixture "
                           "of 2 L K candidates per direction applied to H (chained, or as mixed "
                           "T x T graphs: config.propagation) and the gated fusion, forward and "
                           "backward (no gradient into the predictor)",
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                    "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
                    "note": "0 = TensorFlow's default (all cores)", "cpu_count": os.cpu_count()},
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
