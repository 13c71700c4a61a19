"""Serving soak: ``glomo serve`` under minutes of mixed good, large and hostile traffic.

Starts ``glomo serve`` in a subprocess on a small GLoMo export (random weights), then:

1. **large requests**: ``--large-requests`` requests (default 50) of ``--large-ids`` token ids
   each (REST, ``graphs_from_ids``), one after another; the server's resident memory (RSS, from
   ``/proc``) after the first and after the last;
2. **mixed traffic** for ``--minutes``: ``--concurrency`` clients, each sending, at random, good
   text requests over REST and gRPC, large id requests, and client errors (malformed JSON, wrong
   types, nesting deeper than allowed, a text over ``--max_text_bytes``, bodies cut short, unknown
   methods); RSS sampled every second.

Prints JSON: RSS figures, p50/p99 latency per kind of request, answers counted by HTTP status
or gRPC code, and ``unexpected``: answers that were wrong for their request (a 5xx for a client
error, an error for a good request, a good request's answer that differs from the in-process
result of the same SavedModel).

Examples::

    python benchmarks/serving_soak.py --minutes 5
    python benchmarks/serving_soak.py --minutes 0 --large-requests 50   # the memory check only
"""

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, os.path.join(REPO_ROOT, "benchmarks"))

from serving_latency import free_port, launcher, make_export, make_texts  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=5.0, help="mixed traffic (0: none)")
    p.add_argument("--concurrency", type=int, default=8, help="clients of the mixed traffic")
    p.add_argument("--large-requests", type=int, default=50)
    p.add_argument("--large-ids", type=int, default=1_000_000, help="token ids per large request")
    p.add_argument("--words", type=int, default=16, help="words per good text")
    p.add_argument("--hidden-dim", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--max-text-bytes", type=int, default=1 << 20,
                   help="the server's --max_text_bytes")
    p.add_argument("--long-text-mb", type=float, default=0,
                   help="also time one text of this many MiB (raises the server's "
                        "--max_text_bytes and --max_request_bytes to fit it; 0: no)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model-name", default="glomo")
    p.add_argument("--rest-frontend", choices=("aiohttp", "uvicorn"), default="aiohttp",
                   help="aiohttp: glomo serve's; uvicorn: the candidate it was measured against")
    p.add_argument("--serve-flags", default="",
                   help="more flags for glomo serve, e.g. '--rest_api_num_threads=8'")
    args = p.parse_args(argv)
    if args.minutes < 0 or args.concurrency < 1 or args.large_requests < 1:
        p.error("need --minutes >= 0, --concurrency >= 1 and --large-requests >= 1")
    return args


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def http(port, method, path, body=b"", headers=None, timeout=120, hang_up=False):
    """(status, body bytes) over a fresh connection; raw, so that hostile bodies go out as
    they are. ``hang_up``: close the connection once the request is sent, reading nothing
    (status 0), as a client that goes away does."""
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    for name, value in (headers or {"Content-Length": str(len(body))}).items():
        head.append(f"{name}: {value}")
    payload = ("\r\n".join(head) + "\r\n\r\n").encode() + body
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)  # "Connection: close": the server closes after its answer
        if hang_up:
            return 0, b""
        data = bytearray()
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    line, _, rest = bytes(data).partition(b"\r\n")
    status = int(line.split()[1]) if line.startswith(b"HTTP/") else 0
    return status, rest.partition(b"\r\n\r\n")[2]


def percentiles(values):
    ordered = sorted(values)
    if not ordered:
        return {"requests": 0}
    return {"requests": len(ordered),
            "p50_ms": round(1000 * ordered[len(ordered) // 2], 2),
            "p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2)}


def main(argv=None):
    args = parse_args(argv)
    import numpy as np
    import tensorflow as tf
    from glomo_tf.serving import ServingClient

    workdir = tempfile.mkdtemp(prefix="glomo-serving-soak-")
    base = make_export(args, workdir)
    version = sorted(int(v) for v in os.listdir(base) if v.isdigit())[-1]
    reference = tf.saved_model.load(os.path.join(base, str(version))).signatures
    texts = make_texts(args, 64)
    want = {i: {k: v.numpy() for k, v in reference["serving_default"](
        text=tf.constant([texts[i]])).items()} for i in range(len(texts))}
    grpc_port, rest_port = free_port(), free_port()
    long_bytes = int(args.long_text_mb * 2 ** 20)
    started = time.time()
    server = subprocess.Popen(
        [sys.executable, "-c", launcher(args.rest_frontend), "serve", f"--port={grpc_port}",
         f"--rest_api_port={rest_port}", f"--model_name={args.model_name}",
         f"--model_base_path={base}", "--file_system_poll_wait_seconds=0",
         f"--max_text_bytes={max(args.max_text_bytes, long_bytes + 1)}",
         f"--max_request_bytes={max(64 << 20, long_bytes + 1024)}",
         *args.serve_flags.split()],
        cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    predict = f"/v1/models/{args.model_name}:predict"
    large_body = json.dumps({"signature_name": "graphs_from_ids",
                             "inputs": {"token_ids": [[1] * args.large_ids]}}).encode()
    result = {}
    try:
        ServingClient(f"127.0.0.1:{rest_port}", args.model_name, retries=0,
                      timeout=10).wait_until_available(timeout=300)
        rss_loaded = rss_mb(server.pid)

        # 1. Large requests, one after another.
        large, curve = [], []
        for i in range(args.large_requests):
            begin = time.perf_counter()
            status, body = http(rest_port, "POST", predict, large_body)
            large.append(time.perf_counter() - begin)
            if status != 200:
                raise RuntimeError(f"large request {i}: HTTP {status}: {body[:300]!r}")
            if i == 0:
                rss_first = rss_mb(server.pid)
            if (i + 1) % 10 == 0:
                curve.append(round(rss_mb(server.pid)))
        rss_last = rss_mb(server.pid)
        result["large_requests"] = {
            "requests": args.large_requests, "ids_per_request": args.large_ids,
            "body_mb": round(len(large_body) / 2 ** 20, 1),
            "rss_loaded_mb": round(rss_loaded), "rss_after_first_mb": round(rss_first),
            "rss_after_last_mb": round(rss_last), "growth_mb": round(rss_last - rss_first),
            "rss_every_10_mb": curve,
            **percentiles(large)}
        print(f"large requests: RSS {rss_loaded:.0f} MB loaded, {rss_first:.0f} MB after the "
              f"first, {rss_last:.0f} MB after {args.large_requests}", file=sys.stderr)

        if long_bytes:
            words = ("the cat sat on the mat . " * (long_bytes // 25 + 1))[:long_bytes]
            body = json.dumps({"instances": [words]}).encode()
            begin = time.perf_counter()
            status, answer = http(rest_port, "POST", predict, body)
            seconds = time.perf_counter() - begin
            if status != 200 or not json.loads(answer)["predictions"][0]["truncated"]:
                raise RuntimeError(f"long text: HTTP {status}: {answer[:300]!r}")
            result["long_text"] = {"mb": args.long_text_mb, "seconds": round(seconds, 2),
                                   "rss_after_mb": round(rss_mb(server.pid))}
            print(f"long text of {args.long_text_mb} MiB: {seconds:.2f} s", file=sys.stderr)

        # 2. Mixed traffic.
        if args.minutes > 0:
            result["mixed"] = mixed_traffic(args, rest_port, grpc_port, server.pid, predict,
                                            texts, want, large_body, np)
    finally:
        server.terminate()
        try:
            _, stderr = server.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            _, stderr = server.communicate()
    tracebacks = stderr.count("Traceback")
    print(json.dumps({
        "benchmark": "serving_soak",
        "config": vars(args),
        "recorded": _harness.recorded(tf),
        "wall_s": round(time.time() - started, 1),
        "server_log": {"lines": len(stderr.splitlines()), "tracebacks": tracebacks},
        **result,
    }, indent=2))
    return 0


def mixed_traffic(args, rest_port, grpc_port, pid, predict, texts, want, large_body, np):
    from glomo_tf.serving import ServingClient
    hostile = {
        "malformed_json": lambda: http(rest_port, "POST", predict, b'{"instances": [1, 2'),
        "wrong_type": lambda: http(rest_port, "POST", predict,
                                   json.dumps({"instances": [1, 2]}).encode()),
        "too_deep": lambda: http(rest_port, "POST", predict,
                                 ('{"instances": ' + "[" * 100 + '"x"' + "]" * 100 +
                                  "}").encode()),
        "text_over_limit": lambda: http(rest_port, "POST", predict, json.dumps(
            {"instances": ["a " * (args.max_text_bytes // 2 + 1)]}).encode()),
        # A body shorter than its Content-Length, its client gone: nothing to answer, and the
        # worker turn its request took must come back at once, not after --body timeout.
        "body_cut_short": lambda: http(rest_port, "POST", predict, b'{"instances": ["a',
                                       {"Content-Length": "64"}, hang_up=True),
        "unknown_method": lambda: http(rest_port, "BREW", predict),
    }
    kinds = ["rest_text"] * 6 + ["grpc_text"] * 6 + ["large_ids"] + list(hostile) * 1
    latencies = {kind: [] for kind in set(kinds)}
    answers, unexpected, lock = {}, [], threading.Lock()
    rss = [rss_mb(pid)]
    stop = time.monotonic() + 60 * args.minutes

    def count(kind, answer):
        with lock:
            answers.setdefault(kind, {}).setdefault(str(answer), 0)
            answers[kind][str(answer)] += 1

    def client(index):
        rng = random.Random(args.seed * 1000 + index)
        rest = ServingClient(f"127.0.0.1:{rest_port}", args.model_name, protocol="rest",
                             retries=0, timeout=120)
        grpc = ServingClient(f"127.0.0.1:{grpc_port}", args.model_name, protocol="grpc",
                             retries=0, timeout=120)
        while time.monotonic() < stop:
            kind = rng.choice(kinds)
            begin = time.perf_counter()
            try:
                if kind in ("rest_text", "grpc_text"):
                    i = rng.randrange(len(texts))
                    got = (rest if kind == "rest_text" else grpc).predict([texts[i]])
                    answer = 200 if kind == "rest_text" else "OK"
                    for name, value in want[i].items():
                        if not np.array_equal(got[name], value) and not np.allclose(
                                got[name], value, rtol=1e-5, atol=1e-6):
                            unexpected.append(f"{kind}: output {name} differs")
                elif kind == "large_ids":
                    answer, body = http(rest_port, "POST", predict, large_body)
                    if answer != 200:
                        unexpected.append(f"large_ids: HTTP {answer} {body[:200]!r}")
                else:
                    answer, body = hostile[kind]()
                    if not (400 <= answer < 500 or kind == "body_cut_short" and answer == 0):
                        unexpected.append(f"{kind}: HTTP {answer} {body[:200]!r}")
            except Exception as error:  # counted, never hidden
                answer = type(error).__name__
                unexpected.append(f"{kind}: {error!r}"[:300])
            latencies[kind].append(time.perf_counter() - begin)
            count(kind, answer)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.concurrency)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        time.sleep(1.0)
        rss.append(rss_mb(pid))
    for thread in threads:
        thread.join()
    return {
        "minutes": args.minutes, "concurrency": args.concurrency,
        "rss_mb": {"start": round(rss[0]), "max": round(max(rss)), "end": round(rss[-1])},
        "latency": {kind: percentiles(values) for kind, values in sorted(latencies.items())},
        "answers": answers,
        "unexpected": len(unexpected), "unexpected_first": unexpected[:5],
    }


if __name__ == "__main__":
    sys.exit(main())
