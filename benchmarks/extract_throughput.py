"""Graph-extraction throughput of :class:`glomo_tf.GraphPredictor`, optionally beside the PyTorch peer.

Times inference-mode extraction (``training=False``) of the graphs ``[B, 2, L, K, T, T]`` of both
directions from random token ids with every position real (no padding), and prints one JSON object
on stdout with tokens/s (``B * T / median iteration``) per execution mode.

With ``--peer PYTHON`` it also runs the PyTorch reference
(``../shared/bench/torch_peer/glomo_torch.py --mode extract``, relative to the repository root) with the
same configuration, as a subprocess interleaved round by round with the glomo_tf timings, so that
both sides see the same machine load; the JSON then holds the peer's tokens/s and the ratio.

What each side computes: glomo_tf computes only the graphs (embedding lookup, key/query CNNs,
projections, thresholds, masked squared-ReLU normalisation). The peer's extract mode runs its
modules' full forward, which also composes the features with the feature-predictor GRU cell at every
graph layer (its ``GraphPredictor.forward`` returns graphs and features; extract keeps the graphs) and
flips the backward direction's graphs back to the original time order. ``--with-features`` makes
glomo_tf do that composition too (:class:`glomo_tf.FeaturePredictor`), so both sides do the same work.

``--precision float32 mixed_bfloat16`` times every mode in both precisions (``function_bf16``:
the predictor under the ``mixed_bfloat16`` policy, what ``glomo extract --precision
mixed_bfloat16`` runs; its graphs are compared with the float32 ones) and the peer in float32 and
under ``torch.autocast`` bfloat16.

Examples::

    python benchmarks/extract_throughput.py
    python benchmarks/extract_throughput.py --mode function xla --precision float32 mixed_bfloat16
    python benchmarks/extract_throughput.py --mode xla --seq 512 --peer /tmp/torchenv/bin/python
    python benchmarks/extract_throughput.py --with-features --peer /tmp/torchenv/bin/python
    python benchmarks/extract_throughput.py --mode xla --seq 512 --top-k 8 --peer ...

``--top-k K`` makes glomo_tf return the compact form instead of the dense graphs: the ``K``
heaviest sources of every receiving unit (:func:`glomo_tf.ops.top_k_sources`, ``(indices,
weights)`` of ``[B, 2, L, K, T, K]``), what ``glomo extract`` and the ``top_k_edges`` serving
signatures hand out; the peer still computes dense graphs (it has no such output).
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402

MODES = ("eager", "function", "xla")
WHAT_EACH_SIDE_COMPUTES = {
    "glomo_tf": "graphs only: embeddings, key/query CNNs, projections, thresholds, masked "
                "squared-ReLU normalisation, both directions -> [B, 2, L, K, T, T]; with "
                "--with-features also the feature-predictor GRU composition at every layer "
                "(what the peer's extract computes)",
    "peer": "its extract forward: the same graphs ([B, 2L, K, T, T]) plus, at every graph layer, "
            "the feature-predictor GRU composition its GraphPredictor.forward also computes "
            "(features discarded), and the flip of the backward graphs",
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _harness.add_model_arguments(p)
    _harness.add_timing_arguments(p)
    p.add_argument("--mode", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--with-features", action="store_true",
                   help="also compose the features along the graphs (GRU cell per layer), as the "
                        "peer's extract mode does: the same work on both sides")
    p.add_argument("--top-k", type=int, default=None, metavar="K",
                   help="glomo_tf outputs the K heaviest sources of every unit (indices, weights) "
                        "instead of the dense graphs (default: dense)")
    a = p.parse_args(argv)
    if a.top_k is not None and not 1 <= a.top_k <= a.seq:
        p.error(f"--top-k must be in [1, --seq], got {a.top_k}")
    return _harness.check_arguments(p, a)


def main(argv=None):
    a = parse_args(argv)
    import numpy as np
    import keras
    import tensorflow as tf

    _harness.set_threads(tf, a.threads)
    sys.path.insert(0, _harness.REPO_ROOT)
    from glomo_tf import FeaturePredictor, GraphPredictor, ops
    from glomo_tf.saving import with_dtype_policy

    keras.utils.set_random_seed(a.seed)
    predictor = GraphPredictor(
        vocabulary_size=a.vocab, hidden_dim=a.d, num_layers=a.layers, num_heads=a.heads,
        head_dim=a.head_dim, conv_layers=a.conv_layers, kernel_size=a.kernel)
    predictor.build((None, None))
    features = FeaturePredictor(a.d, a.heads) if a.with_features else None
    rng = np.random.default_rng(a.seed)
    batches = [tf.constant(rng.integers(1, a.vocab, (a.batch, a.seq)), tf.int32)
               for _ in range(a.warmup + a.iters)]

    def extraction(precision):
        """The extraction function in ``precision``: the same weights, another dtype policy."""
        graph_predictor = with_dtype_policy(predictor, precision)
        composer = None
        if features is not None:
            composer = FeaturePredictor(a.d, a.heads, dtype=precision)
            composer.build((None, None, a.d), (None, 2, a.layers, a.heads, None, None))
            composer.set_weights(features.get_weights())

        def eager(ids):
            out = graph_predictor(ids, training=False)
            graphs = out["graphs"]
            if a.top_k:
                graphs = ops.top_k_sources(graphs, a.top_k)
            if composer is None:
                return graphs
            composed = composer(graph_predictor.embed(ids), out["graphs"], out["padding_mask"])
            return graphs, composed
        return eager

    if features is not None:  # built (and given its weights) before the copies read them
        features(predictor.embed(batches[0]), predictor(batches[0])["graphs"])
    spec = [tf.TensorSpec([None, None], tf.int32)]
    steps = {}
    for key, mode, precision in _harness.timed_modes(a):
        eager = extraction(precision)
        steps[key] = eager if mode == "eager" else tf.function(
            eager, input_signature=spec, jit_compile=mode == "xla")

    # Same graphs whatever the mode (one batch), and the first (compiling) call out of the timings.
    reference = None
    max_abs_diff, rows_off = {}, {}
    dense = predictor(batches[0], training=False)["graphs"].numpy()
    for mode in steps:
        out = tf.nest.flatten(steps[mode](batches[0]))
        # The dense graphs, or the top-k weights (out[1]): the K largest of every dense row.
        graphs = tf.cast(out[1] if a.top_k else out[0], tf.float32).numpy()
        if reference is None:
            reference = graphs
            expected = (a.batch, 2, a.layers, a.heads, a.seq, a.top_k or a.seq)
            if graphs.shape != expected:
                raise AssertionError(f"graphs shape {graphs.shape} != {expected}")
            if a.top_k and not np.allclose(graphs, -np.sort(-dense, axis=-1)[..., :a.top_k],
                                           atol=1e-6):
                raise AssertionError("the top-k weights are not the K largest of each row")
        row_diff = np.max(np.abs(graphs - reference), axis=-1)
        max_abs_diff[mode] = float(np.max(row_diff))
        rows_off[mode] = f"{int(np.sum(row_diff > 1e-3))} of {row_diff.size}"

    # CPU execution is synchronous: the graphs exist when the call returns.
    cmds = _harness.peer_commands(a, "extract")
    per_round, peer_rounds = _harness.interleaved(
        a, lambda key: _harness.median_seconds(steps[key], batches, a.warmup), cmds)
    result = {
        "benchmark": "graph extraction, both directions, inference mode, no padding"
                     + (", with feature composition" if a.with_features else "")
                     + (f", glomo_tf outputs the top-{a.top_k} form" if a.top_k else ""),
        "recorded": _harness.recorded(tf),
        "config": {k: getattr(a, k) for k in ("batch", "seq", "d", "vocab", "layers", "heads",
                                              "head_dim", "conv_layers", "kernel", "iters",
                                              "warmup", "rounds", "seed", "with_features",
                                              "top_k", "precision")},
        "max_abs_diff_vs_" + next(iter(steps)): max_abs_diff,
        "rows_differing_by_over_1e-3": rows_off,
        "diff_note": "freshly initialised weights give scores near 0 (rms ~1e-3), so the rare rows "
                     "with one or two barely positive scores amplify float32 rounding; the "
                     "scores themselves agree to float32 precision",
        "what_each_side_computes": WHAT_EACH_SIDE_COMPUTES,
    }
    result.update(_harness.summary(a, a.batch * a.seq, per_round, peer_rounds, cmds, tf, keras))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
