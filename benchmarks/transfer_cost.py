"""Cost of the transfer mixture vs T: the chained ``GraphMixture`` against forming ``T x T`` products.

For every sequence length T this times the mixture ``M H`` of :class:`glomo_tf.GraphMixture`
applied to features ``H [B, T, d]`` given fixed random row-stochastic graphs ``[B, 2, L, K, T, T]``
(both directions, ``L`` layers, ``K`` heads, hierarchical products included, mixture weights
conditioned on ``h_t``), computed two ways:

* ``chained``: ``GraphMixture(propagation="chained")``, which applies each product
  ``Lambda^l = G^l Lambda^{l-1}`` to ``H`` as a chain ``G^l (G^{l-1} (... H))``:
  ``O(L K T^2 d)`` per direction;
* ``explicit``: ``GraphMixture(propagation="explicit")``, which forms every ``Lambda^l`` as a
  ``T x T`` matrix (batched ``T x T`` by ``T x T`` matmuls, ``O(L K T^3)``) and the mixed graphs
  ``M``, then multiplies ``M`` by ``H`` once.

The library's default, ``propagation="auto"``, takes whichever form needs fewer multiply-adds;
``auto_choice`` in the JSON says which one that is at each T, to be read against the timings.

Both run under ``tf.function`` (and ``tf.function(jit_compile=True)`` with ``--xla``); the forward
pass only, or also the backward pass with ``--backward`` (gradients of a fixed random projection of
the output with respect to ``H`` and the mixture's weights; the graphs are frozen, as in transfer).

Every configuration (method, T, mode, pass) runs in a fresh subprocess, so that its peak memory can
be read from ``resource.getrusage(RUSAGE_SELF).ru_maxrss``: ``peak_mb`` is the growth of the peak
resident set over the first call, from a baseline taken after the imports, the creation of the
inputs and the tracing of the function (with ``--xla`` the first call also compiles). The
subprocess then times ``--rounds`` rounds of ``--iters`` calls (after ``--warmup`` untimed ones)
and saves its first call's outputs; the parent checks, per T, that both methods agree (max abs
diff) and fits the slope of ``log(ms)`` against ``log(T)`` with ``numpy.polyfit`` (about 2 for
``chained`` and 3 for ``explicit`` once T is large against d and the fixed costs).

``explicit`` is skipped for T above ``--max-explicit-T`` and where its estimated memory exceeds
what ``/proc/meminfo`` reports available; the JSON lists what was skipped and why.

Examples::

    python benchmarks/transfer_cost.py
    python benchmarks/transfer_cost.py --seq 128 256 512 --batch 2 --d 128 --heads 8 --backward
    python benchmarks/transfer_cost.py --xla --max-explicit-T 512 --iters 5 --rounds 5
"""

import argparse
import gc
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

METHODS = ("chained", "explicit")
WHAT_EACH_METHOD_COMPUTES = {
    "chained": "GraphMixture(propagation='chained'): G^l_k H for every layer and head, and "
               "Lambda^l_k H as the chain G^l_k (G^{l-1}_k (... H)); conditioned softmax mixture "
               "of the 2 L K candidates per direction and mixture; O(L K T^2 d)",
    "explicit": "GraphMixture(propagation='explicit'): Lambda^l_k = G^l_k Lambda^{l-1}_k as T x T "
                "matrices (batched T x T by T x T matmuls), the same mixture over T x T candidates "
                "giving M [B, 2, mixtures, T, T], then M H; O(L K T^3)",
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", type=int, nargs="+", default=[64, 128, 256, 512, 1024],
                   help="sequence lengths T")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--d", type=int, default=64, help="feature width d of H")
    p.add_argument("--layers", type=int, default=3, help="graph layers L")
    p.add_argument("--heads", type=int, default=4, help="heads K per layer")
    p.add_argument("--mixtures", type=int, default=2, help="mixtures per direction")
    p.add_argument("--backward", action="store_true",
                   help="also time forward + backward (gradients wrt H and the mixture weights)")
    p.add_argument("--xla", action="store_true",
                   help="also time tf.function(jit_compile=True)")
    p.add_argument("--max-explicit-T", dest="max_explicit_t", type=int, default=1024,
                   help="skip the explicit method for longer sequences")
    p.add_argument("--iters", type=int, default=3, help="timed calls per round")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None,
                   help="TF intra- and inter-op threads (default: TensorFlow's, all cores)")
    p.add_argument("--seed", type=int, default=1111)
    # Internal: the subprocess measuring one configuration (method,T,mode,pass) into a folder.
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-dir", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.seq = sorted(set(a.seq))
    if min(a.seq + [a.batch, a.d, a.layers, a.heads, a.mixtures, a.iters, a.rounds]) < 1 \
            or a.warmup < 0:
        p.error("need seq, batch, d, layers, heads, mixtures, iters, rounds >= 1, warmup >= 0")
    a.modes = ["function"] + (["xla"] if a.xla else [])
    a.passes = ["forward"] + (["forward_backward"] if a.backward else [])
    return a


# ---------------------------------------------------------------------------- worker (subprocess)
def make_inputs(a, seq):
    """Features, graphs, output cotangent and mixture weights: fixed by ``(seed, T)``."""
    import numpy as np
    rng = np.random.default_rng([a.seed, seq])
    features = rng.random((a.batch, seq, a.d), dtype=np.float32)
    graphs = rng.random((a.batch, 2, a.layers, a.heads, seq, seq), dtype=np.float32)
    graphs /= graphs.sum(-1, keepdims=True)  # row-stochastic
    cotangent = rng.standard_normal((a.batch, seq, 2, a.mixtures, a.d), dtype=np.float32)
    candidates = 2 * a.layers * a.heads
    limit = (6.0 / (a.d + candidates)) ** 0.5
    weights = {"weight_kernel": rng.uniform(-limit, limit, (a.d, 2, a.mixtures, candidates)),
               "weight_logits": rng.normal(0.0, 0.5, (2, a.mixtures, candidates)),
               "scale": rng.uniform(0.5, 1.5, (2, a.mixtures))}
    return features, graphs, cotangent, weights


def reset_peak_rss():
    """Lowers this process's peak RSS (``ru_maxrss``) to its current RSS, so that the peaks of
    creating the inputs (a NumPy copy of the graphs beside the tensor) do not hide the call's.
    Linux: writing 5 to ``/proc/self/clear_refs``. Returns whether that worked."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def run_worker(a):
    method, seq, mode, pass_ = a.worker.split(",")
    seq = int(seq)
    import numpy as np
    import tensorflow as tf

    _harness.set_threads(tf, a.threads)
    sys.path.insert(0, _harness.REPO_ROOT)
    from glomo_tf import GraphMixture

    features_np, graphs_np, cotangent_np, weights_np = make_inputs(a, seq)
    mixture = GraphMixture(num_mixtures=a.mixtures, conditioned=True, include_products=True,
                           propagation=method)
    mixture.build((None, None, a.d), (None, 2, a.layers, a.heads, None, None))
    for variable in mixture.weights:
        variable.assign(weights_np[variable.name].astype("float32"))
    features, graphs = tf.constant(features_np), tf.constant(graphs_np)
    cotangent = tf.constant(cotangent_np)
    del graphs_np  # the NumPy copy goes; its share of the peak is reset below
    gc.collect()

    def forward(h, g):
        return mixture(h, g)

    def forward_backward(h, g):
        with tf.GradientTape() as tape:
            tape.watch(h)
            out = forward(h, g)
            loss = tf.reduce_sum(out * cotangent)
        grads = tape.gradient(loss, [h] + mixture.trainable_variables)
        return [out] + grads

    fn = tf.function(forward if pass_ == "forward" else forward_backward,
                     jit_compile=mode == "xla")
    fn.get_concrete_function(features, graphs)  # tracing is out of the peak
    # So is the runtime's one-off set-up on a first execution (thread pools, kernel caches).
    tf.function(lambda x: tf.reduce_sum(tf.matmul(x, x)))(tf.ones([8, 8])).numpy()
    peak_reset = reset_peak_rss()
    baseline_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def step(_):
        return [t.numpy() for t in tf.nest.flatten(fn(features, graphs))]  # waits for the work

    t0 = time.perf_counter()
    first = step(None)
    first_call_s = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    names = ["output", "grad_features"] + [f"grad_{v.name}"
                                           for v in mixture.trainable_variables]
    np.savez(os.path.join(a.worker_dir, f"{method}_{seq}_{mode}_{pass_}.npz"),
             **dict(zip(names, first)))
    calls = [None] * (a.warmup + a.iters)
    rounds = [_harness.median_seconds(step, calls, a.warmup) for _ in range(a.rounds)]
    print(json.dumps({"ms_rounds": [round(1000 * t, 3) for t in rounds],
                      "peak_mb": round((peak_kb - baseline_kb) / 1024, 1),
                      "baseline_mb": round(baseline_kb / 1024, 1),
                      "peak_reset": peak_reset,
                      "first_call_s": round(first_call_s, 3)}))
    return 0


# ---------------------------------------------------------------------------- parent
def available_bytes():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def explicit_bytes(a, seq, pass_):
    """Rough float32 working set of the explicit method beyond its inputs: the L K products, the
    2 L K stacked candidates (and a transposed copy for the mixture einsum), the mixed graphs."""
    matrices = a.batch * 2 * (5 * a.layers * a.heads + 2 * a.mixtures)
    return 4 * matrices * seq * seq * (2 if pass_ == "forward_backward" else 1)


def explicit_skip_reason(a, seq, pass_):
    if seq > a.max_explicit_t:
        return f"T {seq} > --max-explicit-T {a.max_explicit_t}"
    need, have = explicit_bytes(a, seq, pass_), available_bytes()
    if have is not None and need > 0.8 * have:
        return (f"estimated {need / 2**20:.0f} MB of T x T products exceeds 80% of the "
                f"{have / 2**20:.0f} MB available")
    return None


def worker_command(a, config, folder):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", config, "--worker-dir", folder,
           "--batch", str(a.batch), "--d", str(a.d), "--layers", str(a.layers),
           "--heads", str(a.heads), "--mixtures", str(a.mixtures), "--iters", str(a.iters),
           "--warmup", str(a.warmup), "--rounds", str(a.rounds), "--seed", str(a.seed)]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    return cmd


def run_config(a, config, folder):
    proc = subprocess.run(worker_command(a, config, folder), capture_output=True, text=True,
                          check=False)
    if proc.returncode:
        tail = proc.stderr.strip().splitlines()[-3:]
        return {"error": f"exit status {proc.returncode}: " + " | ".join(tail)}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def loglog_slope(ms_by_seq):
    import numpy as np
    seqs = sorted(ms_by_seq)
    if len(seqs) < 2:
        return None
    return round(float(np.polyfit(np.log(seqs), np.log([ms_by_seq[s] for s in seqs]), 1)[0]), 3)


def max_abs_diffs(folder, seq, mode, pass_):
    """Per saved array, max |chained - explicit|, or None when either side is missing."""
    import numpy as np
    paths = [os.path.join(folder, f"{m}_{seq}_{mode}_{pass_}.npz") for m in METHODS]
    if not all(os.path.exists(p) for p in paths):
        return None
    with np.load(paths[0]) as chained, np.load(paths[1]) as explicit:
        return {k: float(np.max(np.abs(chained[k] - explicit[k]))) for k in chained.files}


def auto_choice(a):
    """Per T, the form ``GraphMixture(propagation="auto")`` would take for this configuration."""
    sys.path.insert(0, _harness.REPO_ROOT)
    from glomo_tf import GraphMixture

    mixture = GraphMixture(num_mixtures=a.mixtures, conditioned=True, include_products=True)
    return {str(seq): "explicit" if mixture.explicit_is_cheaper(seq, a.d, a.layers, a.heads)
            else "chained" for seq in a.seq}


def main(argv=None):
    a = parse_args(argv)
    if a.worker:
        return run_worker(a)
    from importlib import metadata

    results, diffs, skipped, errors, peak_reset = {}, {}, {}, {}, []
    with tempfile.TemporaryDirectory(prefix="transfer_cost_") as folder:
        for mode in a.modes:
            for pass_ in a.passes:
                setting = f"{mode}/{pass_}"
                per_method = {m: {"ms_median": {}, "ms_rounds": {}, "peak_mb": {},
                                  "first_call_s": {}} for m in METHODS}
                for seq in a.seq:
                    for method in METHODS:
                        reason = explicit_skip_reason(a, seq, pass_) if method == "explicit" \
                            else None
                        if reason:
                            skipped.setdefault(setting, {}).setdefault(method, {})[str(seq)] = \
                                reason
                            continue
                        r = run_config(a, f"{method},{seq},{mode},{pass_}", folder)
                        if "error" in r:
                            errors.setdefault(setting, {}).setdefault(method, {})[str(seq)] = \
                                r["error"]
                            continue
                        out = per_method[method]
                        out["ms_median"][seq] = round(statistics.median(r["ms_rounds"]), 3)
                        out["ms_rounds"][seq] = r["ms_rounds"]
                        out["peak_mb"][seq] = r["peak_mb"]
                        peak_reset.append(r["peak_reset"])
                        out["first_call_s"][seq] = r["first_call_s"]
                    d = max_abs_diffs(folder, seq, mode, pass_)
                    if d is not None:
                        diffs.setdefault(setting, {})[str(seq)] = d
                for method, out in per_method.items():
                    out["loglog_slope"] = loglog_slope(out["ms_median"])
                    largest = sorted(out["ms_median"])[-3:]
                    out["loglog_slope_largest_3"] = loglog_slope(
                        {s: out["ms_median"][s] for s in largest}) if len(largest) == 3 else None
                    for key in ("ms_median", "ms_rounds", "peak_mb", "first_call_s"):
                        out[key] = {str(s): v for s, v in out[key].items()}
                chained, explicit = (per_method[m]["ms_median"] for m in METHODS)
                per_method["explicit_over_chained_ms"] = {
                    s: round(explicit[s] / chained[s], 3) for s in chained if s in explicit}
                results[setting] = per_method

    worst = max((v["output"] for s in diffs.values() for v in s.values()), default=None)
    result = {
        "benchmark": "GraphMixture transfer mixture M H vs T: chained (library) vs explicit T x T "
                     "products, random row-stochastic graphs, conditioned mixture weights",
        "recorded": _harness.recorded(),
        "config": {k: getattr(a, k) for k in ("seq", "batch", "d", "layers", "heads", "mixtures",
                                              "backward", "xla", "max_explicit_t", "iters",
                                              "warmup", "rounds", "seed")},
        "candidates_per_direction": 2 * a.layers * a.heads,
        "auto_choice": auto_choice(a),
        "results": results,
        "max_abs_diff_chained_vs_explicit": diffs,
        "max_abs_diff_output": worst,
        "peak_reset": all(peak_reset),
        "skipped": skipped,
        "errors": errors,
        "what_each_method_computes": WHAT_EACH_METHOD_COMPUTES,
        "notes": {
            "results": "keyed by 'mode/pass', then method; ms_median is the median over rounds "
                       "of each round's median call time; loglog_slope fits log(ms) against "
                       "log(T) over every T, loglog_slope_largest_3 over the 3 largest",
            "peak_mb": "growth of ru_maxrss over the first call in a fresh subprocess per "
                       "(method, T, mode, pass), from a baseline taken after imports, inputs "
                       "and tracing, with the peak reset to the current RSS just before "
                       "(/proc/self/clear_refs; 'peak_reset' says where that failed and the "
                       "input creation's peak may hide the call's); XLA: the first call also "
                       "compiles. The graphs [B, 2, L, K, T, T] themselves are in the "
                       "baseline; a few MB of one-off first-call allocations appear at any T",
            "timing": "each configuration is timed in its own subprocess, one after another, "
                      "not interleaved; on a loaded machine compare ratios with care",
        },
        "tensorflow": metadata.version("tensorflow"),
        "threads": {"intra_op": a.threads or 0, "inter_op": a.threads or 0,
                    "note": "0 = TensorFlow's default (all cores)", "cpu_count": os.cpu_count()},
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
