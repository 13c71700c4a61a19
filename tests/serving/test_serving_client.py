"""glomo_tf.serving.client over REST and gRPC, and the whole path with a real GLoMo export:
pretrain (tiny) -> export -> serve -> client, compared with in-process calls of the SavedModel."""

import asyncio
import contextlib
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

from glomo_tf.serving import ModelConfig, ModelServer, ServingClient, ServingError, extract
from _serving_fixtures import write_toy_model
from _paths import REPO

PROTOCOLS = ("rest", "grpc")
TEXTS = ["ab", "h\u00e9llo w\u00f6rld", "", b"\xff\xfe raw"]


# ----------------------------------------------------------------------------- toy model

@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """Versions 1 (factor 2) and 2 (factor 3), served with labels stable=1 and canary=2."""
    base = tmp_path_factory.mktemp("toy") / "toy"
    write_toy_model(str(base / "1"), factor=2.0)
    write_toy_model(str(base / "2"), factor=3.0)
    config = ModelConfig("toy", str(base), policy="all", labels=(("stable", 1), ("canary", 2)))
    with ModelServer([config], rest_port=0, grpc_port=0,
                     file_system_poll_wait_seconds=0) as server:
        yield dict(server=server, signatures={
            v: tf.saved_model.load(str(base / str(v))).signatures for v in (1, 2)})


def in_process(toy, version, signature, **inputs):
    outputs = toy["signatures"][version][signature](**{k: tf.constant(v)
                                                       for k, v in inputs.items()})
    return {k: v.numpy() for k, v in outputs.items()}


def target(server, protocol):
    return server.rest_url if protocol == "rest" else server.grpc_target


def assert_same(got, want):
    assert set(got) == set(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        np.testing.assert_array_equal(got[name], value, err_msg=name)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_predict_and_extract_equal_in_process_calls(toy, protocol, rng):
    with ServingClient(target(toy["server"], protocol), "toy", protocol=protocol) as client:
        x = rng.normal(size=(4, 3))  # float64 here: the client casts to the signature's float32
        x[1, 2] = np.nan
        k = [0, 1, 2, 5]
        assert_same(client.predict({"x": x.tolist(), "k": k}, signature_name="scale"),
                    in_process(toy, 2, "scale", x=x.astype(np.float32),
                               k=np.array(k, np.int32)))
        ids = [[4, 0, 0], [1, 2, 3]]
        assert_same(client.predict(ids, signature_name="ids"),
                    in_process(toy, 2, "ids", ids=np.array(ids, np.int64)))
        raw = np.array([t.encode() if isinstance(t, str) else t for t in TEXTS], dtype=object)
        assert_same(client.extract(TEXTS), in_process(toy, 2, "serving_default", texts=raw))
        got = client.predict({"x": x.tolist(), "k": k}, "scale", output_filter=["total"])
        assert list(got) == ["total"]
        np.testing.assert_array_equal(got["total"], in_process(
            toy, 2, "scale", x=x.astype(np.float32), k=np.array(k, np.int32))["total"])


def test_rest_answers_read_with_and_without_simdjson_are_the_same(toy, monkeypatch, rng):
    """The simdjson reader (numeric tensors straight into arrays) and the general JSON path give
    the client the same outputs, and the reader is what reads a strict-JSON answer."""
    from glomo_tf.serving import rest_client
    calls, declined = [], []
    real = rest_client.read_outputs
    monkeypatch.setattr(rest_client, "read_outputs", lambda *args: calls.append(
        None if declined else real(*args)) or calls[-1])
    x = rng.normal(size=(3, 3)).tolist()
    raw = np.array([t.encode() if isinstance(t, str) else t for t in TEXTS], dtype=object)
    with ServingClient(toy["server"].rest_url, "toy") as client:
        fast = [client.predict({"x": x, "k": [0, 1, 2]}, "scale"), client.extract(TEXTS),
                client.predict([[4, 0, 0], [1, 2, 3]], "ids")]
        assert len(calls) == 3 and all(c is not None for c in calls)
        declined.append(True)  # the reader declines: the general path reads the answers
        general = [client.predict({"x": x, "k": [0, 1, 2]}, "scale"), client.extract(TEXTS),
                   client.predict([[4, 0, 0], [1, 2, 3]], "ids")]
        assert calls[3:] == [None] * 3
    for got, want in zip(fast, general):
        assert_same(got, want)
    assert_same(fast[1], in_process(toy, 2, "serving_default", texts=raw))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_versions_labels_status_and_metadata(toy, protocol):
    server = toy["server"]
    x, k = [[1.0, 2.0, 3.0]], [1]
    want = {v: in_process(toy, v, "scale", x=np.array(x, np.float32), k=np.array(k, np.int32))
            for v in (1, 2)}
    for options, version in (({}, 2), ({"version": 1}, 1), ({"version_label": "stable"}, 1),
                             ({"version_label": "canary"}, 2)):
        with ServingClient(target(server, protocol), "toy", protocol=protocol,
                           **options) as client:
            np.testing.assert_array_equal(client.predict({"x": x, "k": k}, "scale")["y"],
                                          want[version]["y"])
    with ServingClient(target(server, protocol), "toy", protocol=protocol) as client:
        assert client.status() == [
            {"version": 2, "state": "AVAILABLE", "error_code": "OK", "error_message": ""},
            {"version": 1, "state": "AVAILABLE", "error_code": "OK", "error_message": ""}]
        assert client.wait_until_available(timeout=10) == 2
        metadata = client.metadata()
        assert metadata["model_spec"] == {"name": "toy", "signature_name": "", "version": "2"}
        assert client.signature("scale") == {
            "inputs": {"x": "DT_FLOAT", "k": "DT_INT32"},
            "outputs": {"y": "DT_FLOAT", "total": "DT_FLOAT", "batch": "DT_INT32"}}
    # Both protocols describe the model identically.
    with ServingClient(server.rest_url, "toy") as rest_client, \
            ServingClient(server.grpc_target, "toy", protocol="grpc") as grpc_client:
        assert rest_client.metadata() == grpc_client.metadata()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_errors_carry_the_servers_code_and_message(toy, protocol):
    server = toy["server"]
    with ServingClient(target(server, protocol), "nope", protocol=protocol) as client:
        with pytest.raises(ServingError) as raised:
            client.status()
        assert raised.value.code == "NOT_FOUND" and "nope" in raised.value.message
    with ServingClient(target(server, protocol), "toy", protocol=protocol, version=7) as client:
        with pytest.raises(ServingError) as raised:
            client.extract(["a"])
        assert raised.value.code == "NOT_FOUND" and "Specific(toy, 7)" in raised.value.message
    with ServingClient(target(server, protocol), "toy", protocol=protocol) as client:
        with pytest.raises(ServingError) as raised:
            client.predict({"x": [[1, 2, 3]], "k": [-1]}, "scale")
        assert raised.value.code == "INVALID_ARGUMENT" and "k must be >= 0" in str(raised.value)
        if protocol == "rest":
            assert raised.value.http_status == 400
        with pytest.raises(ServingError, match="no signature 'nope'"):
            client.predict([1], "nope")
        with pytest.raises(ServingError, match="does not take one string input"):
            client.extract(["a"], signature_name="scale")
        with pytest.raises(TypeError, match="list of texts"):
            client.extract("a single string")
        with pytest.raises(ValueError, match="unknown: \\['z'\\], missing: \\['k'\\]"):
            client.predict({"x": [[1, 2, 3]], "z": [1]}, "scale")
        with pytest.raises(ValueError, match="pass a dict"):
            client.predict([[1, 2, 3]], "scale")
        with pytest.raises(TypeError, match="takes strings"):
            client.extract([1, 2])
        assert client.attempts > 0
    with pytest.raises(ValueError, match="protocol"):
        ServingClient("localhost:1", protocol="http2")


def test_module_level_extract(toy):
    raw = np.array([b"one", b"two"], dtype=object)
    want = in_process(toy, 1, "serving_default", texts=raw)
    for protocol in PROTOCOLS:
        got = extract(["one", "two"], target(toy["server"], protocol), "toy",
                      protocol=protocol, version=1)
        assert_same(got, want)


# ----------------------------------------------------------------------------- retries, timeouts

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_retries_then_gives_up_when_nothing_listens(protocol):
    client = ServingClient(f"127.0.0.1:{free_port()}", "toy", protocol=protocol, retries=2,
                           retry_backoff=0.01, timeout=10)
    with client, pytest.raises(ServingError) as raised:
        client.status()
    assert raised.value.code == "UNAVAILABLE"
    assert "gave up after 3 attempts" in raised.value.message
    assert client.attempts == 3


STATUS_JSON = {"model_version_status": [{"version": "4", "state": "AVAILABLE", "status": {
    "error_code": "OK", "error_message": ""}}]}


def answer_json(handler, status, doc):
    """Answer a stub's request with ``doc`` as JSON."""
    body = json.dumps(doc).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@pytest.fixture
def stub_rest():
    """A REST stub: answers 503 to the first ``fail`` requests, or blocks while ``hold`` is set."""
    state = {"hits": 0, "fail": 0, "hold": threading.Event(), "release": threading.Event()}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            state["hits"] += 1
            if state["hold"].is_set():
                state["release"].wait(60)
            status, doc = ((503, {"error": "warming up"}) if state["hits"] <= state["fail"]
                           else (200, STATUS_JSON))
            answer_json(self, status, doc)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state["url"] = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    state["release"].set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def stub_grpc():
    """A gRPC ModelService stub with the same switches as ``stub_rest``."""
    state = {"hits": 0, "fail": 0, "hold": threading.Event(), "release": threading.Event()}

    class Servicer(model_service_pb2_grpc.ModelServiceServicer):
        def GetModelStatus(self, request, context):  # noqa: N802 (gRPC method name)
            state["hits"] += 1
            if state["hold"].is_set():
                state["release"].wait(60)
            if state["hits"] <= state["fail"]:
                context.abort(grpc.StatusCode.UNAVAILABLE, "warming up")
            response = get_model_status_pb2.GetModelStatusResponse()
            entry = response.model_version_status.add(version=4)
            entry.state = get_model_status_pb2.ModelVersionStatus.State.Value("AVAILABLE")
            return response

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(Servicer(), server)
    state["url"] = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    yield state
    state["release"].set()
    server.stop(0).wait(10)


@contextlib.contextmanager
def http_stub(**methods):
    """A local HTTP/1.1 server whose handler has ``methods`` (``do_GET=...``); yields its port."""
    handler = type("Handler", (BaseHTTPRequestHandler,), {
        "protocol_version": "HTTP/1.1", "log_message": lambda self, *args: None, **methods})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def client_sends(monkeypatch):
    """``{port: [(bytes sent, TCP_NODELAY)]}``: every send (a write of the socket) that a client
    makes in this process, by the server's port."""
    sends = {}

    def recorder(real):
        def send(sock, data, *args):
            if sock.family not in (socket.AF_INET, socket.AF_INET6):  # an event loop's wake-up
                return real(sock, data, *args)
            port = sock.getpeername()[1]
            sends.setdefault(port, []).append(
                (bytes(data) if not isinstance(data, list) else b"".join(data),
                 sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0))
            return real(sock, data, *args)
        return send

    monkeypatch.setattr(socket.socket, "send", recorder(socket.socket.send))
    monkeypatch.setattr(socket.socket, "sendmsg", recorder(socket.socket.sendmsg))
    return sends


def test_rest_connections_are_kept_alive_with_nagles_algorithm_off(client_sends):
    """With Nagle's algorithm on, a request's second write (a large body, sent after the
    headers) would wait for the server's delayed ACK of the first."""
    peers = []

    def do_GET(handler):
        peers.append(handler.client_address)
        answer_json(handler, 200, STATUS_JSON)

    with http_stub(do_GET=do_GET) as port:
        with ServingClient(f"http://127.0.0.1:{port}", "toy", retries=0) as client:
            for _ in range(3):
                assert client.status()[0]["state"] == "AVAILABLE"
    assert len(peers) == 3 and len(set(peers)) == 1  # one connection, kept alive
    assert len(client_sends[port]) == 3 and all(nodelay for _, nodelay in client_sends[port])


def test_rest_request_headers_and_a_small_body_go_out_in_one_write(client_sends):
    """A second write would cost the server a second read and wake-up on every request: the
    headers and the body leave in one write, and a large body arrives whole."""
    from glomo_tf.serving.rest_client import RestTransport
    bodies = []

    def do_POST(handler):
        bodies.append(json.loads(handler.rfile.read(int(handler.headers["Content-Length"]))))
        answer_json(handler, 200, {"received": len(bodies)})

    small, large = {"text": "x" * 100}, {"text": "y" * (1 << 17)}
    with http_stub(do_POST=do_POST) as port:
        transport = RestTransport(f"127.0.0.1:{port}", "toy")
        try:
            for body, answer in ((small, 1), (large, 2)):
                payload = transport.request("POST", "/v1/models/toy:predict", json.dumps(body))
                assert json.loads(payload) == {"received": answer}
        finally:
            transport.close()
    first, *rest = client_sends[port]
    assert first[0].startswith(b"POST /v1/models/toy:predict HTTP/1.1\r\n")
    assert first[0].endswith(json.dumps(small).encode())  # one write: headers and body
    assert rest[0][0].startswith(b"POST ") and json.dumps(large).encode().startswith(
        rest[0][0].split(b"\r\n\r\n", 1)[1])  # the large body follows its headers at once
    assert bodies == [small, large]


def test_rest_calls_from_threads_and_from_a_running_event_loop(caplog):
    """Threads share the client's kept-alive connections; a call made inside a running event
    loop (a notebook's) works too; close() and the client's collection close its session."""
    peers = []

    def do_GET(handler):
        peers.append(handler.client_address)
        answer_json(handler, 200, STATUS_JSON)

    async def inside_a_loop(client):
        return client.status()

    with http_stub(do_GET=do_GET) as port:
        client = ServingClient(f"127.0.0.1:{port}", "toy", retries=0)
        answers = []
        threads = [threading.Thread(target=lambda: answers.extend(
            client.status() + client.status())) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert asyncio.run(inside_a_loop(client)) == client.status()
        client.close()
        assert client.status()[0]["version"] == 4  # a closed client opens a fresh session
        client.close()
        never_closed = ServingClient(f"127.0.0.1:{port}", "toy", retries=0)
        assert never_closed.status()[0]["version"] == 4
        del client, never_closed
        gc.collect()
    assert len(answers) == 6 and all(a["state"] == "AVAILABLE" for a in answers)
    assert len(peers) == 10 and len(set(peers[:8])) <= 3  # at most one per thread, kept alive
    assert len(set(peers)) == len(set(peers[:8])) + 2  # after close(), and another client's
    assert not [r for r in caplog.records if "Unclosed" in r.getMessage()]


@contextlib.contextmanager
def canned_server(*answers):
    """A local server answering its n-th connection with ``answers[n]``: bytes (sent as they
    are after the connection's first request, then the connection closed), or a tuple of bytes
    and None (one per request on the connection, None: closed without answering); yields its
    port."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve():
        for answer in answers:
            try:
                connection, _ = listener.accept()
            except OSError:  # the test is over
                return
            with connection:
                for reply in answer if isinstance(answer, tuple) else (answer,):
                    connection.recv(65536)
                    if reply is None:
                        break
                    connection.sendall(reply)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()


STATUS_BODY = json.dumps({"model_version_status": [{"version": "4", "state": "AVAILABLE"}]})


@pytest.mark.parametrize("framing", ["content-length", "chunked", "until-close"])
def test_rest_answers_are_read_whole_in_every_http_framing(framing):
    body = STATUS_BODY.encode()
    if framing == "content-length":
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    elif framing == "chunked":
        parts = [body[:10], body[10:]]
        answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(
            b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"
    else:  # HTTP/1.0 without a length: the answer ends with the connection
        answer = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + body
    with canned_server(answer) as port:
        with ServingClient(f"127.0.0.1:{port}", "toy", retries=0) as client:
            assert client.status() == [{"version": 4, "state": "AVAILABLE", "error_code": "OK",
                                        "error_message": ""}]


@pytest.mark.parametrize("answer, words", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{}", "closed the connection"),
    (b"HTTZ/1.1 200 OK\r\n\r\n", "malformed HTTP answer"),
    (b"", "closed the connection"),
])
def test_a_cut_or_malformed_rest_answer_is_unavailable_not_a_traceback(answer, words):
    # A GET that got no answer at all is sent once more (aiohttp does, as RFC 9112 allows for
    # idempotent requests), so the server has the same answer for a second connection.
    with canned_server(answer, answer) as port:
        with ServingClient(f"127.0.0.1:{port}", "toy", retries=0) as client:
            with pytest.raises(ServingError, match=words) as caught:
                client.status()
    assert caught.value.code == "UNAVAILABLE"


@pytest.mark.parametrize("status, code, message", [
    (404, "NOT_FOUND", "Not Found"), (499, "CANCELLED", "HTTP status 499"),
    (599, "UNKNOWN", "HTTP status 599")])
def test_an_error_answer_without_a_body_is_named_by_its_status(status, code, message):
    answer = b"HTTP/1.1 %d X\r\nContent-Length: 0\r\n\r\n" % status
    with canned_server(answer) as port:
        with ServingClient(f"127.0.0.1:{port}", "toy", retries=0) as client:
            with pytest.raises(ServingError) as caught:
                client.status()
    assert (caught.value.code, caught.value.message, caught.value.http_status) == (
        code, message, status)


OK_STATUS = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(STATUS_BODY),
                                                                    STATUS_BODY.encode())


def test_a_kept_alive_connection_the_server_closed_is_replaced_once():
    """The server closes the connection after its first answer (as an idle timeout would): the
    next request goes out on a fresh connection, not as a retry."""
    with canned_server(OK_STATUS, OK_STATUS) as port:
        with ServingClient(f"127.0.0.1:{port}", "toy", retries=0) as client:
            assert client.status()[0]["version"] == 4
            assert client.status()[0]["version"] == 4
            assert client.attempts == 2


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_request_lost_on_a_kept_alive_connection_is_sent_again_once(method):
    """The server closes a kept-alive connection just as the next request reaches it (the race
    an idle timeout leaves): that request is sent once more on a fresh connection."""
    from glomo_tf.serving.rest_client import RestTransport
    with canned_server((OK_STATUS, None), OK_STATUS) as port:
        transport = RestTransport(f"127.0.0.1:{port}", "toy", timeout=10)
        try:
            for method_ in ("GET", method):
                payload = transport.request(method_, "/v1/models/toy",
                                            None if method_ == "GET" else "{}")
                assert json.loads(payload) == json.loads(STATUS_BODY)
        finally:
            transport.close()


def test_a_post_lost_on_a_fresh_connection_is_not_sent_again():
    from glomo_tf.serving.rest_client import RestTransport
    with canned_server((None,), OK_STATUS) as port:
        transport = RestTransport(f"127.0.0.1:{port}", "toy", timeout=10)
        try:
            with pytest.raises(ServingError, match="closed the connection before answering"):
                transport.request("POST", "/v1/models/toy", "{}")
        finally:
            transport.close()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_retries_on_unavailable_then_succeeds(protocol, stub_rest, stub_grpc):
    stub = stub_rest if protocol == "rest" else stub_grpc
    stub["fail"] = 2
    with ServingClient(stub["url"], "toy", protocol=protocol, retries=3,
                       retry_backoff=0.01) as client:
        assert client.status() == [{"version": 4, "state": "AVAILABLE", "error_code": "OK",
                                    "error_message": ""}]
    assert stub["hits"] == 3 and client.attempts == 3


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unavailable_retries_are_bounded(protocol, stub_rest, stub_grpc):
    stub = stub_rest if protocol == "rest" else stub_grpc
    stub["fail"] = 100
    with ServingClient(stub["url"], "toy", protocol=protocol, retries=1,
                       retry_backoff=0.01) as client:
        with pytest.raises(ServingError) as raised:
            client.status()
    assert raised.value.code == "UNAVAILABLE" and "warming up" in raised.value.message
    assert stub["hits"] == 2


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_timeouts_raise_deadline_exceeded_without_retrying(protocol, stub_rest, stub_grpc):
    stub = stub_rest if protocol == "rest" else stub_grpc
    stub["hold"].set()
    with ServingClient(stub["url"], "toy", protocol=protocol, retries=3, timeout=0.5) as client:
        with pytest.raises(ServingError) as raised:
            client.status()
    assert raised.value.code == "DEADLINE_EXCEEDED"
    assert client.attempts == 1


# ----------------------------------------------------------------------------- the real export

CORPUS = ["the cat sat on the mat .", "the dog ate the hat , and the cat ran !",
          "a dog and a cat sat down", "a barked dog sat on the cat"]


@pytest.fixture(scope="module")
def glomo_export(tmp_path_factory):
    """pretrain (a few steps of a tiny GlomoPretrainer) -> export_saved_model."""
    from glomo_tf import GlomoPretrainer
    from glomo_tf.data import Tokenizer
    from glomo_tf.export import export_saved_model
    tokenizer = Tokenizer.build(CORPUS, splitter="whitespace", lowercase=True)
    keras.utils.set_random_seed(3)
    model = GlomoPretrainer.from_sizes(vocabulary_size=tokenizer.vocabulary_size, hidden_dim=8,
                                       num_layers=2, num_heads=2, conv_layers=1, context_length=2,
                                       decoder_layers=1, num_positions=None, dropout=0.0)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), run_eagerly=True)  # no tracing: fast
    windows = tokenizer.encode(CORPUS * 2, max_length=8).numpy()
    history = model.fit(windows, batch_size=8, epochs=2, verbose=0).history
    assert np.all(np.isfinite(history["loss"]))
    export_dir = tmp_path_factory.mktemp("exports")
    path = export_saved_model(model, tokenizer, export_dir, "glomo", max_length=10, top_k=3)
    return dict(base=os.path.dirname(path), path=path,
                signatures=tf.saved_model.load(path).signatures, tokenizer=tokenizer)


QUERIES = ["The cat sat on the mat.", "a dog", "", "unknown words here and the cat ran off " * 3,
           "naïve café"]


def run_export(export, signature, **inputs):
    outputs = export["signatures"][signature](**{k: tf.constant(v) for k, v in inputs.items()})
    return {k: v.numpy() for k, v in outputs.items()}


def test_glomo_export_served_over_rest_and_grpc_equals_in_process(glomo_export):
    raw = np.array([q.encode() for q in QUERIES], dtype=object)
    want = run_export(glomo_export, "serving_default", text=raw)
    assert want["graphs"].ndim == 6 and want["graphs"].any()
    ids = want["token_ids"]
    with ModelServer(model_name="glomo", model_base_path=glomo_export["base"], rest_port=0,
                     grpc_port=0, file_system_poll_wait_seconds=0) as server:
        for protocol in PROTOCOLS:
            with ServingClient(target(server, protocol), "glomo", protocol=protocol) as client:
                assert_same(client.extract(QUERIES), want)
                assert_same(client.predict(QUERIES, "top_k_edges"),
                            run_export(glomo_export, "top_k_edges", text=raw))
                assert_same(client.predict({"token_ids": ids}, "graphs_from_ids"),
                            run_export(glomo_export, "graphs_from_ids", token_ids=ids))
                with pytest.raises(ServingError) as raised:
                    client.predict({"token_ids": ids + 10_000}, "graphs_from_ids")
                assert raised.value.code == "INVALID_ARGUMENT"
                assert "vocabulary_size" in raised.value.message

        # TF Serving's row format, spoken without the client: one object per text.
        request = urllib.request.Request(f"{server.rest_url}/v1/models/glomo:predict",
                                         data=json.dumps({"instances": QUERIES}).encode())
        with urllib.request.urlopen(request, timeout=120) as response:
            rows = json.loads(response.read())["predictions"]
        assert len(rows) == len(QUERIES)
        for i, row in enumerate(rows):
            assert set(row) == set(want)
            np.testing.assert_array_equal(np.array(row["graphs"], np.float32), want["graphs"][i])
            assert [t.encode() for t in row["tokens"]] == list(want["tokens"][i])
            assert row["lengths"] == want["lengths"][i] and row["truncated"] == want[
                "truncated"][i]

        # Concurrent clients, both protocols: every answer is the in-process answer for its text.
        answers = {}

        def ask(i):
            protocol = PROTOCOLS[i % 2]
            with ServingClient(target(server, protocol), "glomo", protocol=protocol) as client:
                answers[i] = client.extract([QUERIES[i % len(QUERIES)]])

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    assert sorted(answers) == list(range(8))
    for i, got in answers.items():
        # Concurrent texts may run as one batch (each answer cut back to its own length): the
        # same shapes and values, floats up to the round-off of a larger matrix product.
        want = run_export(glomo_export, "serving_default",
                          text=np.array([raw[i % len(QUERIES)]], dtype=object))
        assert set(got) == set(want)
        for name, value in want.items():
            assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
            if value.dtype.kind == "f":
                np.testing.assert_allclose(got[name], value, rtol=1e-6, atol=1e-7, err_msg=name)
            else:
                np.testing.assert_array_equal(got[name], value, err_msg=name)


def test_glomo_serve_command_in_a_subprocess(glomo_export):
    grpc_port, rest_port = free_port(), free_port()
    # Only the serve command is registered, so the test does not depend on the other commands.
    launcher = ("import functools, sys; from glomo_tf import cli; "
                "cli.build_parser = functools.partial(cli.build_parser, "
                "[('serve', 'glomo_tf.cli.serve')]); sys.exit(cli.main(sys.argv[1:]))")
    process = subprocess.Popen(
        [sys.executable, "-c", launcher, "serve", f"--port={grpc_port}",
         f"--rest_api_port={rest_port}", "--model_name=glomo",
         f"--model_base_path={glomo_export['base']}", "--file_system_poll_wait_seconds=0",
         "--tensorflow_intra_op_parallelism=1", "--tensorflow_session_parallelism=3"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    try:
        want = run_export(glomo_export, "serving_default",
                          text=np.array([q.encode() for q in QUERIES[:2]], dtype=object))
        for protocol, port in (("rest", rest_port), ("grpc", grpc_port)):
            with ServingClient(f"127.0.0.1:{port}", "glomo", protocol=protocol, timeout=30,
                               retries=0) as client:
                try:
                    client.wait_until_available(timeout=180)
                except ServingError:
                    if process.poll() is not None:
                        pytest.fail(f"glomo serve exited early: {process.communicate()[1]}")
                    raise
                assert_same(client.extract(QUERIES[:2]), want)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            _, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    assert process.returncode == 0, stderr
    assert f"Exporting HTTP/REST API at:127.0.0.1:{rest_port}" in stderr
    assert f"Running gRPC ModelServer at 127.0.0.1:{grpc_port}" in stderr
    # TensorFlow read back the pools the flags set (before the first op ran)
    assert "TensorFlow threads: intra-op 1, inter-op 3" in stderr
