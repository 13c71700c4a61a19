"""Serving latency: ``glomo serve`` over REST and gRPC vs in-process calls of the same SavedModel.

Exports a small GLoMo graph predictor (random weights: latency does not depend on training) with
``glomo_tf.export.export_saved_model``, in a subprocess, unless ``--model-base-path`` names an
existing export, starts ``glomo serve`` on it in a subprocess (so that client and server do not
share one Python interpreter), and times the same requests three ways:

- ``in_process``: ``tf.saved_model.load(...).signatures[signature](...)`` in this process;
- ``rest``: :class:`glomo_tf.serving.ServingClient` over HTTP/JSON (columnar format);
- ``grpc``: the same client over gRPC (``PredictionService.Predict``).

At each concurrency level (default 1 and 8) that many threads send requests back to back; the
JSON printed on stdout has p50/p99/mean latency in milliseconds and requests/s per mode and level.
Each mode's requests are sent in ``--blocks`` blocks (default 4; fewer where a block would give
a thread fewer than 10 requests), the three modes taking turns block by block, so that the
machine's speed drifting during a round (it does, on a shared machine) moves every mode alike
instead of the one measured in that stretch.
Served latencies include the client's encoding and decoding of the outputs (NumPy arrays out).
``--rounds`` repeats the whole measurement (default 3) against the same server; the JSON holds
every round (``runs``; ``results`` is the first) and, per round, what REST adds to the p50 and
REST's throughput over in-process's (``rest_vs_in_process``). ``client_decode`` is what reading
one REST answer takes the client: its simdjson reader against orjson's nested lists;
``server_encode`` what writing it takes the server (the two JSON costs REST adds to a call).

Examples::

    python benchmarks/serving_latency.py
    python benchmarks/serving_latency.py --requests 400 --concurrency 1 8 16 --max-length 64
    python benchmarks/serving_latency.py --model-base-path /models/glomo --model-name glomo
    python benchmarks/serving_latency.py --hidden-dim 256 --layers 3 --heads 8 --words 100 \
        --max-length 128 --signature top_k_edges   # a model whose call takes >= 10 ms
    python benchmarks/serving_latency.py \
        --serve-flags "--tensorflow_intra_op_parallelism=1 --tensorflow_inter_op_parallelism=1"
"""

import argparse
import gc
import json
import os
import socket
import statistics
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

WORDS = ("the cat sat on the mat while a dog ate the hat and ran off to the park where "
         "children played with a red ball near an old tree").split()
LAUNCHER = ("import functools, sys; from glomo_tf import cli; "
            "cli.build_parser = functools.partial(cli.build_parser, "
            "[('serve', 'glomo_tf.cli.serve')]); sys.exit(cli.main(sys.argv[1:]))")
# The second REST candidate: the same API mounted on uvicorn (benchmarks/_uvicorn_frontend.py).
UVICORN = ("import sys; sys.path.insert(0, 'benchmarks'); import _uvicorn_frontend; "
           "from glomo_tf.serving import rest; "
           "rest.RestServer = _uvicorn_frontend.UvicornRestServer; ")


def launcher(frontend):
    """The ``python -c`` program that starts ``glomo serve`` with the given REST front end."""
    return (UVICORN if frontend == "uvicorn" else "") + LAUNCHER


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-base-path", help="an existing export's base path (else a fresh one)")
    p.add_argument("--model-name", default="glomo")
    p.add_argument("--signature", default="serving_default")
    p.add_argument("--requests", type=int, default=200, help="timed requests per mode and level")
    p.add_argument("--warmup", type=int, default=10, help="untimed requests per mode and level")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    p.add_argument("--texts-per-request", type=int, default=1)
    p.add_argument("--words", type=int, default=16, help="words per text")
    p.add_argument("--hidden-dim", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--max-length", type=int, default=32)
    p.add_argument("--enable-batching", default="true", choices=("true", "false"))
    p.add_argument("--timeout", type=float, default=60.0, help="client timeout per request (s)")
    p.add_argument("--rounds", type=int, default=3,
                   help="times every mode and level is measured, one after another")
    p.add_argument("--blocks", type=int, default=4,
                   help="blocks each mode's requests are sent in per level and round, the modes "
                        "taking turns block by block (1: each mode's requests in one go)")
    p.add_argument("--rest-frontend", choices=("aiohttp", "uvicorn"), default="aiohttp",
                   help="aiohttp: glomo serve's; uvicorn: the candidate it was measured against")
    p.add_argument("--serve-flags", default="",
                   help="more flags for glomo serve, e.g. '--tensorflow_intra_op_parallelism=1'")
    p.add_argument("--notes", default="",
                   help="words added to the JSON's notes: what else ran on the machine, say")
    return p.parse_args(argv)


def make_export(args, directory):
    import keras
    import numpy as np
    from glomo_tf import GraphPredictor
    from glomo_tf.data import Tokenizer
    from glomo_tf.export import export_saved_model
    tokenizer = Tokenizer.build([" ".join(WORDS)], splitter="whitespace", lowercase=True)
    keras.utils.set_random_seed(0)
    predictor = GraphPredictor(vocabulary_size=tokenizer.vocabulary_size,
                               hidden_dim=args.hidden_dim, num_layers=args.layers,
                               num_heads=args.heads, conv_layers=2)
    predictor(np.ones((1, 4), "int32"))
    path = export_saved_model(predictor, tokenizer, directory, args.model_name,
                              max_length=args.max_length)
    return os.path.dirname(path)


def export_in_subprocess(args, directory):
    """:func:`make_export` in a process of its own. Building and exporting the Keras model in
    this process left its Python code slower for the rest of its life, with the machine otherwise
    idle (a pure-Python loop 1.5x, orjson writing the large answer 2.2-2.6x, simdjson reading it
    1.2-1.4x): a cost that fell on the REST and gRPC clients' side of the comparison."""
    size = ["--hidden-dim", str(args.hidden_dim), "--layers", str(args.layers), "--heads",
            str(args.heads), "--max-length", str(args.max_length), "--model-name",
            args.model_name]
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import serving_latency as s; "
            "print(s.make_export(s.parse_args(sys.argv[3:]), sys.argv[2]))")
    done = subprocess.run([sys.executable, "-c", code, os.path.dirname(os.path.abspath(
        __file__)), directory, *size], cwd=REPO_ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"exporting the benchmark's model failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


def make_texts(args, count):
    texts = []
    for i in range(count):
        words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(args.words)]
        texts.append(" ".join(words))
    return texts


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def summarise(latencies, wall):
    ordered = sorted(latencies)
    return {"requests": len(ordered),
            "p50_ms": round(1000 * ordered[len(ordered) // 2], 3),
            "p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 3),
            "mean_ms": round(1000 * statistics.fmean(ordered), 3),
            "requests_per_s": round(len(ordered) / wall, 2)}


MIN_PER_THREAD = 10


def _block(calls, requests, first=0):
    """``requests`` calls spread over the threads of ``calls`` (one per thread), sent back to back
    (a thread's calls numbered from ``first``): (latencies, wall seconds from the start line to
    the last answer)."""
    concurrency = len(calls)
    per_thread = [requests // concurrency + (i < requests % concurrency)
                  for i in range(concurrency)]
    latencies = [[] for _ in range(concurrency)]
    errors = []
    start_line = threading.Barrier(concurrency + 1)

    def worker(index):
        start_line.wait()
        try:
            for i in range(per_thread[index]):
                begin = time.perf_counter()
                calls[index](first + i)
                latencies[index].append(time.perf_counter() - begin)
        except Exception as error:  # reported, not hidden
            errors.append(repr(error))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    start_line.wait()
    begin = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - begin
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed, first: {errors[0]}")
    return [x for part in latencies for x in part], wall


def time_modes(makers, concurrency, requests, warmup, blocks=1):
    """``{mode: summary}`` at one concurrency level: ``concurrency`` threads per mode, each
    calling its own ``makers[mode]()`` back to back. Every mode's ``requests`` are sent in
    ``blocks`` blocks, the modes taking turns block by block (their order rotated at every block),
    so that a change in the machine's speed during the measurement falls on every mode alike
    (fewer blocks where a block would give a thread fewer than ``MIN_PER_THREAD`` requests);
    requests/s is a mode's requests over the sum of its blocks' wall times."""
    calls = {mode: [make() for _ in range(concurrency)] for mode, make in makers.items()}
    for mode_calls in calls.values():
        for call in mode_calls:
            for _ in range(max(1, warmup // concurrency)):
                call(0)
    # A block shorter than a few requests per thread would time mostly its ramp-up and drain.
    blocks = max(1, min(blocks, requests // (MIN_PER_THREAD * concurrency)))
    sizes = [requests // blocks + (i < requests % blocks) for i in range(blocks)]
    modes = list(calls)
    latencies = {mode: [] for mode in modes}
    walls = dict.fromkeys(modes, 0.0)
    for index, size in enumerate(sizes):
        for mode in modes[index % len(modes):] + modes[:index % len(modes)]:
            block, wall = _block(calls[mode], size, sum(sizes[:index]) // concurrency)
            latencies[mode] += block
            walls[mode] += wall
    return {mode: summarise(latencies[mode], walls[mode]) for mode in modes}


def answer_bytes(port, args, texts):
    """The body of the server's REST answer to a predict request of ``texts``."""
    import http.client
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=args.timeout)
    connection.request("POST", f"/v1/models/{args.model_name}:predict", json.dumps(
        {"signature_name": args.signature, "inputs": texts}).encode(),
        {"Content-Type": "application/json"})
    payload = connection.getresponse().read()
    connection.close()
    return payload


def client_decode(port, args, payload, repeats=30):
    """ms the client takes to read one REST answer (raw bytes -> arrays): simdjson's reader
    (the `serve` extra) against orjson's nested lists with ``np.asarray``, medians of
    ``repeats``, alternated, on the answer's real bytes ``payload``."""
    from glomo_tf.serving import ServingClient, tensors
    with ServingClient(f"127.0.0.1:{port}", args.model_name, retries=0) as client:
        spec = client.signature(args.signature)

    def general():
        outputs = tensors.loads(payload)["outputs"]
        return {k: tensors.json_to_numpy(v, spec["outputs"][k]) for k, v in outputs.items()}

    times = {"simdjson": [], "orjson": []}
    for _ in range(repeats):
        for name, read in (("simdjson", lambda: tensors.read_outputs(payload, spec["outputs"])),
                           ("orjson", general)):
            begin = time.perf_counter()
            result = read()
            times[name].append(time.perf_counter() - begin)
            if result is None:
                raise RuntimeError(f"{name} did not read the answer (is pysimdjson installed?)")
    return {"answer_bytes": len(payload),
            **{f"{name}_ms": round(1000 * statistics.median(v), 3) for name, v in times.items()}}


def server_encode(payload, outputs, repeats=30):
    """ms the server takes to write one REST answer (arrays -> JSON bytes, as glomo serve writes
    a columnar answer), median of ``repeats`` in this process on ``outputs`` (the in-process
    call's): the same bytes as the server's answer ``payload``, checked. Back to back, so its
    caches are warm: in the server, right after the model has run, it takes longer."""
    from glomo_tf.serving import tensors
    if tensors.columnar_json(outputs).encode("utf-8") != payload:
        raise RuntimeError("the server's answer is not the columnar JSON of the same outputs")
    times = []
    for _ in range(repeats):
        begin = time.perf_counter()
        tensors.columnar_json(outputs).encode("utf-8")
        times.append(time.perf_counter() - begin)
    return {"answer_bytes": len(payload), "ms": round(1000 * statistics.median(times), 3)}


def rest_vs_in_process(runs, levels):
    """Per round: what REST adds to the p50 and REST's p50 and throughput over in-process's."""
    def at(run, mode, level):
        return next(x for x in run if x["mode"] == mode and x["concurrency"] == level)

    return {f"concurrency_{level}": {
        "p50_added_ms": [round(at(r, "rest", level)["p50_ms"] - at(r, "in_process", level)[
            "p50_ms"], 3) for r in runs],
        "p50_ratio": [round(at(r, "rest", level)["p50_ms"] / at(r, "in_process", level)[
            "p50_ms"], 3) for r in runs],
        "throughput_ratio": [round(at(r, "rest", level)["requests_per_s"] / at(
            r, "in_process", level)["requests_per_s"], 3) for r in runs]} for level in levels}


def main(argv=None):
    args = parse_args(argv)
    import numpy as np
    import tensorflow as tf
    from glomo_tf.serving import ServingClient
    from glomo_tf.serving.models import register_serving_ops

    workdir = tempfile.mkdtemp(prefix="glomo-serving-bench-")
    base = args.model_base_path or export_in_subprocess(args, workdir)
    register_serving_ops()  # an export's tokenizer ops, as glomo serve registers them
    versions = sorted(int(v) for v in os.listdir(base) if v.isdigit())
    signature = tf.saved_model.load(os.path.join(base, str(versions[-1]))).signatures[
        args.signature]
    (input_name,) = signature.structured_input_signature[1]
    pool = make_texts(args, 64)

    def batch(i):
        return [pool[(i + j) % len(pool)] for j in range(args.texts_per_request)]

    grpc_port, rest_port = free_port(), free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", launcher(args.rest_frontend), "serve", f"--port={grpc_port}",
         f"--rest_api_port={rest_port}", f"--model_name={args.model_name}",
         f"--model_base_path={base}", f"--enable_batching={args.enable_batching}",
         "--file_system_poll_wait_seconds=0", *args.serve_flags.split()],
        cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    runs = []
    try:
        ServingClient(f"127.0.0.1:{rest_port}", args.model_name, retries=0,
                      timeout=10).wait_until_available(timeout=300)

        def in_process():
            def call(i):
                outputs = signature(**{input_name: tf.constant(batch(i))})
                return {k: v.numpy() for k, v in outputs.items()}
            return call

        def served(protocol, port):
            def make():
                client = ServingClient(f"127.0.0.1:{port}", args.model_name, protocol=protocol,
                                       timeout=args.timeout, retries=0)
                return lambda i: client.predict(batch(i), args.signature)
            return make

        # The served outputs are the in-process outputs.
        want = in_process()(0)
        for protocol, port in (("rest", rest_port), ("grpc", grpc_port)):
            got = served(protocol, port)()(0)
            for name, value in want.items():
                np.testing.assert_array_equal(got[name], value, err_msg=f"{protocol} {name}")

        payload = answer_bytes(rest_port, args, batch(0))
        decode = client_decode(rest_port, args, payload)
        encode = server_encode(payload, want)

        # This process holds TensorFlow (for the in-process mode): a full collection of its
        # objects, set off by the REST clients' parsing, paused every thread for a sixth of a
        # second once in a few thousand requests (the REST rows' p99 in one round of five), a
        # pause a REST client without TensorFlow does not have. It is kept out of the
        # collector's reach (freezing the server's objects instead left the pause in place).
        gc.freeze()
        modes = {"in_process": in_process, "rest": served("rest", rest_port),
                 "grpc": served("grpc", grpc_port)}
        for round_ in range(args.rounds):
            results = []
            for concurrency in args.concurrency:
                summaries = time_modes(modes, concurrency, args.requests, args.warmup,
                                       args.blocks)
                for mode, summary in summaries.items():
                    results.append(dict(mode=mode, concurrency=concurrency, **summary))
                    print(f"round {round_ + 1} {mode:>10} x{concurrency}: p50 "
                          f"{summary['p50_ms']} ms, p99 {summary['p99_ms']} ms, "
                          f"{summary['requests_per_s']} req/s", file=sys.stderr)
            runs.append(results)
    finally:
        server.terminate()
        try:
            server.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
    print(json.dumps({
        "benchmark": "serving_latency",
        "model_base_path": base if args.model_base_path else "(fresh export, random weights)",
        "signature": args.signature,
        "config": {k: v for k, v in vars(args).items() if k not in ("model_base_path", "notes")},
        "recorded": _harness.recorded(tf),
        "notes": "latency per request, client encode/decode included; glomo serve in a "
                 "subprocess on 127.0.0.1; concurrent GLoMo text requests are merged into one "
                 "batch padded to its longest text and each answer is cut back to its own "
                 f"length; each mode's requests in up to {args.blocks} blocks per level and "
                 f"round (at least {MIN_PER_THREAD} requests a thread), the modes taking turns"
                 + (f"; {args.notes}" if args.notes else ""),
        "results": runs[0],
        "runs": runs,
        "rest_vs_in_process": rest_vs_in_process(runs, args.concurrency),
        "client_decode": decode,
        "server_encode": encode,
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
