"""`glomo serve` under hostile input, second part: request limits, bounded work, long texts cut
before tokenisation, Prometheus metrics, the access log, and a bounded fuzz.

Predictions are compared with the same SavedModel called in-process on the whole request
(``tf.saved_model.load(...).signatures``), never with the server's own earlier answers.
"""

import base64
import http.client
import json
import os
import random
import re
import socket
import threading
import time

import grpc
import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from glomo_tf import GraphPredictor
from glomo_tf.cli import build_parser
from glomo_tf.cli.common import UsageError
from glomo_tf.cli.serve import server_from_args
from glomo_tf.data import Tokenizer
from glomo_tf.export import export_saved_model
from glomo_tf.serving.errors import ServingError
from glomo_tf.serving.limits import Admission, RequestLimits
from glomo_tf.serving.servables import Signature
from glomo_tf.serving.monitoring import parse_monitoring_config
from glomo_tf.serving.server import ModelServer
from _serving_fixtures import raw_http, write_toy_model
from _paths import REPO

PREDICT = "/v1/models/toy:predict"
CORPUS = ["the cat sat on the mat .", "a dog and a cat sat down", "the dog ate the hat"]
MAX_LENGTH = 10


# ----------------------------------------------------------------------------- fixtures, helpers

@pytest.fixture(scope="module")
def toy_base(tmp_path_factory):
    base = tmp_path_factory.mktemp("toy")
    write_toy_model(str(base / "1"))
    return str(base)


@pytest.fixture(scope="module")
def glomo_base(tmp_path_factory):
    """A GLoMo export (max_length 10) of an untrained tiny predictor with varied graphs."""
    tokenizer = Tokenizer.build(CORPUS, splitter="whitespace", lowercase=True)
    keras.utils.set_random_seed(5)
    predictor = GraphPredictor(vocabulary_size=tokenizer.vocabulary_size, hidden_dim=8,
                               num_layers=1, num_heads=2, conv_layers=1)
    predictor(np.ones((1, 3), "int32"))
    predictor.embeddings.assign(predictor.embeddings.numpy() * 10)
    path = export_saved_model(predictor, tokenizer, tmp_path_factory.mktemp("glomo"), "glomo",
                              max_length=MAX_LENGTH, top_k=2)
    return os.path.dirname(path), path


def rest(url, method="GET", body=None, raw=None, headers=None):
    """(status, parsed JSON or text) of one request on a fresh connection."""
    parts = url.split("/", 3)
    connection = http.client.HTTPConnection(parts[2], timeout=60)
    try:
        payload = raw if raw is not None else (json.dumps(body).encode() if body is not None
                                               else None)
        connection.request(method, "/" + parts[3], body=payload, headers=headers or {})
        response = connection.getresponse()
        text = response.read().decode()
        kind = response.getheader("Content-Type", "")
        return response.status, (json.loads(text) if "json" in kind else text)
    finally:
        connection.close()


def serve(base, name="toy", **kwargs):
    options = dict(model_name=name, model_base_path=base, rest_port=0, grpc_port=0,
                   file_system_poll_wait_seconds=0)
    options.update(kwargs)
    return ModelServer(**options)


# ----------------------------------------------------------------------------- limits

def test_request_limits_validate_their_values():
    assert RequestLimits() == RequestLimits(64 << 20, 1 << 22, 32, 1 << 20)
    for field in ("max_request_bytes", "max_request_elements", "max_request_rank",
                  "max_text_bytes"):
        with pytest.raises(ValueError, match=f"--{field} must be a positive integer"):
            RequestLimits(**{field: 0})
    with pytest.raises(ValueError, match="at most 64"):
        RequestLimits(max_request_rank=65)


@pytest.mark.parametrize("flag", ["--max_request_elements=0", "--max_text_bytes=-3",
                                  "--max_request_rank=0", "--rest_api_num_threads=0",
                                  "--max_queued_requests=-1", "--rest_api_max_connections=0"])
def test_limit_flags_are_checked_before_anything_loads(tmp_path, flag):
    args = build_parser([("serve", "glomo_tf.cli.serve")]).parse_args(
        ["serve", f"--model_base_path={tmp_path}", flag])
    with pytest.raises(UsageError, match=flag.split("=")[0]):
        server_from_args(args)


def test_rest_limits_answer_413_or_400_before_building_arrays(toy_base):
    with serve(toy_base, grpc_port=None, max_request_elements=100, max_text_bytes=50,
               max_request_rank=3) as server:
        url = server.rest_url + PREDICT
        # Rows of k (1) and x (3): row 25's x brings the count to 25 * 4 + 3 = 103.
        body = {"signature_name": "scale", "instances": [{"x": [1.0, 2.0, 3.0], "k": 1}] * 34}
        status, doc = rest(url, "POST", body)
        assert status == 413 and "--max_request_elements" in doc["error"], doc
        assert "element: 25 key: x" in doc["error"] and "holds 103 elements" in doc["error"]
        body = {"signature_name": "scale", "inputs": {"x": [[1.0, 2.0, 3.0]] * 30,
                                                      "k": [1] * 30}}
        status, doc = rest(url, "POST", body)  # 90 + 30 = 120 elements in the columnar form
        assert status == 413 and "120 elements" in doc["error"], doc
        status, doc = rest(url, "POST", {"instances": ["x" * 51]})
        assert status == 413 and "--max_text_bytes" in doc["error"], doc
        status, doc = rest(url, "POST", {"instances": ["é" * 26]})  # 52 UTF-8 bytes
        assert status == 413 and "52 bytes" in doc["error"], doc
        b64 = base64.b64encode(b"\0" * 51).decode()
        status, doc = rest(url, "POST", {"instances": [{"b64": b64}]})
        assert status == 413 and "51 bytes" in doc["error"], doc
        status, doc = rest(url, "POST", {"instances": [[[[["x"]]]]]})  # instances of rank 4
        assert status == 400 and "--max_request_rank" in doc["error"], doc
        # At the limits, requests are served and right.
        status, doc = rest(url, "POST", {"instances": ["é" * 25, "x" * 50]})
        assert status == 200 and doc["predictions"][0]["length"] == 50, doc
        body = {"signature_name": "scale", "inputs": {"x": [[1.0, 2.0, 3.0]] * 25,
                                                      "k": [2] * 25}}
        status, doc = rest(url, "POST", body)
        assert status == 200 and doc["outputs"]["y"][0] == [2.0, 4.0, 6.0], doc


def _grpc_request(signature, **inputs):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "toy"
    request.model_spec.signature_name = signature
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    return request


def test_grpc_limits_answer_resource_exhausted(toy_base):
    with serve(toy_base, rest_port=None, max_request_elements=100, max_text_bytes=50) as server:
        with grpc.insecure_channel(server.grpc_target) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            cases = [
                (_grpc_request("scale", x=np.ones((30, 3), np.float32),
                               k=np.ones(30, np.int32)), "--max_request_elements"),
                (_grpc_request("serving_default", texts=np.array([b"x" * 51], object)),
                 "--max_text_bytes"),
            ]
            for request, words in cases:
                with pytest.raises(grpc.RpcError) as raised:
                    stub.Predict(request, timeout=30)
                assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert words in raised.value.details()
            response = stub.Predict(_grpc_request("serving_default",
                                                  texts=np.array([b"x" * 50], object)),
                                    timeout=30)
            assert tf.make_ndarray(response.outputs["length"]).tolist() == [50]


def test_classify_context_copied_into_many_examples_is_refused():
    from glomo_tf.serving import inference
    doc = {"context": {"x": "y" * 1000}, "examples": [{}] * 100}
    with pytest.raises(ServingError) as raised:
        inference.serialized_examples_from_json(doc, "classify", max_bytes=50_000)
    assert raised.value.code == "RESOURCE_EXHAUSTED" and raised.value.http_status == 413
    assert len(inference.serialized_examples_from_json(doc, "classify", 200_000)) == 100


# ----------------------------------------------------------------------------- bounded work

def test_admission_runs_workers_queues_then_refuses():
    admission = Admission(workers=1, max_queued=1, name="REST", flag="--rest_api_num_threads")
    holding, release = threading.Event(), threading.Event()
    order = []

    def first():
        with admission.slot():
            holding.set()
            release.wait(30)
            order.append("first")

    def second():
        with admission.slot(timeout=30):
            order.append("second")

    threads = [threading.Thread(target=first)]
    threads[0].start()
    assert holding.wait(30)
    threads.append(threading.Thread(target=second))
    threads[1].start()
    deadline = time.monotonic() + 30
    while admission.waiting != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (admission.running, admission.waiting) == (1, 1)
    with pytest.raises(ServingError) as raised:  # one running, one waiting: full
        with admission.slot():
            pass
    assert raised.value.code == "UNAVAILABLE" and "--rest_api_num_threads" in raised.value.message
    assert raised.value.http_status == 503 and admission.refused == 1
    release.set()
    for thread in threads:
        thread.join(30)
    assert order == ["first", "second"] and (admission.running, admission.waiting) == (0, 0)
    blocked = Admission(workers=1, max_queued=1)
    with blocked.slot():
        started = time.monotonic()
        with pytest.raises(ServingError) as raised:
            with blocked.slot(timeout=0.2):
                pass
        assert raised.value.code == "DEADLINE_EXCEEDED" and time.monotonic() - started >= 0.2


def _open_post(server, length):
    """A connection that sent a POST's headers and part of its body: it holds a worker turn
    while the server waits for the rest."""
    connection = socket.create_connection(("127.0.0.1", server.rest_port), timeout=30)
    connection.sendall((f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Type: "
                        f"application/json\r\nContent-Length: {length}\r\n\r\n{{").encode())
    return connection


def _wait(condition, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_rest_busy_workers_and_full_queue_answer_503_and_recover(toy_base):
    with serve(toy_base, grpc_port=None, rest_api_num_threads=1, max_queued_requests=0) as server:
        slow = _open_post(server, 100)
        _wait(lambda: server._rest.admission.running == 1, "the slow request to take the turn")
        status, doc = rest(server.rest_url + PREDICT, "POST", {"instances": ["abc"]})
        assert status == 503 and "busy" in doc["error"] and "--rest_api_num_threads" in \
            doc["error"], doc
        status, _ = rest(server.rest_url + "/v1/models/toy")  # status needs no turn
        assert status == 200
        slow.close()
        _wait(lambda: server._rest.admission.running == 0, "the turn to come back")
        status, doc = rest(server.rest_url + PREDICT, "POST", {"instances": ["abc"]})
        assert status == 200 and doc["predictions"][0]["upper"] == "ABC", doc


def test_rest_connections_over_the_limit_are_answered_503(toy_base):
    with serve(toy_base, grpc_port=None, rest_api_max_connections=1) as server:
        idle = socket.create_connection(("127.0.0.1", server.rest_port), timeout=30)
        _wait(lambda: server._rest.connections == 1, "the first connection")
        status, doc = rest(server.rest_url + PREDICT, "POST", {"instances": ["abc"]})
        assert status == 503 and "1 connections are open" in doc["error"], doc
        idle.close()
        _wait(lambda: server._rest.connections == 0, "the connection to close")
        status, _ = rest(server.rest_url + PREDICT, "POST", {"instances": ["abc"]})
        assert status == 200


def test_a_body_that_never_arrives_gives_the_turn_back(toy_base):
    with serve(toy_base, grpc_port=None, rest_api_num_threads=1) as server:
        server._rest.body_timeout = 0.5
        slow = _open_post(server, 100)
        data = b""
        while chunk := slow.recv(65536):  # the server gives up on the body, answers, closes
            data += chunk
        slow.close()
        assert data.startswith(b"HTTP/1.1 408 "), data
        assert b"did not arrive within 0.5 s" in data, data
        _wait(lambda: server._rest.admission.running == 0, "the turn to come back")
        status, _ = rest(server.rest_url + PREDICT, "POST", {"instances": ["abc"]})
        assert status == 200


def test_requests_waiting_in_the_batcher_hold_no_worker_turn(toy_base, tmp_path):
    """Batching merges more requests than there are workers: a decoded request gives its turn
    back before it waits for its batch."""
    clients = 6
    with serve(toy_base, grpc_port=None, rest_api_num_threads=1, max_queued_requests=clients,
               max_batch_size=clients, batch_timeout_micros=60_000_000) as server:
        results = {}

        def call(i):
            results[i] = rest(server.rest_url + PREDICT, "POST", {
                "signature_name": "scale", "inputs": {"x": [[1.0, 2.0, 3.0]], "k": [i]}})

        threads = [threading.Thread(target=call, args=(i,)) for i in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    for i in range(clients):
        status, doc = results[i]
        assert status == 200 and doc["outputs"]["batch"] == [clients], doc
        assert doc["outputs"]["y"] == [[1.0 * i, 2.0 * i, 3.0 * i]]


# ----------------------------------------------------------------------------- long texts

@pytest.mark.parametrize("batching", [False, True])
def test_long_texts_are_cut_before_tokenisation_with_the_same_answer(glomo_base, monkeypatch,
                                                                   batching):
    base, path = glomo_base
    reference = tf.saved_model.load(path).signatures
    seen = []
    run = Signature.run

    def spy(self, inputs):
        seen.append([len(text) for text in inputs.get("text", [])])
        return run(self, inputs)

    monkeypatch.setattr(Signature, "run", spy)
    texts = [
        "the cat sat on the mat . " * 2000,                 # 50 kB of words: cut
        "x" * 5000 + " the cat sat",                        # no space in the prefix: whole
        "\u3000 " * 3000 + "the cat sat on the mat . " * 2,  # only blanks in the prefix: whole
        "a dog",                                            # short: whole
    ]
    with serve(base, name="glomo", grpc_port=None, enable_batching=batching) as server:
        for signature in ("serving_default", "top_k_edges", "mean_graphs"):
            seen.clear()
            status, doc = rest(server.rest_url + "/v1/models/glomo:predict", "POST",
                               {"signature_name": signature, "inputs": {"text": texts}})
            assert status == 200, doc
            want = reference[signature](text=tf.constant(texts))
            for name, value in want.items():
                got = np.array(doc["outputs"][name])
                value = value.numpy()
                if value.dtype == object:
                    value = np.vectorize(lambda b: b.decode())(value)
                if value.dtype.kind == "f":
                    np.testing.assert_allclose(got, value, rtol=1e-5, atol=1e-6)
                else:
                    np.testing.assert_array_equal(got, value, err_msg=f"{signature}/{name}")
            assert doc["outputs"]["truncated"] == [True, False, True, False]
            # The cut ran first; its blank-only text kept too few units, so the whole ran too.
            assert seen[0][0] <= 4096 and seen[0][3] == len("a dog"), seen
            assert seen[1] == [len(t.encode()) for t in texts], seen


# ----------------------------------------------------------------------------- monitoring

def test_monitoring_config_format():
    text = open(os.path.join(REPO, "serving",
                             "monitoring.config")).read()
    assert parse_monitoring_config(text) == "/monitoring/prometheus/metrics"
    assert parse_monitoring_config('prometheus_config: { enable: true }') == \
        "/monitoring/prometheus/metrics"
    assert parse_monitoring_config('prometheus_config { enable: false path: "/m" }') is None
    assert parse_monitoring_config("") is None
    # TF Serving's documentation writes it with a field separator
    assert parse_monitoring_config('prometheus_config {\n  enable: true,\n  path: "/m/x"\n}') \
        == "/m/x"
    assert parse_monitoring_config('prometheus_config { path: "/a,b"; enable: true; }') == "/a,b"
    for bad, words in [("prometheus_config { enabled: true }",
                        'PrometheusConfig" has no field named "enabled"'),
                       ("prometheus_config { enable: yes }", 'Expected "true" or "false"'),
                       ('prometheus_config { enable: true path: "/v1/x" }', "not with /v1/"),
                       ("prometheus_config { enable: true", 'Expected "}"'),
                       ("other_config { }", 'MonitoringConfig" has no field named')]:
        with pytest.raises(ValueError, match=words):
            parse_monitoring_config(bad)


def parse_exposition(text):
    """Prometheus text format 0.0.4 as TF Serving serves it, read with prometheus_client's
    parser: ``{(sample name, labels): value}``, labels written ``{a="x",b="y"}`` in TF Serving's
    order. Every family has its TYPE line; a counter's samples carry its own name (TF Serving
    writes no ``_total``, no ``_created`` series and no HELP line); buckets are cumulative."""
    from prometheus_client.parser import text_string_to_metric_families

    lines = text.splitlines()
    samples, order = {}, ("model_name", "status", "API", "entrypoint", "queue", "le")
    for family in text_string_to_metric_families(text):
        assert family.type in ("counter", "gauge", "histogram"), family
        assert f"# TYPE {family.name} {family.type}" in lines, family.name
        buckets = {}
        for sample in family.samples:
            name = family.name if family.type == "counter" else sample.name
            assert any(line.startswith(name + ("{" if sample.labels else " "))
                       for line in lines), f"no sample line for {name}"
            labels = ",".join(f'{k}="{sample.labels[k]}"' for k in order if k in sample.labels)
            samples[name, "{" + labels + "}" if labels else ""] = sample.value
            if name.endswith("_bucket"):
                key = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
                buckets.setdefault(key, []).append((float(sample.labels["le"]), sample.value))
        for key, counts in buckets.items():
            values = [v for _, v in sorted(counts)]
            assert values == sorted(values), f"buckets not cumulative: {family.name}{key}"
    assert not any(re.search(r"_(total|created)\b", line) or line.startswith("# HELP")
                   for line in lines), text  # TF Serving's exporter writes none of them
    return samples


def test_prometheus_metrics_count_requests_latency_batches_and_queues(toy_base, tmp_path):
    config = tmp_path / "monitoring.config"
    config.write_text('prometheus_config {\n  enable: true\n  path: "/metrics/here"\n}\n')
    args = build_parser([("serve", "glomo_tf.cli.serve")]).parse_args(
        ["serve", f"--model_base_path={toy_base}", "--model_name=toy", "--port=1",
         f"--monitoring_config_file={config}"])
    assert server_from_args(args).options.metrics_path == "/metrics/here"
    with serve(toy_base, metrics_path="/metrics/here") as server:
        for _ in range(3):
            assert rest(server.rest_url + PREDICT, "POST", {"instances": ["a"]})[0] == 200
        assert rest(server.rest_url + PREDICT, "POST", {"instances": [1]})[0] == 400
        with grpc.insecure_channel(server.grpc_target) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            stub.Predict(_grpc_request("negate", v=np.ones(2, np.float32)), timeout=30)
        status, text = rest(server.rest_url + "/metrics/here")
        assert status == 200
        samples = parse_exposition(text)
    count = ":tensorflow:serving:request_count"
    assert samples[count, '{model_name="toy",status="OK"}'] == 4
    assert samples[count, '{model_name="toy",status="INVALID_ARGUMENT"}'] == 1
    latency = ":tensorflow:serving:request_latency_count"
    assert samples[latency, '{model_name="toy",API="predict",entrypoint="REST"}'] == 4
    assert samples[latency, '{model_name="toy",API="predict",entrypoint="GRPC"}'] == 1
    assert samples[":glomo:serving:batch_size_count", ""] == 4  # every request ran in a batch
    for queue in ("REST", "GRPC", "batching"):
        assert samples[":glomo:serving:queue_depth", f'{{queue="{queue}"}}'] == 0


def test_without_monitoring_the_metrics_path_is_not_found(toy_base):
    with serve(toy_base, grpc_port=None) as server:
        status, doc = rest(server.rest_url + "/monitoring/prometheus/metrics")
        assert status == 404 and "Not found" in doc["error"]


def test_access_log_has_one_line_per_request(toy_base, tmp_path):
    log_file = tmp_path / "access.log"
    from glomo_tf.cli.serve import open_access_log
    open_access_log(str(log_file))
    access = __import__("logging").getLogger("glomo_tf.serving.access")
    try:
        with serve(toy_base, access_log=True) as server:
            rest(server.rest_url + PREDICT, "POST", {"instances": ["abc"]})
            rest(server.rest_url + PREDICT, "POST", {"instances": [3]})
            rest(server.rest_url + "/v1/models/toy")
            with grpc.insecure_channel(server.grpc_target) as channel:
                stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
                stub.Predict(_grpc_request("negate", v=np.ones(2, np.float32)), timeout=30)
        for handler in access.handlers:
            handler.flush()
        lines = log_file.read_text().splitlines()
    finally:
        for handler in list(access.handlers):
            access.removeHandler(handler)
            handler.close()
        access.propagate = True
    assert len(lines) == 4, lines
    assert re.search(rf'127\.0\.0\.1 "POST {PREDICT}" 200 \d+ [0-9.]+ms$', lines[0]), lines[0]
    assert re.search(rf'"POST {PREDICT}" 400 \d+ ', lines[1]), lines[1]
    assert '"GET /v1/models/toy" 200' in lines[2], lines[2]
    assert re.search(r'"gRPC predict toy" OK [0-9.]+ms$', lines[3]), lines[3]
    with pytest.raises(UsageError, match="--access_log"):
        open_access_log(str(tmp_path / "missing" / "dir" / "log"))


# ----------------------------------------------------------------------------- fuzz

def _fuzz_payloads(rng):
    """Hostile requests: random bytes, broken framing, odd methods and bodies."""
    good = json.dumps({"instances": ["abc"]}).encode()
    for _ in range(60):
        kind = rng.randrange(8)
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
        if kind == 0:
            yield body  # not HTTP at all
        elif kind == 1:
            yield (f"POST {PREDICT} HTTP/1.1\r\nContent-Length: {len(body)}\r\n\r\n").encode() \
                + body
        elif kind == 2:
            deep = rng.randrange(1, 200)
            doc = ('{"instances": ' + "[" * deep + "1" + "]" * deep + "}").encode()
            yield (f"POST {PREDICT} HTTP/1.1\r\nContent-Length: {len(doc)}\r\n\r\n").encode() \
                + doc
        elif kind == 3:
            method = rng.choice(["GET", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "BREW"])
            yield f"{method} {PREDICT} HTTP/1.1\r\nContent-Length: 0\r\n\r\n".encode()
        elif kind == 4:
            length = rng.choice(["-1", "abc", "99999999999999999999", "1, 2", "0x10"])
            yield (f"POST {PREDICT} HTTP/1.1\r\nContent-Length: {length}\r\n\r\n").encode() \
                + good
        elif kind == 5:
            yield (f"POST {PREDICT} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                   f"{rng.choice(['zz', 'fffffffffff', '5', '-3'])}\r\nab").encode()
        elif kind == 6:
            doc = json.dumps({"instances": [rng.choice([1, "a", None, [1, [2]], {"b64": "@@"},
                                                        {"x": 1}, True, 1e308])]}).encode()
            yield (f"POST {PREDICT} HTTP/1.1\r\nContent-Length: {len(doc)}\r\n\r\n").encode() \
                + doc
        else:
            cut = rng.randrange(len(good))
            yield (f"POST {PREDICT} HTTP/1.1\r\nContent-Length: {len(good)}\r\n\r\n").encode() \
                + good[:cut]


def test_fuzz_no_5xx_for_client_errors_and_good_requests_still_served(toy_base):
    rng = random.Random(1234)
    with serve(toy_base, grpc_port=None, rest_api_num_threads=2) as server:
        server._rest.body_timeout = 1.0
        for payload in _fuzz_payloads(rng):
            data = raw_http(server.rest_port, payload, timeout=3)
            if not data:
                continue  # a request not whole yet: the server waits for the rest
            status_line = data.split(b"\r\n")[0]
            assert status_line.startswith(b"HTTP/1."), (payload[:80], data[:200])
            status = int(status_line.split()[1])
            assert status < 500, (payload[:120], data[:300])
            if status >= 400 and not payload.startswith(b"HEAD"):
                head, _, body = data.partition(b"\r\n\r\n")
                assert b"application/json" in head, data[:300]
                assert "error" in json.loads(body), body
        status, doc = rest(server.rest_url + PREDICT, "POST", {"instances": ["abc", "de"]})
        assert status == 200 and [p["upper"] for p in doc["predictions"]] == ["ABC", "DE"], doc


# ----------------------------------------------------------------------------- memory

@pytest.mark.slow
def test_resident_memory_stays_bounded_over_90_large_requests():
    """`glomo serve` in its own process: 90 requests of a million token ids each, one after
    another. Resident memory swings as the allocator reuses its pages (by about 150-170 MB, with a
    period of 30-40 requests here, whose phase moves with the sizes the model allocates), and
    does not grow after warm-up: the highest of the last 30 requests is within 60 MB of the
    highest of the 30 before them (the first 30 still climb to the first peak), and no reading is
    300 MB over the first."""
    import subprocess
    import sys
    script = os.path.join(REPO, "benchmarks", "serving_soak.py")
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    done = subprocess.run([sys.executable, script, "--minutes", "0", "--large-requests", "90",
                           "--large-ids", "1000000"],
                          capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    large = report["large_requests"]
    curve = large["rss_every_10_mb"]
    assert large["requests"] == 90 and report["server_log"]["tracebacks"] == 0
    assert max(curve[6:]) - max(curve[3:6]) < 60, large
    assert max(curve) - large["rss_after_first_mb"] < 300, large


# ----------------------------------------------------------------------------- framing

def _exchange(server, payload):
    head, _, body = raw_http(server.rest_port, payload).partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body) if body else None


@pytest.mark.parametrize("headers,body,words", [
    ("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", b"0\r\n\r\n",
     "Content-Length can't be present with Transfer-Encoding"),
    ("Transfer-Encoding: chunked\r\n", b"-3\r\nabc\r\n0\r\n\r\n", "Invalid character in chunk"),
    ("Transfer-Encoding: chunked\r\n", b"0x5\r\nabcde\r\n0\r\n\r\n", "Invalid character in chunk"),
    ("Content-Length: +5\r\n", b"{\"a\":", "Invalid character in Content-Length"),
    ("Content-Length:  5 \r\n", b"{}   ", None),  # optional whitespace around the value is fine
])
def test_http_framing_is_strict(toy_base, headers, body, words):
    with serve(toy_base, grpc_port=None) as server:
        status, doc = _exchange(server, (f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\n{headers}"
                                         "\r\n").encode() + body)
    if words is None:
        assert status == 400 and "Missing 'inputs' or 'instances'" in doc["error"], doc
    else:
        assert status == 400 and words in doc["error"], doc


def test_grpc_fuzz_gives_client_error_codes_only(toy_base):
    """Random dtypes, shapes and values for the toy model's inputs: every answer is OK or a
    client error code, never INTERNAL or UNKNOWN."""
    rng = np.random.default_rng(7)
    dtypes = [tf.float32, tf.int32, tf.int64, tf.string, tf.bool, tf.float64]
    signatures = {"scale": ("x", "k"), "ids": ("ids",), "negate": ("v",),
                  "serving_default": ("texts",)}
    valid = {"scale": {"x": np.ones((2, 3), np.float32), "k": np.ones(2, np.int32)},
             "ids": {"ids": np.ones((1, 4), np.int64)}, "negate": {"v": np.ones(3, np.float32)},
             "serving_default": {"texts": np.array([b"ab"], object)}}
    codes = {}
    with serve(toy_base, rest_port=None, max_request_elements=10_000) as server:
        with grpc.insecure_channel(server.grpc_target) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            for _ in range(80):
                name = rng.choice(list(signatures))
                request = predict_pb2.PredictRequest()
                request.model_spec.name = "toy"
                request.model_spec.signature_name = name
                if rng.random() < 0.3:  # a good request among the bad ones
                    for alias, value in valid[name].items():
                        request.inputs[alias].CopyFrom(tf.make_tensor_proto(value))
                for alias in signatures[name] if not request.inputs else ():
                    dtype = dtypes[rng.integers(len(dtypes))]
                    shape = [int(d) for d in rng.integers(0, 4, size=rng.integers(0, 4))]
                    if dtype == tf.string:
                        value = np.full(shape, b"ab", object)
                    else:
                        value = rng.integers(-3, 3, size=shape).astype(dtype.as_numpy_dtype)
                    request.inputs[alias].CopyFrom(tf.make_tensor_proto(value, dtype=dtype))
                    if rng.random() < 0.2:  # a shape that lies about the values
                        request.inputs[alias].tensor_shape.dim.add(size=int(rng.integers(
                            -2, 1 << 20)))
                try:
                    stub.Predict(request, timeout=30)
                    code = "OK"
                except grpc.RpcError as error:
                    code = error.code().name
                codes[code] = codes.get(code, 0) + 1
    assert set(codes) <= {"OK", "INVALID_ARGUMENT", "RESOURCE_EXHAUSTED",
                          "FAILED_PRECONDITION"}, codes
    assert codes.get("OK", 0) >= 1 and codes.get("INVALID_ARGUMENT", 0) >= 10, codes


# ----------------------------------------------------------------------------- text batching

def test_glomo_text_requests_are_merged_and_cut_back_to_their_own_length(glomo_base):
    """Concurrent text requests of different lengths run as one batch; each answer equals the
    SavedModel called in-process on that request's texts alone (shapes exactly, values to
    float round-off)."""
    base, path = glomo_base
    reference = tf.saved_model.load(path).signatures["serving_default"]
    requests = [["the cat"], ["a dog and a cat sat down", "the"], [""],
                ["the dog ate the hat the cat sat on the mat ."], ["sat", "a cat"]]
    results = {}
    with serve(base, name="glomo", grpc_port=None, max_batch_size=16,
               batch_timeout_micros=2_000_000) as server:
        def call(i):
            results[i] = rest(server.rest_url + "/v1/models/glomo:predict", "POST",
                              {"inputs": {"text": requests[i]}})

        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(requests))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        stats = dict(server.batcher.stats)
    assert stats["merged_batches"] >= 1 and stats["largest_batch"] > 2, stats
    for i, texts in enumerate(requests):
        status, doc = results[i]
        assert status == 200, doc
        want = reference(text=tf.constant(texts))
        for name, value in want.items():
            value = value.numpy()
            got = np.array(doc["outputs"][name], dtype=value.dtype if value.dtype != object
                           else object)
            if value.size == 0:  # JSON's nested lists end at the first empty dimension
                assert got.size == 0 and got.shape == value.shape[:got.ndim], (i, name)
                continue
            assert got.shape == value.shape, (i, name, got.shape, value.shape)
            if value.dtype.kind == "f":
                np.testing.assert_allclose(got, value, rtol=1e-5, atol=1e-6)
            elif value.dtype == object:
                assert got.tolist() == [[b.decode() for b in row] for row in value], name
            else:
                np.testing.assert_array_equal(got, value)
