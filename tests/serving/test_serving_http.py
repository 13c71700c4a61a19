"""`glomo serve`'s REST connections under hostile HTTP, over real sockets: a chunked body that
declares more than ``--max_request_bytes`` is refused with 413 as soon as the chunk's size line
arrives (TF Serving's front end, libevent, checks each declared chunk against its body limit),
and a client that closes its side of the connection is answered, never dropped."""

import json
import socket
import time

import pytest

from glomo_tf.serving.connection import llhttp_state
from glomo_tf.serving.server import ModelServer
from _serving_fixtures import write_toy_model

PREDICT = "/v1/models/toy:predict"
LIMIT = 1 << 20


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("toy")
    write_toy_model(str(base / "1"))
    with ModelServer(model_name="toy", model_base_path=str(base), rest_port=0, grpc_port=None,
                     file_system_poll_wait_seconds=0, max_request_bytes=LIMIT) as server:
        yield server


def exchange(server, payload, half_close=False, timeout=10):
    """Sends ``payload`` (then closes the sending side with ``half_close``) and returns
    ``(bytes until the server closed, seconds that took)``; a server that closes nothing within
    ``timeout`` seconds gives what came until then."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.rest_port), timeout=timeout) as client:
        client.sendall(payload)
        if half_close:
            client.shutdown(socket.SHUT_WR)
        data = b""
        try:
            while chunk := client.recv(65536):
                data += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return data, time.monotonic() - started


def answer(data):
    """``(status, the JSON body)`` of the one answer in ``data``."""
    head, _, body = data.partition(b"\r\n\r\n")
    assert head, "no answer: the connection was dropped"
    assert b"application/json" in head, head
    return int(head.split()[1]), json.loads(body)


def chunked_head():
    return (f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()


def test_the_parser_state_is_read_from_aiohttps_own_parser():
    from aiohttp.http_parser import HttpRequestParserC
    parser = HttpRequestParserC(None, None, 2 ** 16)
    state = llhttp_state(parser)
    assert state is not None and state.data == id(parser)
    assert llhttp_state(object()) is None


@pytest.mark.parametrize("chunks", [
    f"{2 ** 52:x}\r\nabc",  # one chunk of 4 PiB declared, three bytes of it sent
    f"4\r\n[1.0\r\n{LIMIT:x}\r\n]",  # a small chunk, then one that takes the body over the limit
])
def test_a_chunk_declared_over_the_limit_is_refused_at_once(server, chunks):
    data, seconds = exchange(server, chunked_head() + chunks.encode())
    status, doc = answer(data)
    assert status == 413 and "exceeds the limit of 1048576 bytes" in doc["error"], doc
    assert seconds < 5, f"answered after {seconds:.1f} s: waited for the body"
    assert b"Connection: close" in data


def test_chunks_within_the_limit_are_read_and_answered(server):
    body = json.dumps({"signature_name": "negate", "instances": [1.0, 2.0]}).encode()
    chunks = b"".join(f"{len(part):x}\r\n".encode() + part + b"\r\n"
                      for part in (body[:7], body[7:])) + b"0\r\n\r\n"
    data, _ = exchange(server, chunked_head() + chunks, half_close=True)
    status, doc = answer(data)
    assert status == 200 and doc["predictions"] == [-1.0, -2.0], doc


@pytest.mark.parametrize("head,sent,words", [
    ("Content-Length: 100\r\n", b'{"instances": [1.0, ', "after 20 of its 100 bytes"),
    ("Transfer-Encoding: chunked\r\n", b'14\r\n{"instances": [1.0, ',
     "after 20 bytes of its chunked body"),
])
def test_a_body_cut_short_by_a_half_close_gets_a_json_4xx(server, head, sent, words):
    payload = f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode() + sent
    data, seconds = exchange(server, payload, half_close=True)
    status, doc = answer(data)
    assert status == 400 and "the request body was cut short" in doc["error"], doc
    assert words in doc["error"] and seconds < 5, (doc, seconds)


def test_a_whole_request_then_a_half_close_is_answered_then_closed(server):
    body = json.dumps({"signature_name": "negate", "instances": [3.0]})
    payload = (f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
               f"{body}").encode()
    data, seconds = exchange(server, payload, half_close=True)
    status, doc = answer(data)
    assert status == 200 and doc["predictions"] == [-3.0], doc
    assert seconds < 5, f"closed after {seconds:.1f} s, not after the answer"


def test_an_idle_half_closed_connection_is_closed(server):
    data, seconds = exchange(server, b"", half_close=True)
    assert data == b"" and seconds < 5


def test_a_refused_chunk_behind_a_pipelined_request_is_still_answered(server):
    body = json.dumps({"signature_name": "negate", "instances": [5.0]})
    first = (f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
             f"{body}").encode()
    data, seconds = exchange(server, first + chunked_head() + f"{2 ** 40:x}\r\n".encode())
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and rest.startswith(b'{"predictions": [-5.0]}')
    assert b"HTTP/1.1 413 " in rest and b"Connection: close" in rest and seconds < 5, data
