"""Dense against top-k graph mixtures as T grows: time, memory and agreement.

For every sequence length T this applies a :class:`glomo_tf.GraphMixture` (both directions,
``--layers`` x ``--heads`` graphs, hierarchical products, mixture weights conditioned on ``h_t``)
to features ``H [B, T, d]`` given graphs whose every row has ``--support`` sources with weight
(random positions and weights; GLoMo's squared-ReLU and entmax rows are sparse like this), in
these forms:

* ``dense``: the graphs ``[B, 2, L, K, T, T]``, ``propagation="auto"`` (the library's default:
  the explicit ``T x T`` products for short sentences, the chains beyond);
* ``dense_chained``: the same with ``propagation="chained"`` (``O(L K T^2 d)``);
* ``top_k=K`` for each ``--top-k``: the compact form ``(indices, weights)``, both
  ``[B, 2, L, K, T, K]`` (:func:`glomo_tf.ops.top_k_sources`), mixed by gather and weighted sum
  (``O(L K T K d)``). With ``K >= --support`` it holds the graphs exactly.

Every (form, T) runs in a fresh subprocess, under ``tf.function`` (``--xla``: with
``jit_compile=True``), forward only or with ``--backward`` also the gradients with respect to
``H`` and the mixture's weights; ``peak_mb`` is the growth of the process's peak resident set
over a baseline taken after the imports and the creation of the inputs (the first call traces
and runs inside it); ``input_mb`` is the size of the graphs handed in. The parent compares each
form's first output with ``dense``'s (``max_abs_diff``: about 1e-6 when ``K >= --support``).

Examples::

    python benchmarks/sparse_mixture.py
    python benchmarks/sparse_mixture.py --seq 48 128 512 1024 --top-k 8 32 --backward --rounds 3
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", type=int, nargs="+", default=[48, 128, 256, 512, 1024],
                   help="sequence lengths T")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--d", type=int, default=64, help="feature width d")
    p.add_argument("--layers", type=int, default=2, help="graph layers L")
    p.add_argument("--heads", type=int, default=4, help="heads K")
    p.add_argument("--mixtures", type=int, default=2, help="mixtures per direction")
    p.add_argument("--support", type=int, default=8, help="sources with weight per row")
    p.add_argument("--top-k", type=int, nargs="+", default=[8, 32],
                   help="top-k forms to time (each K)")
    p.add_argument("--backward", action="store_true", help="also time the gradients")
    p.add_argument("--xla", action="store_true", help="tf.function(jit_compile=True)")
    p.add_argument("--iters", type=int, default=5, help="timed calls per round")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls per round")
    p.add_argument("--rounds", type=int, default=3, help="rounds per form and T")
    p.add_argument("--threads", type=int, default=None,
                   help="TF intra- and inter-op threads (default: all cores)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--worker", nargs=3, metavar=("FORM", "T", "OUT"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if min(a.batch, a.d, a.layers, a.heads, a.mixtures, a.support, a.iters, a.rounds,
           *a.seq, *a.top_k) < 1 or a.warmup < 0:
        p.error("sizes, --support, --top-k, --iters and --rounds must be >= 1")
    return a


def sparse_rows(a, steps, rng):
    """``(indices, weights)`` ``[B, 2, L, K, T, s]``: each row's ``s = min(support, T)`` sources
    (a run of consecutive positions from a random start, wrapping) and row-stochastic weights,
    the heaviest first."""
    import numpy as np

    s = min(a.support, steps)
    shape = (a.batch, 2, a.layers, a.heads, steps)
    start = rng.integers(0, steps, shape)
    indices = (start[..., None] + np.arange(s)) % steps
    weights = rng.uniform(0.05, 1.0, shape + (s,)).astype("float32")
    weights /= weights.sum(-1, keepdims=True)
    order = np.argsort(-weights, axis=-1, kind="stable")
    return (np.take_along_axis(indices, order, -1).astype("int32"),
            np.take_along_axis(weights, order, -1))


def worker(a):
    """Times one form at one T; writes its JSON and first output under OUT."""
    import numpy as np

    form, steps, out = a.worker[0], int(a.worker[1]), a.worker[2]
    import tensorflow as tf

    from glomo_tf import GraphMixture

    _harness.set_threads(tf, a.threads)
    rng = np.random.default_rng(a.seed + steps)
    indices, weights = sparse_rows(a, steps, rng)
    features = rng.normal(size=(a.batch, steps, a.d)).astype("float32")
    if form.startswith("dense"):
        dense = np.zeros(indices.shape[:-1] + (steps,), "float32")
        np.put_along_axis(dense, indices, weights, -1)
        graphs = tf.constant(dense)
        del dense
        input_bytes = graphs.shape.num_elements() * 4
    else:
        k = int(form.split("=")[1])
        if k < indices.shape[-1]:
            indices, weights = indices[..., :k], weights[..., :k]
        else:
            pad = [(0, 0)] * 5 + [(0, k - indices.shape[-1])]
            indices, weights = np.pad(indices, pad), np.pad(weights, pad)
        graphs = (tf.constant(indices), tf.constant(weights))
        input_bytes = indices.nbytes + weights.nbytes
    propagation = "chained" if form == "dense_chained" else "auto"
    import keras

    keras.utils.set_random_seed(a.seed)  # the same mixture weights in every form's process
    mix = GraphMixture(a.mixtures, propagation=propagation)
    features = tf.constant(features)
    mix(features, graphs)  # builds the weights
    target = tf.constant(rng.normal(size=(a.batch, steps, 2, a.mixtures, a.d)), "float32")

    def forward(h, g):
        return mix(h, g)

    def forward_backward(h, g):
        with tf.GradientTape() as tape:
            tape.watch(h)
            loss = tf.reduce_sum(mix(h, g) * target)
        return tape.gradient(loss, [h] + mix.trainable_weights)

    call = tf.function(forward_backward if a.backward else forward, jit_compile=a.xla)
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    first = call(features, graphs)
    first_call = time.perf_counter() - start
    output = mix(features, graphs).numpy()
    rounds = []
    for _ in range(a.rounds):
        rounds.append(_harness.median_seconds(
            lambda _: [x.numpy() for x in tf.nest.flatten(call(features, graphs))][0],
            range(a.warmup + a.iters), a.warmup))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    del first
    np.save(os.path.join(out, f"{form}_{steps}.npy"), output)
    result = {"ms_median": round(1000 * statistics.median(rounds), 3),
              "ms_rounds": [round(1000 * t, 3) for t in rounds],
              "first_call_s": round(first_call, 3),
              "peak_mb": round(max(0, peak - baseline) / 1024, 1),  # ru_maxrss: KiB on Linux
              "input_mb": round(input_bytes / 2 ** 20, 3)}
    with open(os.path.join(out, f"{form}_{steps}.json"), "w") as handle:
        json.dump(result, handle)


def main(argv=None):
    a = parse_args(argv)
    if a.worker:
        worker(a)
        return 0
    import numpy as np

    forms = ["dense", "dense_chained"] + [f"top_k={k}" for k in a.top_k]
    passthrough = [arg for arg in (argv if argv is not None else sys.argv[1:])]
    results = {form: {} for form in forms}
    diffs = {form: {} for form in forms[1:]}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        for steps in a.seq:
            for form in forms:
                cmd = [sys.executable, os.path.abspath(__file__), *passthrough,
                       "--worker", form, str(steps), out]
                done = subprocess.run(cmd, capture_output=True, text=True, cwd=_harness.REPO_ROOT)
                if done.returncode:
                    results[form][str(steps)] = {"error": done.stderr[-500:]}
                    continue
                with open(os.path.join(out, f"{form}_{steps}.json")) as handle:
                    results[form][str(steps)] = json.load(handle)
            reference = np.load(os.path.join(out, f"dense_{steps}.npy"))
            for form in forms[1:]:
                path = os.path.join(out, f"{form}_{steps}.npy")
                if os.path.exists(path):
                    diffs[form][str(steps)] = float(np.abs(np.load(path) - reference).max())
    speedup = {form: {t: round(results["dense"][t]["ms_median"] / r["ms_median"], 3)
                      for t, r in by_t.items() if "ms_median" in r
                      and "ms_median" in results["dense"].get(t, {})}
               for form, by_t in results.items() if form != "dense"}
    import tensorflow as tf

    result = {
        "benchmark": "GraphMixture on dense graphs [B, 2, L, K, T, T] vs the top-k form "
                     "(indices, weights) [B, 2, L, K, T, k] (gather + weighted sum), rows with "
                     "config.support sources; " + ("forward and backward" if a.backward
                                                   else "forward"),
        "recorded": _harness.recorded(tf),
        "config": {k: getattr(a, k) for k in ("seq", "batch", "d", "layers", "heads",
                                              "mixtures", "support", "top_k", "backward", "xla",
                                              "iters", "warmup", "rounds", "threads", "seed")},
        "results": results,
        "dense_ms_over_form_ms": speedup,
        "max_abs_diff_vs_dense": diffs,
        "command": "python benchmarks/sparse_mixture.py " + " ".join(passthrough),
        "wall_s": round(time.perf_counter() - start, 1),
        "tensorflow": tf.__version__,
        "cpu_count": os.cpu_count(),
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
