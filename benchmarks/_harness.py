"""Shared pieces of the benchmark scripts: the PyTorch peer as a subprocess, threads, timings.

Every benchmark times glomo_tf and the peer (``../shared/bench/torch_peer/glomo_torch.py``) in the
same run, interleaved round by round, so both sides see the same machine load; ratios come from
those side-by-side numbers only.

``--precision float32 mixed_bfloat16`` times each execution mode in each precision: a mode's key
is its name in float32 (``xla``) and ``NAME_bf16`` under the ``mixed_bfloat16`` policy
(``function_bf16``); the peer runs once per precision, in float32 and under
``torch.autocast("cpu", dtype=torch.bfloat16)`` (its ``--autocast-bf16``).
"""

import json
import os
import shlex
import statistics
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PEER_SCRIPT = os.path.join(REPO_ROOT, os.pardir, "shared", "bench", "torch_peer",
                                   "glomo_torch.py")


def add_model_arguments(parser):
    """The configuration flags both sides understand (the peer's defaults)."""
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=128, help="sequence length T")
    parser.add_argument("--d", type=int, default=256, help="hidden width d")
    parser.add_argument("--vocab", type=int, default=10000)
    parser.add_argument("--layers", type=int, default=3, help="graph layers L")
    parser.add_argument("--heads", type=int, default=8, help="heads K")
    parser.add_argument("--head-dim", type=int, default=None, help="h per head (default d // 2)")
    parser.add_argument("--conv-layers", "--key-layers", dest="conv_layers", type=int, default=4,
                        help="layers of each key and query CNN")
    parser.add_argument("--kernel", type=int, default=3)


def add_timing_arguments(parser):
    parser.add_argument("--iters", type=int, default=10, help="timed iterations per round")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations per round")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds; each times every mode, then the peer (interleaved)")
    parser.add_argument("--threads", type=int, default=None,
                        help="TF intra- and inter-op threads, and the peer's --threads "
                             "(torch.set_num_threads); default: each library's default")
    parser.add_argument("--peer", metavar="PYTHON", default=None,
                        help="a python interpreter with torch: also time the PyTorch peer")
    parser.add_argument("--peer-script", default=DEFAULT_PEER_SCRIPT)
    parser.add_argument("--seed", type=int, default=1111)
    parser.add_argument("--precision", nargs="+", choices=PRECISIONS, default=["float32"],
                        help="the Keras dtype policies timed (each mode in each); the peer runs "
                             "in each too (mixed_bfloat16: under torch.autocast bfloat16)")


PRECISIONS = ("float32", "mixed_bfloat16")  # glomo_tf.hparams.PRECISIONS (a test checks)


def mode_key(mode, precision):
    """A timed mode's key in the JSON: ``mode`` in float32, ``mode_bf16`` in mixed_bfloat16."""
    return mode if precision == "float32" else f"{mode}_bf16"


def timed_modes(a):
    """``[(key, mode, precision)]``: every ``--mode`` in every ``--precision``."""
    return [(mode_key(mode, precision), mode, precision)
            for precision in a.precision for mode in a.mode]


def check_arguments(parser, a):
    """Fills defaults that depend on other flags and rejects impossible values."""
    a.head_dim = a.head_dim or a.d // 2
    a.mode = list(dict.fromkeys(a.mode))
    a.precision = list(dict.fromkeys(a.precision))
    if min(a.batch, a.seq, a.iters, a.rounds) < 1 or a.warmup < 0:
        parser.error("need batch, seq, iters, rounds >= 1 and warmup >= 0")
    if a.peer:
        a.peer_script = os.path.normpath(os.path.abspath(a.peer_script))
        if not os.path.isfile(a.peer_script):
            parser.error(f"--peer given but the peer script {a.peer_script} does not exist; pass "
                         "--peer-script PATH to glomo_torch.py (shared/bench/torch_peer/ beside "
                         "the repository).")
    return a


def peer_commands(a, mode, extra=()):
    """``{precision: command}``: the peer in each ``--precision`` (None without ``--peer``)."""
    if not a.peer:
        return None
    return {precision: peer_command(a, mode, extra, precision) for precision in a.precision}


def peer_command(a, mode, extra=(), precision="float32"):
    """The peer's command line for ``mode`` (``extract`` or ``train``) and the same configuration;
    under ``mixed_bfloat16`` it runs under ``torch.autocast`` bfloat16."""
    cmd = [a.peer, a.peer_script, "--mode", mode, "--batch", str(a.batch),
           "--seq", str(a.seq), "--d", str(a.d), "--vocab", str(a.vocab),
           "--layers", str(a.layers), "--heads", str(a.heads), "--head-dim", str(a.head_dim),
           "--key-layers", str(a.conv_layers), "--query-layers", str(a.conv_layers),
           "--kernel", str(a.kernel), "--iters", str(a.iters), "--warmup", str(a.warmup),
           "--seed", str(a.seed), *extra]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    if precision == "mixed_bfloat16":
        cmd.append("--autocast-bf16")
    return cmd


def run_peer(cmd):
    """Runs the peer once; its last stdout line is a JSON object with ``ms_per_iter_median``."""
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(f"peer failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def recorded(tf=None):
    """When, where and on which code a benchmark ran: every script's JSON holds it as
    ``recorded``, and ``benchmarks/README.md`` quotes its date and machine."""
    import datetime
    import platform

    from glomo_tf.precision import cpu_description

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                                capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        commit = ""
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(),
               "python": platform.python_version(), **cpu_description()}
    if tf is not None:
        machine["tensorflow"] = tf.__version__
        machine["gpus"] = len(tf.config.list_physical_devices("GPU"))
    script = os.path.relpath(os.path.abspath(sys.argv[0]), REPO_ROOT) if sys.argv else "?"
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine, "code": f"commit {commit}" if commit else "unknown",
            "command": shlex.join(["python", script, *sys.argv[1:]])}


def set_threads(tf, threads):
    """``--threads N`` uses N cores in both TF pools, like ``torch.set_num_threads(N)``."""
    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)


def median_seconds(step, batches, warmup):
    """Median wall time of ``step(batch)`` over ``batches`` after ``warmup`` untimed calls.

    ``step`` must return only once the work is done (true on CPU, and for any call that fetches a
    result to the host).
    """
    times = []
    for i, batch in enumerate(batches):
        t0 = time.perf_counter()
        step(batch)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved(a, time_mode, cmds):
    """``rounds`` rounds of every timed mode (:func:`timed_modes`), then the peer in each
    precision; returns ``(per_round {key: [s]}, peer_rounds {precision: [peer JSON]})``."""
    keys = [key for key, _, _ in timed_modes(a)]
    per_round = {key: [] for key in keys}
    peer_rounds = {precision: [] for precision in (cmds or {})}
    for _ in range(a.rounds):
        for key in keys:
            per_round[key].append(time_mode(key))
        for precision, cmd in (cmds or {}).items():
            peer_rounds[precision].append(run_peer(cmd))
    return per_round, peer_rounds


def summary(a, tokens, per_round, peer_rounds, cmds, tf, keras):
    """The JSON fields shared by the benchmarks: tokens/s, rounds, threads, peer and ratios.

    With the peer: ``peer`` and ``ratio_vs_peer*`` compare with the peer in the first
    ``--precision``; ``peers`` and ``ratio_vs_peers*`` hold every precision's peer and ratios,
    ``best_peer`` names the faster peer and ``ratio_best_vs_peer_best`` is glomo_tf's fastest mode
    over the peer's fastest precision (the peer at its best).
    """
    med = {mode: statistics.median(ts) for mode, ts in per_round.items()}
    result = {
        "tokens_per_s": {m: round(tokens / t, 1) for m, t in med.items()},
        "ms_per_iter_median": {m: round(1000 * t, 2) for m, t in med.items()},
        "ms_per_iter_rounds": {m: [round(1000 * t, 2) for t in ts] for m, ts in per_round.items()},
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                    "inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
                    "note": "0 = TensorFlow's default (all cores)", "cpu_count": os.cpu_count()},
    }
    if cmds:
        best = min(med, key=med.get)
        peers, ratios, ratio_rounds = {}, {}, {}
        for precision, rounds in peer_rounds.items():
            peer_ms = statistics.median(r["ms_per_iter_median"] for r in rounds)
            peers[precision] = {
                "command": " ".join(cmds[precision]),
                "precision": precision,
                "tokens_per_s": round(tokens / (peer_ms / 1000), 1),
                "ms_per_iter_median": round(peer_ms, 2),
                "ms_per_iter_rounds": [r["ms_per_iter_median"] for r in rounds],
                "torch": rounds[0].get("torch"),
                "threads": rounds[0].get("threads"),
            }
            # glomo_tf tokens/s over the peer's: of the medians, and round by round (same load).
            ratios[precision] = {m: round(peer_ms / (1000 * t), 3) for m, t in med.items()}
            ratio_rounds[precision] = {
                m: [round(r["ms_per_iter_median"] / (1000 * t), 3) for r, t in zip(rounds, ts)]
                for m, ts in per_round.items()}
        first = a.precision[0]
        result["peer"] = peers[first]
        result["ratio_vs_peer"] = ratios[first]
        result["ratio_vs_peer_rounds"] = ratio_rounds[first]
        result["best_mode"] = best
        result["ratio_best_vs_peer"] = ratios[first][best]
        if len(peers) > 1:
            best_peer = min(peers, key=lambda p: peers[p]["ms_per_iter_median"])
            result["peers"] = peers
            result["ratio_vs_peers"] = ratios
            result["ratio_vs_peers_rounds"] = ratio_rounds
            result["best_peer"] = best_peer
            result["ratio_best_vs_peer_best"] = ratios[best_peer][best]
            result["ratio_best_vs_peer_best_rounds"] = ratio_rounds[best_peer][best]
    return result


def op_profile(tf, step, batch, iters=3, top=15):
    """Milliseconds per call of ``step(batch)`` by TensorFlow op type (``MatMul``, ``Cast``, an
    XLA cluster as ``XlaLaunch`` ...), the ``top`` largest and the rest as ``other``, from the
    TensorFlow profiler's trace of ``iters`` calls on the compute threads."""
    import collections
    import glob
    import tempfile

    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    step(batch)
    with tempfile.TemporaryDirectory() as log_dir:
        tf.profiler.experimental.start(log_dir)
        for _ in range(iters):
            step(batch)
        tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        with open(sorted(glob.glob(os.path.join(log_dir, "plugins", "profile", "*",
                                                "*.xplane.pb")))[-1], "rb") as handle:
            space.ParseFromString(handle.read())
    by_type = collections.Counter()
    for plane in space.planes:
        names = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                name = names.get(event.metadata_id, "?")
                if ":" not in name or "::" in name:  # the executor's spans, XLA's nested events
                    continue
                by_type[name.rsplit(":", 1)[1]] += event.duration_ps / 1e9 / iters
    kept = dict(by_type.most_common(top))
    kept = {k: round(v, 1) for k, v in kept.items()}
    kept["other"] = round(sum(by_type.values()) - sum(kept.values()), 1)
    return kept


def matmul_flops(graph):
    """Floating-point operations of the matrix products and convolutions in ``graph`` (a
    ``tf.function``'s concrete graph, gradients included), from the ops' static shapes: ``2 M N K``
    per product, of the ops that run: those the outputs or a variable update depend on (a
    gradient function also builds products nothing reads, such as the gradient of a constant
    input, which the runtime prunes). A conditional (``tf.cond``, and its gradient) counts the
    products of its first branch, all of whose outputs it takes as needed (the branches of the
    training-form CNNs make the same products). Elementwise work is not counted. Raises
    ``ValueError`` on a product whose shapes are not static."""
    import math
    import re

    needed, stack = set(), [t.op for t in graph.outputs] + list(graph.control_outputs) + [
        op for op in graph.get_operations()
        if op.type.startswith(("Assign", "ResourceApply", "ResourceScatter"))]
    while stack:
        op = stack.pop()
        if op.name in needed:
            continue
        needed.add(op.name)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)

    def dims(tensor):
        shape = tensor.shape.as_list()
        if None in shape:
            raise ValueError(f"{tensor.name} has a dynamic shape {shape}")
        return shape

    total = 0
    for op in graph.get_operations():
        if op.name not in needed:
            continue
        if op.type in ("MatMul", "BatchMatMulV2", "BatchMatMul", "BatchMatMulV3"):
            a = dims(op.inputs[0])
            transposed = op.get_attr("transpose_a" if op.type == "MatMul" else "adj_x")
            inner = a[-2] if transposed else a[-1]
            total += 2 * math.prod(dims(op.outputs[0])) * inner
        elif op.type == "Einsum":
            inputs, _ = op.get_attr("equation").decode().split("->")
            sizes = {}
            for letters, tensor in zip(inputs.split(","), op.inputs):
                sizes.update(zip(re.sub(r"\.\.\.", "", letters), dims(tensor)[-len(
                    re.sub(r"\.\.\.", "", letters)):]))
            total += 2 * math.prod(sizes.values())
        elif op.type in ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"):
            # every form multiplies the output-sized map by the kernel's window and channels
            out = dims(op.outputs[0]) if op.type == "Conv2D" else dims(op.inputs[2])
            kernel = (dims(op.inputs[1]) if op.type != "Conv2DBackpropFilter"
                      else dims(op.outputs[0]))
            total += 2 * math.prod(out) * math.prod(kernel[:3])
        elif op.type in ("If", "StatelessIf"):
            total += matmul_flops(graph._get_function(op.get_attr("then_branch").name).graph)
    return total


def matmul_rate(tf, precision, n=1024, calls=20):
    """GFLOP/s of one ``[n, n] @ [n, n]`` product under ``tf.function``, and under
    ``tf.function(jit_compile=True)``, in ``precision`` (float32 or bfloat16 operands): what this
    CPU's kernels reach on the threads set, the bound a step's matrix products can approach."""
    dtype = tf.float32 if precision == "float32" else tf.bfloat16
    a = tf.cast(tf.random.stateless_normal((n, n), (1, 2)), dtype)
    b = tf.cast(tf.random.stateless_normal((n, n), (3, 4)), dtype)
    rates = {}
    for mode, jit in (("function", False), ("xla", True)):
        product = tf.function(lambda x, y: tf.reduce_sum(tf.cast(tf.matmul(x, y), tf.float32)),
                              jit_compile=jit)
        product(a, b).numpy()
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            product(a, b).numpy()
            times.append(time.perf_counter() - start)
        rates[mode] = round(2 * n ** 3 / statistics.median(times) / 1e9, 1)
    return rates
