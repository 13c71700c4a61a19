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

and, on request, variants of ``glomo``:

* ``glomo_cached`` (``--cache``): the same model trained through
  :class:`glomo_tf.models.GraphFedModel` on graphs computed once
  (:func:`glomo_tf.data.graph_cache.compute_graphs`, dense): the step of every epoch after the
  first. What filling the cache costs (the first epoch's extra work) is timed separately,
  ``cache_fill`` in the JSON, in total and per batch;
* ``glomo_cached_candidates`` (``--cache`` too): the cache holding each sentence's candidate
  matrices (``compute_graphs(..., candidates=True)``: graphs and hierarchical products, rows
  first, both directions in one matrix), so a step only mixes them and applies the mixed graphs;
* ``glomo_fused`` (``--fused-normalization``): ``GlomoTransfer(fused_normalization=True)``, the
  online path with the frozen predictor's Eq. 1 normalisation in one XLA cluster;
* ``glomo_topk`` (``--top-k K``): ``GlomoTransfer(top_k=K)``, the predictor run online and its
  graphs cut to the K heaviest sources per unit, mixed by gather + weighted sum;
* ``glomo_cached_topk`` (``--cache --top-k K``): the cache in the top-K form;
* ``glomo_uniform`` (``--uniform``): ``GlomoTransfer(graph_mode="uniform")``, the same mixtures and
  gated fusion (the paper's ``[H ; M_1 H ; ...]`` through two ``Dense`` layers) on one uniform
  graph per direction and no predictor: what the layer costs apart from the graphs.

Each model is compiled (Adam, sparse categorical cross-entropy; ``jit_compile`` from ``--xla``) and
``model.train_on_batch`` is timed on random token ids with every position real (the call returns
the loss as NumPy, so the step has finished). Rounds interleave the models so that they see
the same machine load. The JSON holds the median ms per step of each model, the cost each layer
adds over ``none``, and the ratio ``(glomo - none) / (mha - none)``, of the medians and round by
round. It also checks that the frozen predictor's weights did not change.

Examples::

    python benchmarks/transfer_overhead.py
    python benchmarks/transfer_overhead.py --batch 32 --seq 64 --d 128 --layers 2 --heads 4
    python benchmarks/transfer_overhead.py --xla --iters 20 --rounds 5
    python benchmarks/transfer_overhead.py --propagation chained  # the O(T^2) form at any T
    python benchmarks/transfer_overhead.py --cache --top-k 8 --rounds 5  # cache and top-k too
    python benchmarks/transfer_overhead.py --precision mixed_bfloat16  # every model in bfloat16

``--precision mixed_bfloat16`` builds every model (the predictor, GlomoTransfer and
MultiHeadAttention alike) under the ``mixed_bfloat16`` policy, so the layers are compared in the
same precision.
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

VARIANTS = ("none", "glomo", "mha")
NUM_CLASSES = 2


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _harness.add_model_arguments(p)
    p.add_argument("--mixtures", type=int, default=2, help="GlomoTransfer mixtures per direction")
    p.add_argument("--propagation", choices=("auto", "chained", "explicit"), default="auto",
                   help="GlomoTransfer's propagation (how M H is computed; default auto)")
    p.add_argument("--xla", action="store_true", help="compile the models with jit_compile=True")
    p.add_argument("--precision", choices=_harness.PRECISIONS, default="float32",
                   help="the Keras dtype policy of every model")
    p.add_argument("--iters", type=int, default=10, help="timed steps per round")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per round")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds; each times every model (interleaved)")
    p.add_argument("--threads", type=int, default=None,
                   help="TF intra- and inter-op threads (default: TensorFlow's, all cores)")
    p.add_argument("--seed", type=int, default=1111)
    p.add_argument("--cache", action="store_true",
                   help="also time glomo_cached and glomo_cached_candidates: graphs (or their "
                        "candidate matrices) computed once (glomo_tf.data.graph_cache)")
    p.add_argument("--top-k", type=int, default=None, metavar="K",
                   help="also time glomo_topk (GlomoTransfer(top_k=K)); with --cache also "
                        "glomo_cached_topk (the cache in the top-K form)")
    p.add_argument("--fused-normalization", action="store_true",
                   help="also time glomo_fused: GlomoTransfer(fused_normalization=True), the "
                        "predictor's Eq. 1 normalisation as one XLA cluster (compiled once per "
                        "batch shape; these batches keep theirs), beside the default in the same "
                        "rounds")
    p.add_argument("--uniform", action="store_true",
                   help="also time glomo_uniform: GlomoTransfer(graph_mode='uniform'), the "
                        "mixtures and gated fusion without a predictor or graphs")
    a = p.parse_args(argv)
    if a.top_k is not None and a.top_k < 1:
        p.error("--top-k must be >= 1")
    a.head_dim = a.head_dim or a.d // 2
    if min(a.batch, a.seq, a.d, a.layers, a.heads, a.mixtures, a.iters, a.rounds) < 1 \
            or a.warmup < 0:
        p.error("need batch, seq, d, layers, heads, mixtures, iters, rounds >= 1, warmup >= 0")
    if a.d % a.heads:
        p.error("--d must be a multiple of --heads (MultiHeadAttention key_dim = d // heads)")
    return a


def variants(a):
    """The models to time: none, glomo, mha, then the requested glomo variants."""
    out = list(VARIANTS)
    if a.fused_normalization:
        out.append("glomo_fused")
    if a.cache:
        out += ["glomo_cached", "glomo_cached_candidates"]
    if a.top_k:
        out.append("glomo_topk")
    if a.cache and a.top_k:
        out.append("glomo_cached_topk")
    if a.uniform:
        out.append("glomo_uniform")
    return out


def build_model(a, variant, keras):
    from glomo_tf import GlomoTransfer, GraphPredictor

    ids = keras.Input((None,), dtype="int32", name="ids")
    h = keras.layers.Embedding(a.vocab, a.d, mask_zero=True, name="embedding")(ids)
    predictor = None
    if variant == "glomo_uniform":
        h = GlomoTransfer(None, num_mixtures=a.mixtures, graph_mode="uniform",
                          name="glomo_transfer")([h, ids])
    elif variant.startswith("glomo"):
        predictor = GraphPredictor(
            vocabulary_size=a.vocab, hidden_dim=a.d, num_layers=a.layers, num_heads=a.heads,
            head_dim=a.head_dim, conv_layers=a.conv_layers, kernel_size=a.kernel,
            name="graph_predictor")
        top_k = a.top_k if variant == "glomo_topk" else None
        h = GlomoTransfer(predictor, num_mixtures=a.mixtures, propagation=a.propagation,
                          top_k=top_k, fused_normalization=variant == "glomo_fused",
                          name="glomo_transfer")([h, ids])
    elif variant == "mha":
        h = keras.layers.MultiHeadAttention(a.heads, a.d // a.heads, name="mha")(h, h)
    pooled = keras.layers.GlobalAveragePooling1D(name="pool")(h)
    logits = keras.layers.Dense(NUM_CLASSES, name="classifier")(pooled)
    model = keras.Model(ids, logits, name=f"classifier_{variant}")
    if variant.startswith("glomo_cached"):
        from glomo_tf.models import GraphFedModel

        model = GraphFedModel(model)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=a.xla)
    return model, predictor


def main(argv=None):
    wall_start = time.perf_counter()
    a = parse_args(argv)
    import numpy as np
    import keras
    import tensorflow as tf

    _harness.set_threads(tf, a.threads)
    sys.path.insert(0, _harness.REPO_ROOT)
    from glomo_tf.precision import precision_scope

    rng = np.random.default_rng(a.seed)
    batches = [(rng.integers(1, a.vocab, (a.batch, a.seq)).astype("int32"),
                rng.integers(0, NUM_CLASSES, (a.batch,)).astype("int32"))
               for _ in range(a.warmup + a.iters)]

    names = variants(a)
    models, steps, first_loss, params, inputs = {}, {}, {}, {}, {}
    predictor, predictor_before, cache_fill = None, None, {}
    for variant in names:
        keras.utils.set_random_seed(a.seed)
        with precision_scope(a.precision):
            model, p = build_model(a, variant, keras)
        if variant == "glomo":
            predictor = p
            predictor_before = [w.numpy().copy() for w in predictor.weights]
        inputs[variant] = batches
        if variant.startswith("glomo_cached"):
            inputs[variant], cache_fill[variant] = cached_batches(a, p, batches, variant)

        def step(batch, model=model):
            return float(model.train_on_batch(*batch))  # NumPy loss: the step has finished

        models[variant], steps[variant] = model, step
        first_loss[variant] = round(step(inputs[variant][0]), 4)  # traces; out of the timings
        params[variant] = {
            "trainable": int(sum(np.prod(w.shape) for w in model.trainable_weights)),
            "non_trainable": int(sum(np.prod(w.shape) for w in model.non_trainable_weights))}

    per_round = {v: [] for v in names}
    for _ in range(a.rounds):
        for variant in names:
            per_round[variant].append(_harness.median_seconds(steps[variant], inputs[variant],
                                                              a.warmup))
    predictor_unchanged = all(np.array_equal(before, w.numpy())
                              for before, w in zip(predictor_before, predictor.weights))

    # The physical limit: each model's matrix products (forward and backward, counted on its
    # train step's graph) at this CPU's product rate in the run's precision.
    flops = {v: _harness.matmul_flops(tf.function(models[v].train_step).get_concrete_function(
        _as_tensors(tf, inputs[v][0])).graph) for v in names}
    rate = max(_harness.matmul_rate(tf, "float32" if a.precision == "float32"
                                    else "bfloat16").values())
    med = {v: statistics.median(ts) for v, ts in per_round.items()}
    added = {v: med[v] - med["none"] for v in names if v != "none"}
    ratios = {v: round(added[v] / added["mha"], 3) if added["mha"] else None
              for v in names if v.startswith("glomo")}
    ratio_rounds = {v: [round((t - n) / (m - n), 3) if m != n else None
                        for n, t, m in zip(per_round["none"], per_round[v], per_round["mha"])]
                    for v in ratios}
    rounds_ratio = [(g - n) / (m - n) if m != n else None
                    for n, g, m in zip(*(per_round[v] for v in VARIANTS))]
    result = {
        "benchmark": "downstream training step (train_on_batch): Embedding -> [none | "
                     "GlomoTransfer with frozen GraphPredictor | MultiHeadAttention] -> "
                     "GlobalAveragePooling1D -> Dense, no padding",
        "recorded": _harness.recorded(tf),
        "config": {k: getattr(a, k) for k in ("batch", "seq", "d", "vocab", "layers", "heads",
                                              "head_dim", "conv_layers", "kernel", "mixtures",
                                              "propagation", "xla", "iters", "warmup", "rounds",
                                              "seed", "cache", "top_k", "uniform", "threads",
                                              "precision", "fused_normalization")},
        "ms_per_step_median": {v: round(1000 * t, 3) for v, t in med.items()},
        "ms_per_step_rounds": {v: [round(1000 * t, 3) for t in ts] for v, ts in per_round.items()},
        "added_ms_per_step": {v: round(1000 * t, 3) for v, t in added.items()},
        "ratio_glomo_added_over_mha_added": (round(added["glomo"] / added["mha"], 3)
                                             if added["mha"] else None),
        "ratio_glomo_added_over_mha_added_rounds": [None if r is None else round(r, 3)
                                                    for r in rounds_ratio],
        "ratio_step_glomo_over_mha": round(med["glomo"] / med["mha"], 3),
        "ratio_added_over_mha_added": ratios,
        "ratio_added_over_mha_added_rounds": ratio_rounds,
        "ratio_added_over_mha_added_range": {
            v: [min(r), max(r)] if None not in r else None for v, r in ratio_rounds.items()},
        "matmul_flops_per_step": {v: int(f) for v, f in flops.items()},
        "matmul_gflop_per_s_n1024": rate,
        "matmul_bound_added_ms": {v: round((flops[v] - flops["none"]) / (rate * 1e9) * 1000, 2)
                                  for v in names if v != "none"},
        "matmul_bound_note": "what each layer's matrix products (forward and backward) would take "
                             "at this CPU's [1024, 1024] product rate, over the none model's; "
                             "the layer's added time cannot go below it",
        "cache_fill": cache_fill,
        "parameters": params,
        "first_step_loss": first_loss,
        "predictor_frozen_and_unchanged": bool(predictor_unchanged and not predictor.trainable),
        "what_glomo_adds": "per step: the frozen predictor's forward (embeddings, key/query CNNs, "
                           "projections, graphs [B, 2, L, K, T, T]) in inference mode, the mixture "
                           "of 2 L K candidates per direction applied to H (chained, or as mixed "
                           "T x T graphs: config.propagation) and the gated fusion, forward and "
                           "backward (no gradient into the predictor)",
        "command": "python benchmarks/transfer_overhead.py " + " ".join(
            sys.argv[1:] if argv is None else argv),
        "wall_s": round(time.perf_counter() - wall_start, 1),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                    "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
                    "note": "0 = TensorFlow's default (all cores)", "cpu_count": os.cpu_count()},
    }
    print(json.dumps(result, indent=1))
    return 0


def _as_tensors(tf, batch):
    """``(x, y)`` with every array a tensor (a dict of graphs keeps its keys)."""
    return tf.nest.map_structure(tf.convert_to_tensor, batch)


def cached_batches(a, predictor, batches, variant):
    """The batches as ``((ids, graphs...), labels)`` from a cache of their sentences' graphs,
    and what filling it took (the first epoch's extra work): ``{"ms_total", "ms_per_batch",
    "batches", "cache_mb", "exact"}``."""
    from glomo_tf.data import graph_cache

    import numpy as np

    ids = np.concatenate([x for x, _ in batches])
    top_k = a.top_k if variant == "glomo_cached_topk" else None
    start = time.perf_counter()
    cache = graph_cache.compute_graphs(predictor, ids, top_k=top_k, batch_size=a.batch,
                                       candidates=variant == "glomo_cached_candidates")
    seconds = time.perf_counter() - start
    out, row = [], 0
    for x, y in batches:
        graphs = graph_cache.batch_of(cache, range(row, row + len(x)), x.shape[1])
        graphs = graphs if isinstance(graphs, tuple) else (graphs,)  # a dict stays whole
        out.append(((x, *graphs), y))
        row += len(x)
    return out, {"ms_total": round(1000 * seconds, 3),
                 "ms_per_batch": round(1000 * seconds / len(batches), 3),
                 "batches": len(batches), "cache_mb": round(cache.nbytes / 2 ** 20, 3),
                 "exact": cache.exact,
                 "note": "includes tracing the predictor's call once (a first call)"}


if __name__ == "__main__":
    sys.exit(main())
