"""TF Serving's REST API (https://www.tensorflow.org/tfx/serving/api_rest) on aiohttp.

Endpoints (paths are case-insensitive, as TF Serving's are; ``{l}`` is a version label)::

    GET  /v1/models/{name}[/versions/{v}|/labels/{l}]            model status
    GET  /v1/models/{name}[/versions/{v}|/labels/{l}]/metadata   model metadata (signature_def)
    POST /v1/models/{name}[/versions/{v}|/labels/{l}]:predict    predictions (row or columnar)
    POST /v1/models/{name}[/versions/{v}|/labels/{l}]:classify   tf.Example classification
    POST /v1/models/{name}[/versions/{v}|/labels/{l}]:regress    tf.Example regression

Every error is answered as ``{"error": "<message>"}`` with TF Serving's HTTP status for the error's
canonical code (400 for INVALID_ARGUMENT, 404 for NOT_FOUND, 503 for UNAVAILABLE...), plus 413 for
a body over the size limit. A request never takes the server down.

As in TF Serving, which leaves HTTP to libevent, the HTTP/1.1 mechanics (request and header
parsing, chunked bodies, keep-alive, lingering close) are a maintained library's: aiohttp and its
C parser (llhttp). :class:`RestApi` is the transport-free handler, :class:`RestServer` mounts it.
"""

import asyncio
import collections
import concurrent.futures
import contextlib
import json
import logging
import re
import socket
import threading
import time
import urllib.parse
from http import HTTPStatus

import numpy as np
from aiohttp import web, web_protocol

from glomo_tf.serving.core import message_json, metadata_json
from glomo_tf.serving.errors import ServingError, from_http_status, invalid
from glomo_tf.serving.limits import Admission, too_large
from glomo_tf.serving.monitoring import CONTENT_TYPE, Metrics
from glomo_tf.serving.tensors import (DEFAULT_LIMITS, NUMPY_DTYPES, collection_paused,
                                      columnar_json, float_tokens, is_b64_object,
                                      json_to_array, row_json, short_type, show)

log = logging.getLogger("glomo_tf.serving")
access_log = logging.getLogger("glomo_tf.serving.access")

PREDICT_PATH = re.compile(r"/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?"
                          r":(classify|regress|predict)", re.IGNORECASE)
STATUS_PATH = re.compile(r"/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?"
                         r"(?:/(metadata))?", re.IGNORECASE)
METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS")
HAS_BODY = ("POST", "PUT", "PATCH")  # requests that hold a worker turn while their body is read
JSON_HEADERS = {"Content-Type": "application/json"}
CORS_HEADERS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "POST, GET",
                "Access-Control-Allow-Headers": "Content-Type"}
# aiohttp's settings: a request or header line of up to 64 KB and 100 header lines (as Python's
# http.client allows), two minutes idle between requests, 0.1 s of reading what a client still
# sends after a refusal (so that it reads the answer before the connection closes).
MAX_LINE, MAX_HEADERS, IDLE_TIMEOUT, LINGER = 65536, 100, 120.0, 0.1
DECODE_IN_POOL = 64 << 10  # bodies of this size or more are decoded in a worker thread


def too_large_message(limit, size=None):
    return (f"Request body {f'of {size} bytes ' if size else ''}exceeds the limit of {limit} "
            "bytes (--max_request_bytes)")


def not_found_message(method, path):
    return f"Not found: {method} {path} (TF Serving's REST API is under /v1/models/)"


def error_response(status, message):
    """TF Serving's error answer: ``{"error": message}`` with the HTTP status."""
    return web.Response(status=status, headers=JSON_HEADERS, body=json.dumps(
        {"error": message}, ensure_ascii=False).encode("utf-8"))


def parse_path(method, path):
    """``(model name, version, label, verb)`` of a TF Serving REST path (``verb``: ``predict``,
    ``classify``, ``regress``, ``metadata`` or ``""`` for the status), or None."""
    pattern = PREDICT_PATH if method == "POST" else STATUS_PATH if method == "GET" else None
    matched = pattern.fullmatch(path) if pattern else None
    if matched is None:
        return None
    name, version, label, verb = matched.groups()
    return (urllib.parse.unquote(name or ""), None if version is None else int(version),
            None if label is None else urllib.parse.unquote(label), (verb or "").lower())


def route_of(method, path):
    """``(model name, API)`` of a request path, as the metrics label them."""
    parsed = parse_path(method, path)
    if parsed is None:
        return "", "other"
    name, _, _, verb = parsed
    if method == "POST":
        return name, verb
    return name, "GetModelMetadata" if verb else "GetModelStatus"


# ----------------------------------------------------------------------------- request decoding

def parse_body(body):
    """The JSON object of a request body (INVALID_ARGUMENT with the parse error otherwise)."""
    if not body.strip():
        raise invalid("JSON Parse error: The document is empty")
    try:
        with collection_paused:
            doc = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise invalid(f"JSON Parse error: the body is not UTF-8 ({error})") from None
    except json.JSONDecodeError as error:
        raise invalid(f"JSON Parse error: {error.msg} at offset: {error.pos}") from None
    except RecursionError:
        raise invalid("JSON Parse error: the document is nested too deeply") from None
    if not isinstance(doc, dict):
        raise invalid(f"JSON Value: {show(doc, 200)} Is not object")
    return doc


def decode_instances(instances, signature, limits=DEFAULT_LIMITS):
    """Row format: ``"instances": [...]`` -> ``{alias: ndarray}`` with one row per instance.

    ``limits`` bounds the elements of all instances together, checked before each is built."""
    names = sorted(signature.inputs)
    if not isinstance(instances, list):
        raise invalid("Excepting 'instances' to be an list/array")
    if not instances:
        raise invalid("No values in 'instances' array: an empty batch cannot be predicted")
    if not names:
        raise invalid(f"Failed to get input map for signature: {signature.name}")

    def is_object(value):
        return isinstance(value, dict) and not is_b64_object(value)

    objects = is_object(instances[0])
    if not objects and len(names) > 1:
        raise invalid("instances is a plain list, but expecting list of objects as multiple input "
                      f"tensors required as per tensorinfo_map (inputs: {', '.join(names)})")
    columns = {name: [] for name in names}
    elements = 0
    for index, element in enumerate(instances):
        if objects:
            if not is_object(element):
                raise invalid(f"Expecting object but got {type(element).__name__} at item "
                              f"{index} of input list")
            unknown = sorted(set(element) - set(names))
            if unknown:
                raise invalid(f"Failed to process element: {index} key: {unknown[0]} of "
                              f"'instances' list. Error: JSON object: does not have named input: "
                              f"{unknown[0]} (signature {signature.name!r} takes: "
                              f"{', '.join(names)})")
            if set(element) != set(names):
                raise invalid(f"Failed to process element: {index} of 'instances' list. JSON "
                              f"object: {show(element, 200)} keys must be equal to: "
                              f"{','.join(names)}")
            items = element.items()
        else:
            if is_object(element):
                raise invalid(f"Expecting value/list but got object at item {index} of input "
                              "list")
            items = [(names[0], element)]
        for name, value in items:
            try:
                array = json_to_array(value, signature.inputs[name].dtype, limits, elements)
            except ServingError as error:
                raise ServingError(error.code, f"Failed to process element: {index} key: {name} "
                                   f"of 'instances' list. Error: {error.message}",
                                   error.http_status) from None
            column = columns[name]
            if column and array.shape != column[0].shape:
                raise invalid(f"Failed to process element: {index} key: {name} of 'instances' "
                              f"list. Error: Expecting shape {list(column[0].shape)} but got: "
                              f"{list(array.shape)} (all instances must have the same shape)")
            column.append(array)
            elements += array.size
    return {name: np.stack(column) for name, column in columns.items()}


def decode_inputs(value, signature, limits=DEFAULT_LIMITS):
    """Columnar format: ``"inputs": value | {alias: value}`` -> ``{alias: ndarray}``."""
    names = sorted(signature.inputs)
    if not names:
        raise invalid(f"Failed to get input map for signature: {signature.name}")
    if not isinstance(value, dict) or is_b64_object(value):
        if len(names) > 1:
            raise invalid("inputs is a plain value/list, but expecting an object as multiple "
                          f"input tensors required as per tensorinfo_map (inputs: "
                          f"{', '.join(names)})")
        return {names[0]: json_to_array(value, signature.inputs[names[0]].dtype, limits)}
    unknown = sorted(set(value) - set(names))
    if unknown:
        raise invalid(f"'inputs' object has unknown input(s): {', '.join(unknown)} (signature "
                      f"{signature.name!r} takes: {', '.join(names)})")
    inputs, elements = {}, 0
    for name in names:
        if name not in value:
            raise invalid(f"Missing named input: {name} in 'inputs' object.")
        try:
            inputs[name] = json_to_array(value[name], signature.inputs[name].dtype, limits,
                                         elements)
            elements += inputs[name].size
        except ServingError as error:
            raise ServingError(error.code, f"input {name}: {error.message}",
                               error.http_status) from None
    return inputs


# ----------------------------------------------------------------------------- the API

class Prediction:
    """A decoded predict request: calling it runs it (waiting for its batch) and returns the
    answer's JSON text; a front end that must not wait hands ``signature`` and ``inputs`` to
    :meth:`~glomo_tf.serving.core.ServingCore.submit` and writes the outputs with ``writer``."""

    __slots__ = ("core", "signature", "inputs", "writer", "timeout")

    def __init__(self, core, signature, inputs, writer, timeout):
        self.core = core
        self.signature = signature
        self.inputs = inputs
        self.writer = writer
        self.timeout = timeout

    def __call__(self):
        return self.writer(self.core.predict(self.signature, self.inputs, timeout=self.timeout))


class RestApi:
    """TF Serving's REST API without its transport, as TF Serving's ``HttpRestApiHandler`` is:
    :meth:`dispatch` maps ``(method, path, body)`` to ``(HTTP status, answer)``, raising a
    :class:`~glomo_tf.serving.errors.ServingError` whose canonical code gives the HTTP status.

    Args:
        core: the :class:`~glomo_tf.serving.core.ServingCore` (models, batcher, limits).
        timeout_ms: how long a request may wait for a worker turn and then for its batch.
    """

    def __init__(self, core, timeout_ms=30000):
        self.core = core
        self.limits = core.limits
        self.request_timeout = timeout_ms / 1000 if timeout_ms and timeout_ms > 0 else None

    # -- routing
    def dispatch(self, method, path, body):
        """``(HTTP status, JSON text)``, or for a prediction ``(200, work)``: the decoded request,
        whose ``work()`` runs it and returns the JSON text."""
        parsed = parse_path(method, path)
        if parsed is None:
            raise invalid(f"Malformed request: {method} {path}")
        name, version, label, verb = parsed
        if verb == "metadata":
            return 200, self.metadata(name, version, label)
        if verb == "predict":
            return 200, self.predict(name, version, label, body)
        if verb:
            return 200, self.classify_or_regress(verb, name, version, label, body)
        return 200, self.status(name, version, label)

    def status(self, name, version, label):
        return json.dumps(message_json(self.core.status_response(name, version, label)), indent=1)

    def metadata(self, name, version, label):
        return json.dumps(metadata_json(self.core.metadata_response(name, version, label)),
                          indent=1)

    def classify_or_regress(self, verb, name, version, label, body):
        from glomo_tf.serving import inference
        doc = parse_body(body)
        signature_name = doc.get("signature_name", "")
        if not isinstance(signature_name, str):
            raise invalid("'signature_name' key must be a string value.")
        servable = self.core.manager.resolve(name, version, label)
        signature = servable.signature(signature_name)
        serialized = inference.serialized_examples_from_json(doc, verb,
                                                             self.limits.max_request_bytes)
        return lambda: self._classify_or_regress(verb, signature, serialized)

    def _classify_or_regress(self, verb, signature, serialized):
        from glomo_tf.serving import inference
        if verb == "classify":
            results = inference.classify(self.core, signature, serialized, self.request_timeout)
            rows = []
            for classes in results:
                scores = float_tokens(np.array([score for _, score in classes], np.float32))
                rows.append("[" + ", ".join(
                    f"[{json.dumps(label.decode('utf-8', 'replace'), ensure_ascii=False)}, "
                    f"{score}]" for (label, _), score in zip(classes, scores.tolist())) + "]")
            return '{"results": [' + ", ".join(rows) + "]}"
        values = inference.regress(self.core, signature, serialized, self.request_timeout)
        return '{"results": [' + ", ".join(float_tokens(np.array(values, np.float32)).tolist()) \
            + "]}"

    def predict(self, name, version, label, body):
        doc = parse_body(body)
        signature_name = doc.get("signature_name", "")
        if not isinstance(signature_name, str):
            raise invalid(f"JSON Value: {show(signature_name, 200)} not formatted correctly. "
                          "'signature_name' key must be a string value.")
        servable = self.core.manager.resolve(name, version, label)
        signature = servable.signature(signature_name)
        if "instances" in doc and "inputs" in doc:
            raise invalid("Not formatted correctly expecting only one of 'inputs' or "
                          "'instances' keys to exist")
        if "instances" in doc:
            inputs, writer = decode_instances(doc["instances"], signature, self.limits), row_json
        elif "inputs" in doc:
            inputs, writer = decode_inputs(doc["inputs"], signature, self.limits), columnar_json
        else:
            raise invalid("Missing 'inputs' or 'instances' key")
        unsupported = [f"{k}: {short_type(v.dtype)}" for k, v in signature.outputs.items()
                       if v.dtype not in NUMPY_DTYPES]
        if unsupported:
            raise ServingError("UNIMPLEMENTED", f"outputs of signature {signature.name!r} cannot "
                               f"be written as JSON ({', '.join(unsupported)}); use gRPC")
        return Prediction(self.core, signature, inputs, writer, self.request_timeout)


class _Exchange:
    """One request's bookkeeping: the answer's status and size, its canonical code, and the
    ``(model, API)`` its metrics count it under when not its path's."""

    __slots__ = ("status", "size", "code", "cancel", "route")

    def __init__(self):
        self.status, self.size, self.code, self.cancel, self.route = None, 0, "OK", None, None


class _Connection(web_protocol.RequestHandler):
    """aiohttp's connection handler, whose own refusals (a malformed request line, header or
    chunked body; a head over the size limits) are answered as TF Serving's JSON errors and
    logged as one line, not as a server error with a traceback."""

    def handle_error(self, request, status=500, exc=None, message=None):
        if request.writer.output_size > 0:
            raise ConnectionError("the answer was already being sent")
        lines = (line.strip() for line in (message or HTTPStatus(status).phrase).splitlines())
        text = " ".join(line for line in lines if line.strip("^ "))  # without the caret line
        log.info("REST client %s refused: %s %s", request.remote, status, text)
        answer = error_response(status, text)
        answer.force_close()
        return answer


class _Server(web.Server):
    """aiohttp's low-level server, counting connections for the cap of :class:`RestServer`."""

    def __init__(self, rest, **settings):
        super().__init__(rest.handle, request_factory=self._request, handler_cancellation=True,
                         loop=rest.loop, **settings)
        self.rest = rest

    def __call__(self):
        return _Connection(self, loop=self.rest.loop, **self._kwargs)

    def _request(self, message, payload, protocol, writer, task):
        return web.BaseRequest(message, payload, protocol, writer, task, self.rest.loop,
                               client_max_size=self.rest.limits.max_request_bytes)

    def connection_made(self, handler, transport):
        rest = self.rest
        (rest.open if len(rest.open) < rest.max_connections else rest.over).add(handler)
        super().connection_made(handler, transport)

    def connection_lost(self, handler, exc=None):
        self.rest.open.discard(handler)
        self.rest.over.discard(handler)
        exchange = self.rest.waiting.pop(handler, None)
        if exchange is not None:  # its request is still being served: take it off the queue
            exchange.code = "CANCELLED"
            if exchange.cancel is not None:
                exchange.cancel()
            peer = handler.transport.get_extra_info("peername") if handler.transport else None
            peer = peer[:2] if isinstance(peer, tuple) else (peer, "")
            log.info("REST client %s:%s went away: %s", *peer,
                     type(exc).__name__ if exc else "closed")
        super().connection_lost(handler, exc)


class RestServer(RestApi):
    """TF Serving's REST API on aiohttp: one event loop reads and answers every connection.

    A prediction is queued on the batcher without a thread waiting for it
    (:meth:`~glomo_tf.serving.core.ServingCore.submit`); the batch thread hands the outputs back
    to the loop, which writes the answers. Other work (model status and metadata,
    classify/regress, a prediction without a batcher, decoding a body of 64 KB or more) runs in
    a pool of ``workers`` threads, so that the loop never waits on a model or a large parse.

    Args:
        core: the :class:`~glomo_tf.serving.core.ServingCore` (its ``limits`` and ``metrics``).
        host, port: where to listen (port 0: a free port, see :attr:`port`).
        timeout_ms: how long a request may wait for a worker and then for its batch.
        cors: answer with CORS headers.
        workers, max_queued: requests with a body read and decoded at once, and waiting for
            a turn (:class:`~glomo_tf.serving.limits.Admission`; more are refused with 503).
        max_connections: open connections; a request on one more is answered 503 and closed.
        body_timeout: seconds a request body may take to arrive (408 after).
        metrics_path: where Prometheus metrics are served (None: nowhere).
        access_log: log one line per request to the ``glomo_tf.serving.access`` logger.
    """

    def __init__(self, core, host="127.0.0.1", port=0, timeout_ms=30000, cors=False,
                 workers=4, max_queued=16, max_connections=64, body_timeout=30.0,
                 metrics_path=None, access_log=False):
        super().__init__(core, timeout_ms)
        self.metrics = core.metrics or Metrics()
        self.cors = cors
        self.admission = Admission(workers, max_queued, "REST", "--rest_api_num_threads")
        self.max_connections = max_connections
        self.body_timeout = body_timeout
        self.metrics_path = metrics_path
        self.access_log = access_log
        self.metrics.gauge(":glomo:serving:queue_depth", "queue", "REST",
                           lambda: self.admission.waiting)
        self.metrics.gauge(":glomo:serving:running_requests", "entrypoint", "REST",
                           lambda: self.admission.running)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.create_server((host, port), family=family, backlog=128)
        self.pool = concurrent.futures.ThreadPoolExecutor(workers,
                                                          thread_name_prefix="glomo-serve-rest")
        self.open, self.over = set(), set()  # connections served, and those over the cap
        self.waiting = {}  # connection -> the exchange of its request being served
        self._turns = collections.deque()  # futures of requests waiting for a turn
        self.loop = self._server = self._thread = None

    @property
    def port(self):
        return self.socket.getsockname()[1]

    @property
    def connections(self):
        """Connections open and served (one over ``max_connections`` is not)."""
        return len(self.open)

    # -- one request
    async def handle(self, request):
        started = time.monotonic()
        exchange = _Exchange()
        path = request.rel_url.raw_path
        self.waiting[request.protocol] = exchange
        over = request.protocol in self.over
        try:
            if over:  # a connection over the cap: refused, then closed
                exchange.route = ("", "connection")
                raise ServingError("UNAVAILABLE", f"the server is busy: {self.max_connections} "
                                   "connections are open (the most it takes); retry later")
            answer = await self._serve(request, exchange, path)
        except ServingError as error:
            answer = self._error(exchange, error.http_status, error.message, error.code)
        except (ConnectionError, asyncio.CancelledError):  # the client went away
            exchange.code = "CANCELLED"
            self._finished(request, path, exchange, time.monotonic() - started)
            raise
        except Exception as error:  # a bug must not take the server down
            log.exception("REST %s %s failed", request.method, path)
            answer = self._error(exchange, 500, f"Internal: {type(error).__name__}: {error}",
                                 "INTERNAL")
        finally:
            self.waiting.pop(request.protocol, None)
        if over or exchange.code != "OK" and request.can_read_body:
            answer.force_close()  # over the cap, or its body maybe unread
        if self.cors:
            answer.headers.update(CORS_HEADERS)
        exchange.status, exchange.size = answer.status, answer.content_length or 0
        self._finished(request, path, exchange, time.monotonic() - started)
        return answer

    async def _serve(self, request, exchange, path):
        method = request.method
        if method == "OPTIONS" and self.cors:
            return web.Response(status=204)
        if method == "GET" and self.metrics_path and path == self.metrics_path:
            return web.Response(body=self.metrics.exposition().encode("utf-8"),
                                headers={"Content-Type": CONTENT_TYPE})
        if method not in METHODS:
            raise invalid(f"Malformed request: unsupported method {method!r}")
        if method not in HAS_BODY:
            return await self._run(exchange, *self._dispatch(method, path, b""))
        async with self._turn():
            body = await self._read_body(request)
            if len(body) >= DECODE_IN_POOL:  # a large parse must not hold up the others
                status, answer = await self.loop.run_in_executor(
                    self.pool, self._dispatch, method, path, body)
            else:
                status, answer = self._dispatch(method, path, body)
        return await self._run(exchange, status, answer)

    def _dispatch(self, method, path, body):
        if not path.lower().startswith("/v1/"):
            raise ServingError("NOT_FOUND", not_found_message(method, path))
        return self.dispatch(method, path, body)

    async def _read_body(self, request):
        limit = self.limits.max_request_bytes
        if request.content_length is not None and request.content_length > limit:
            raise too_large(too_large_message(limit, request.content_length))
        if request.version >= (1, 1) and request.headers.get("Expect", "").lower() == \
                "100-continue":  # as aiohttp's router does for its routes
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0
        try:
            return await within(request.read(), self.body_timeout)
        except asyncio.TimeoutError:
            raise ServingError("DEADLINE_EXCEEDED", "the request body did not arrive within "
                               f"{self.body_timeout:g} s", 408) from None
        except web.HTTPRequestEntityTooLarge:
            raise too_large(too_large_message(limit)) from None
        except web_protocol.RequestPayloadError as error:  # a malformed chunked body
            raise invalid(f"malformed request body: {error}") from None

    @contextlib.asynccontextmanager
    async def _turn(self):
        """Holds one of the admission's turns, waiting for it without a thread."""
        if not self.admission.take():
            waiter = self.loop.create_future()
            self._turns.append(waiter)
            try:
                await asyncio.wait_for(asyncio.shield(waiter), self.request_timeout)
            except (asyncio.TimeoutError, asyncio.CancelledError) as stopped:
                if waiter.done():  # the turn came as the wait ended: hand it on
                    self._give_turn_back()
                else:
                    waiter.cancel()
                    self._turns.remove(waiter)
                    self.admission.leave_queue()
                if isinstance(stopped, asyncio.CancelledError):
                    raise
                raise self.admission.late(self.request_timeout) from None
        try:
            yield
        finally:
            self._give_turn_back()

    def _give_turn_back(self):
        self.admission.give_back()
        while self._turns and self.admission.running < self.admission.workers:
            waiter = self._turns.popleft()
            self.admission.leave_queue()
            self.admission.take()  # a turn is free: held from here by the waiter
            waiter.set_result(None)

    async def _run(self, exchange, status, answer):
        if isinstance(answer, Prediction):
            done = self.loop.create_future()

            def finished(outputs, error):
                self.loop.call_soon_threadsafe(_settle, done, outputs, error)

            exchange.cancel = self.core.submit(answer.signature, answer.inputs, finished)
            if exchange.cancel is not None:
                try:
                    outputs = await within(done, self.request_timeout)
                except asyncio.TimeoutError:
                    exchange.cancel()
                    raise ServingError("DEADLINE_EXCEEDED", "the request was not served within "
                                       f"{self.request_timeout:.3f} s", 504) from None
                finally:
                    exchange.cancel = None  # the queued task refers back: no cycle is left
                text = answer.writer(outputs)
            else:
                text = await self.loop.run_in_executor(self.pool, answer)
        elif callable(answer):
            text = await self.loop.run_in_executor(self.pool, answer)
        else:
            text = answer
        return web.Response(status=status, body=text.encode("utf-8"), headers=JSON_HEADERS)

    @staticmethod
    def _error(exchange, status, message, code=None):
        exchange.code = code or from_http_status(status)
        return error_response(status, message)

    def _finished(self, request, path, exchange, seconds):
        """Count an answered request and write its access-log line."""
        model, api = exchange.route or route_of(request.method, path)
        self.metrics.record_request(model, api, "REST", exchange.code, seconds)
        if self.access_log:
            access_log.info('%s "%s %s" %s %d %.1fms', request.remote, request.method,
                            request.path_qs, exchange.status or "-", exchange.size,
                            seconds * 1e3)

    # -- lifecycle
    def start(self):
        """Serves on a thread of its own until :meth:`stop`."""
        ready = threading.Event()

        def run():
            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)

            async def serve():
                self._server = _Server(
                    self, keepalive_timeout=IDLE_TIMEOUT, lingering_time=LINGER,
                    max_line_size=MAX_LINE, max_field_size=MAX_LINE, max_headers=MAX_HEADERS,
                    access_log=None, auto_decompress=False)
                return await self.loop.create_server(self._server, sock=self.socket)
            listening = self.loop.run_until_complete(serve())
            ready.set()
            self.loop.run_forever()
            listening.close()
            self.loop.run_until_complete(self._server.shutdown(1.0))
            self.loop.close()

        self._thread = threading.Thread(target=run, name="glomo-serve-rest", daemon=True)
        self._thread.start()
        ready.wait(30)

    def stop(self):
        if self.loop is not None and self._thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=30)
            self._thread = None
        else:
            self.socket.close()
        self.pool.shutdown(wait=False, cancel_futures=True)


async def within(awaitable, seconds):
    """``await awaitable``, raising ``asyncio.TimeoutError`` after ``seconds`` (None: never);
    on Python 3.11 and later without the task ``asyncio.wait_for`` wraps a coroutine in."""
    if not hasattr(asyncio, "timeout"):
        return await asyncio.wait_for(awaitable, seconds)
    async with asyncio.timeout(seconds):
        return await awaitable


def _settle(future, outputs, error):
    if not future.done():
        if error is None:
            future.set_result(outputs)
        else:
            future.set_exception(error)

