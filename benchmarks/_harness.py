"""Shared pieces of the benchmark scripts: the PyTorch peer as a subprocess, threads, timings.

Every benchmark times glomo_tf and the peer (``../shared/bench/torch_peer/glomo_torch.py``) in the
same run, interleaved round by round, so both sides see the same machine load; ratios come from
those side-by-side numbers only.
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


def check_arguments(parser, a):
    """Fills defaults that depend on other flags and rejects impossible values."""
    a.head_dim = a.head_dim or a.d // 2
    a.mode = list(dict.fromkeys(a.mode))
    if min(a.batch, a.seq, a.iters, a.rounds) < 1 or a.warmup < 0:
        parser.error("need batch, seq, iters, rounds >= 1 and warmup >= 0")
    if a.peer:
        a.peer_script = os.path.normpath(os.path.abspath(a.peer_script))
        if not os.path.isfile(a.peer_script):
            parser.error(f"--peer given but the peer script {a.peer_script} does not exist; pass "
                         "--peer-script PATH to glomo_torch.py (shared/bench/torch_peer/ beside "
                         "the repository).")
    return a


def peer_command(a, mode, extra=()):
    """The peer's command line for ``mode`` (``extract`` or ``train``) and the same configuration."""
    cmd = [a.peer, a.peer_script, "--mode", mode, "--batch", str(a.batch),
           "--seq", str(a.seq), "--d", str(a.d), "--vocab", str(a.vocab),
           "--layers", str(a.layers), "--heads", str(a.heads), "--head-dim", str(a.head_dim),
           "--key-layers", str(a.conv_layers), "--query-layers", str(a.conv_layers),
           "--kernel", str(a.kernel), "--iters", str(a.iters), "--warmup", str(a.warmup),
           "--seed", str(a.seed), *extra]
    if a.threads:
        cmd += ["--threads", str(a.threads)]
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

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT,
                                capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        commit = ""
    machine = {"cpus": os.cpu_count(), "platform": platform.platform(),
               "python": platform.python_version()}
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


def interleaved(a, time_mode, cmd):
    """``rounds`` rounds of every mode, then the peer; returns ``(per_round, peer_rounds)``."""
    per_round = {mode: [] for mode in a.mode}
    peer_rounds = []
    for _ in range(a.rounds):
        for mode in a.mode:
            per_round[mode].append(time_mode(mode))
        if cmd:
            peer_rounds.append(run_peer(cmd))
    return per_round, peer_rounds


def summary(a, tokens, per_round, peer_rounds, cmd, tf, keras):
    """The JSON fields shared by the benchmarks: tokens/s, rounds, threads, peer and ratios."""
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
    if cmd:
        peer_ms = statistics.median(r["ms_per_iter_median"] for r in peer_rounds)
        best = min(med, key=med.get)
        result["peer"] = {
            "command": " ".join(cmd),
            "tokens_per_s": round(tokens / (peer_ms / 1000), 1),
            "ms_per_iter_median": round(peer_ms, 2),
            "ms_per_iter_rounds": [r["ms_per_iter_median"] for r in peer_rounds],
            "torch": peer_rounds[0].get("torch"),
            "threads": peer_rounds[0].get("threads"),
        }
        # glomo_tf tokens/s over the peer's: of the medians, and round by round (same load).
        result["ratio_vs_peer"] = {m: round(peer_ms / (1000 * t), 3) for m, t in med.items()}
        result["ratio_vs_peer_rounds"] = {
            m: [round(r["ms_per_iter_median"] / (1000 * t), 3) for r, t in zip(peer_rounds, ts)]
            for m, ts in per_round.items()}
        result["best_mode"] = best
        result["ratio_best_vs_peer"] = result["ratio_vs_peer"][best]
    return result
