"""TF Serving's REST API (https://www.tensorflow.org/tfx/serving/api_rest) on Python's http.server
(:class:`RestServer`; :mod:`glomo_tf.serving.rest_loop` serves the same API on an event loop).

Endpoints (paths are case-insensitive, as TF Serving's are; ``{l}`` is a version label)::

    GET  /v1/models/{name}[/versions/{v}|/labels/{l}]            model status
    GET  /v1/models/{name}[/versions/{v}|/labels/{l}]/metadata   model metadata (signature_def)
    POST /v1/models/{name}[/versions/{v}|/labels/{l}]:predict    predictions (row or columnar)
    POST /v1/models/{name}[/versions/{v}|/labels/{l}]:classify   tf.Example classification
    POST /v1/models/{name}[/versions/{v}|/labels/{l}]:regress    tf.Example regression

Every error is answered as ``{"error": "<message>"}`` with TF Serving's HTTP status for the error's
canonical code (400 for INVALID_ARGUMENT, 404 for NOT_FOUND, 503 for UNAVAILABLE...), plus 413 for
a body over the size limit. A request never takes the server down.
"""

import contextlib
import json
import logging
import re
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from glomo_tf.serving.errors import ServingError, from_http_status, invalid
from glomo_tf.serving.limits import Admission
from glomo_tf.serving.memory import release_free_memory
from glomo_tf.serving.monitoring import CONTENT_TYPE, Metrics
from glomo_tf.serving.tensors import (DEFAULT_LIMITS, collection_paused, columnar_json,
                                      float_tokens, is_b64_object, json_to_array, row_json,
                                      short_type)

log = logging.getLogger("glomo_tf.serving")
access_log = logging.getLogger("glomo_tf.serving.access")
LARGE_BODY = 1 << 20  # bytes of a request body after which free memory is given back

PREDICT_PATH = re.compile(r"/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?"
                          r":(classify|regress|predict)", re.IGNORECASE)
STATUS_PATH = re.compile(r"/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?"
                         r"(?:/(metadata))?", re.IGNORECASE)


def _show(value, limit=200):
    text = json.dumps(value)
    return text if len(text) <= limit else text[:limit] + "..."


class BodyTooLarge(Exception):
    pass


# ----------------------------------------------------------------------------- HTTP framing
# (shared by both front ends: the thread-per-connection handler here and rest_loop's)

CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,15}")  # a chunk-size line's digits
MALFORMED_CHUNKS = ("malformed chunked request body: a chunk size must be hex digits on their own "
                    "line, and the body must end with a 0-size chunk")


def body_length(encodings, lengths, limit):
    """How a request's body is framed, from its Transfer-Encoding and Content-Length header values:
    None for chunked, else its length (0 without a Content-Length).

    Raises:
        ServingError: INVALID_ARGUMENT for a framing this server refuses (the connection must
            then close): RFC 9112, 6.1-6.3, only "chunked" is understood, and a message with both
            framings is refused rather than guessed at (request smuggling), as are differing
            lengths (6.3) and a length that is not 1*DIGIT (RFC 9110, 8.6).
        BodyTooLarge: a Content-Length over ``limit``.
    """
    if encodings:
        if [e.strip().lower() for e in ",".join(encodings).split(",")] != ["chunked"]:
            raise invalid(f"unsupported Transfer-Encoding: {', '.join(encodings)} (only "
                          "chunked)")
        if lengths:
            raise invalid("both Transfer-Encoding and Content-Length given; send one")
        return None
    lengths = {value.strip() for value in lengths}
    if not lengths:
        return 0
    if len(lengths) > 1:
        raise invalid(f"conflicting Content-Length headers: {', '.join(sorted(lengths))}")
    length = lengths.pop()
    if not (length.isascii() and length.isdigit()):
        raise invalid(f"bad Content-Length: {length!r}")
    length = int(length)
    if length > limit:
        raise BodyTooLarge(length)
    return length


def too_large_message(size, limit):
    return (f"Request body of {size} bytes exceeds the limit of {limit} bytes "
            "(--max_request_bytes)")


def not_found_message(method, path):
    return f"Not found: {method} {path} (TF Serving's REST API is under /v1/models/)"


def body_ended_message(got, length):
    return f"request body ended after {got} of its {length} bytes (Content-Length)"


def route_of(method, path):
    """``(model name, API)`` of a request path, as the metrics label them."""
    matched = PREDICT_PATH.fullmatch(path) if method == "POST" else None
    if matched:
        return urllib.parse.unquote(matched.group(1)), matched.group(4).lower()
    matched = STATUS_PATH.fullmatch(path) if method == "GET" else None
    if matched:
        api = "GetModelMetadata" if matched.group(4) else "GetModelStatus"
        return urllib.parse.unquote(matched.group(1) or ""), api
    return "", "other"


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
        raise invalid(f"JSON Value: {_show(doc)} Is not object")
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
                              f"object: {_show(element)} keys must be equal to: "
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


# ----------------------------------------------------------------------------- handler

class RestHandler(BaseHTTPRequestHandler):
    """One connection; ``self.server`` is a :class:`RestServer`."""

    protocol_version = "HTTP/1.1"
    server_version = "glomo-serve"
    disable_nagle_algorithm = True  # an answer never waits for the ACK of the one before
    timeout = 120  # seconds a connection may sit idle

    def log_message(self, format, *args):  # http.server's line for every request
        if log.isEnabledFor(logging.DEBUG):
            log.debug("REST %s - %s", self.address_string(), format % args)

    def send_error(self, code, message=None, explain=None):
        """http.server's own refusals (a bad request line or header, an unknown method, an
        over-long line) as TF Serving's JSON errors; an unknown method is a 400 like PUT's."""
        if code == 501:
            code, message = 400, f"Malformed request: unsupported method {self.command!r}"
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # an unparsable request line: answer in 1.0
            self.request_version = "HTTP/1.0"
        self._answer, self._code = (None, 0), from_http_status(code)
        self._body_unread = False
        text = message or self.responses.get(code, ("error",))[0]
        try:
            self._send(code, json.dumps({"error": text}, ensure_ascii=False).encode("utf-8"))
        except OSError:
            pass

    # -- methods
    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")

    def do_PUT(self):
        self._handle("PUT")

    def do_DELETE(self):
        self._handle("DELETE")

    def do_PATCH(self):
        self._handle("PATCH")

    def do_HEAD(self):  # answered like PUT or DELETE: 400 (the JSON error body is not sent)
        self._handle("HEAD")

    def do_OPTIONS(self):
        if self.server.cors:
            self._send(204, b"")
        else:
            self._handle("OPTIONS")

    # -- plumbing
    def _read(self, size, deadline):
        """``size`` bytes of the body (fewer if the client closed), read by ``deadline``."""
        parts, remaining = [], size
        while remaining > 0:
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise socket.timeout
                self.connection.settimeout(left)
                part = self.rfile.read1(min(remaining, 1 << 20))
            except socket.timeout:
                raise ServingError("DEADLINE_EXCEEDED", "the request body did not arrive "
                                   f"within {self.server.body_timeout:g} s", 408) from None
            if not part:
                break
            parts.append(part)
            remaining -= len(part)
        self.connection.settimeout(self.timeout)
        return b"".join(parts)

    def _read_body(self):
        limit = self.server.limits.max_request_bytes
        deadline = time.monotonic() + self.server.body_timeout
        try:
            length = body_length(self.headers.get_all("Transfer-Encoding") or [],
                                 self.headers.get_all("Content-Length") or [], limit)
        except ServingError:
            self.close_connection = True
            raise
        if length is None:
            self.close_connection = False
            chunks, total = [], 0
            while True:
                line = self.rfile.readline(1024)
                digits = line.split(b";")[0].strip()
                if not line.endswith(b"\n") or not CHUNK_SIZE.fullmatch(digits):
                    self.close_connection = True
                    raise invalid(MALFORMED_CHUNKS)
                size = int(digits, 16)
                if size == 0:
                    while self.rfile.readline(1024).strip():  # trailers
                        pass
                    return b"".join(chunks)
                total += size
                if total > limit:
                    raise BodyTooLarge(total)
                chunk = self._read(size, deadline)
                if len(chunk) < size:
                    self.close_connection = True
                    raise invalid("chunked request body ended inside a chunk")
                chunks.append(chunk)
                self.rfile.readline(8)
        if not length:
            return b""
        body = self._read(length, deadline)
        if len(body) < length:  # the client closed its side early: never predict on a part
            self.close_connection = True
            raise invalid(body_ended_message(len(body), length))
        return body

    def _send(self, status, body, content_type="application/json"):
        self._answer = (status, len(body))
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if self.server.cors:
            self.send_header("Access-Control-Allow-Origin", "*")
            self.send_header("Access-Control-Allow-Methods", "POST, GET")
            self.send_header("Access-Control-Allow-Headers", "Content-Type")
        if self.close_connection:
            self.send_header("Connection", "close")
        # Headers and body in one write: one system call and one segment for small answers.
        self._headers_buffer.append(b"\r\n")
        if self.command != "HEAD":
            self._headers_buffer.append(body)
        self.flush_headers()

    def _send_error_json(self, status, message, code=None):
        self._code = code or from_http_status(status)
        if self._body_unread:  # the unread body makes the stream unusable
            self.close_connection = True
        self._send(status, json.dumps({"error": message}, ensure_ascii=False).encode("utf-8"))

    def _handle(self, method):
        started = time.monotonic()
        path = urllib.parse.urlsplit(self.path).path
        self._answer, self._code = (None, 0), "OK"
        self._body_unread = method in ("POST", "PUT", "PATCH")
        self._large = False
        try:
            if method == "GET" and self.server.metrics_path and path == self.server.metrics_path:
                self._send(200, self.server.metrics.exposition().encode("utf-8"),
                           CONTENT_TYPE)
                return
            self._respond(method, path)
        except ServingError as error:
            self._send_error_json(error.http_status, error.message, error.code)
        except (ConnectionError, socket.timeout):
            self.close_connection = True
            self._code = "CANCELLED"
        except Exception as error:  # a bug must not take the server down
            log.exception("REST %s %s failed", method, path)
            self._send_error_json(500, f"Internal: {type(error).__name__}: {error}", "INTERNAL")
        finally:
            self.server.finished(self, method, path, time.monotonic() - started)
            if self._large:  # its body, arrays and answer are garbage now
                release_free_memory()

    def _respond(self, method, path):
        """Reads and decodes the request holding a worker turn (the part whose memory a client
        controls), then runs it without one (the batcher bounds its own queue), and answers."""
        with contextlib.ExitStack() as turn:
            if self._body_unread:
                turn.enter_context(self.server.admission.slot(self.server.request_timeout))
            try:
                body = self._read_body() if self._body_unread else b""
                self._body_unread = False
            except BodyTooLarge as error:
                self._send_error_json(413, too_large_message(
                    error.args[0], self.server.limits.max_request_bytes), "RESOURCE_EXHAUSTED")
                return
            if not path.lower().startswith("/v1/"):
                self._send_error_json(404, not_found_message(method, path))
                return
            self._large = len(body) >= LARGE_BODY
            status, answer = self.server.dispatch(method, path, body)
        text = answer() if callable(answer) else answer
        self._send(status, text.encode("utf-8"))


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
    """What the REST front ends share: ``dispatch`` maps a request to (HTTP status, JSON text),
    ``finished`` counts and logs an answered request. Its arguments are
    :class:`RestServer`'s."""

    def _init_api(self, core, timeout_ms, cors, workers, max_queued, max_connections,
                  body_timeout, metrics_path, access_log):
        self.core = core
        self.limits = core.limits
        self.metrics = core.metrics or Metrics()
        self.request_timeout = timeout_ms / 1000 if timeout_ms and timeout_ms > 0 else None
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

    def refuse_connection(self):
        """The 503 answer (closing) of a connection over ``max_connections``, counted."""
        body = json.dumps({"error": f"the server is busy: {self.max_connections} connections "
                                    "are open (the most it takes); retry later"}).encode()
        self.metrics.record_request("", "connection", "REST", "UNAVAILABLE", 0.0)
        return (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                b"Connection: close\r\nContent-Length: " + str(len(body)).encode()
                + b"\r\n\r\n" + body)

    def finished(self, handler, method, path, seconds):
        """Count an answered request and write its access-log line."""
        model, api = route_of(method, path)
        if handler._answer[0] is not None or handler._code != "OK":
            self.metrics.record_request(model, api, "REST", handler._code, seconds)
        if self.access_log:
            status, size = handler._answer
            access_log.info('%s "%s %s" %s %d %.1fms', handler.address_string(), method,
                            handler.path, status if status is not None else "-", size,
                            seconds * 1e3)

    # -- routing
    def dispatch(self, method, path, body):
        """``(HTTP status, JSON text)``, or for a prediction ``(200, work)``: the decoded request,
        whose ``work()`` runs it and returns the JSON text."""
        matched = None
        if method == "POST":
            matched = PREDICT_PATH.fullmatch(path)
        elif method == "GET":
            matched = STATUS_PATH.fullmatch(path)
        if matched is None:
            raise invalid(f"Malformed request: {method} {path}")
        name = urllib.parse.unquote(matched.group(1) or "")
        version = matched.group(2)
        if version is not None:
            try:
                version = int(version)
            except ValueError:
                raise invalid(f"Failed to convert version: {version} to numeric.") from None
        label = matched.group(3)
        label = urllib.parse.unquote(label) if label is not None else None
        verb = matched.group(4).lower() if matched.group(4) else None
        if method == "GET":
            if verb == "metadata":
                return 200, self.metadata(name, version, label)
            return 200, self.status(name, version, label)
        if verb == "predict":
            return 200, self.predict(name, version, label, body)
        return 200, self.classify_or_regress(verb, name, version, label, body)

    def status(self, name, version, label):
        from google.protobuf import json_format
        response = self.core.status_response(name, version, label)
        return json.dumps(json_format.MessageToDict(
            response, always_print_fields_with_no_presence=True,
            preserving_proto_field_name=True), indent=1)

    def metadata(self, name, version, label):
        from google.protobuf import json_format
        from tensorflow_serving.apis import get_model_metadata_pb2
        response = self.core.metadata_response(name, version, label)
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signature_map)
        options = dict(always_print_fields_with_no_presence=True,
                       preserving_proto_field_name=True)
        return json.dumps({
            "model_spec": json_format.MessageToDict(response.model_spec, **options),
            "metadata": {"signature_def": json_format.MessageToDict(signature_map, **options)},
        }, indent=1)

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
            raise invalid(f"JSON Value: {_show(signature_name)} not formatted correctly. "
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
                       if v.dtype not in _JSON_OUTPUT_TYPES]
        if unsupported:
            raise ServingError("UNIMPLEMENTED", f"outputs of signature {signature.name!r} cannot "
                               f"be written as JSON ({', '.join(unsupported)}); use gRPC")
        return Prediction(self.core, signature, inputs, writer, self.request_timeout)


class RestServer(RestApi, ThreadingHTTPServer):
    """The REST front end on Python's ``http.server``: a thread per connection.

    Args:
        core: the :class:`~glomo_tf.serving.core.ServingCore` (its ``limits`` and ``metrics``).
        host, port: where to listen (port 0: a free port, see :attr:`port`).
        timeout_ms: how long a request may wait for a worker and then for its batch.
        cors: answer with CORS headers.
        workers, max_queued: requests with a body read and decoded at once, and waiting for
            a turn (:class:`~glomo_tf.serving.limits.Admission`; more are refused with 503).
        max_connections: open connections; one more is answered 503 and closed.
        body_timeout: seconds a request body may take to arrive (408 after).
        metrics_path: where Prometheus metrics are served (None: nowhere).
        access_log: log one line per request to the ``glomo_tf.serving.access`` logger.
    """

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, core, host="127.0.0.1", port=0, timeout_ms=30000, cors=False,
                 workers=4, max_queued=16, max_connections=64, body_timeout=30.0,
                 metrics_path=None, access_log=False):
        if ":" in host:
            self.address_family = socket.AF_INET6
        self._init_api(core, timeout_ms, cors, workers, max_queued, max_connections,
                       body_timeout, metrics_path, access_log)
        self._connections = 0
        self._connections_lock = threading.Lock()
        super().__init__((host, port), RestHandler)
        self._thread = None

    # -- connections: a thread each, up to max_connections
    def process_request(self, request, client_address):
        with self._connections_lock:
            full = self._connections >= self.max_connections
            if not full:
                self._connections += 1
        if full:
            self._refuse(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._connections_lock:
                self._connections -= 1

    def _refuse(self, request):
        answer = self.refuse_connection()
        try:
            request.settimeout(1.0)
            request.sendall(answer)
        except OSError:
            pass
        self.shutdown_request(request)

    def shutdown_request(self, request):
        """A lingering close: after the answer, read briefly what the client still sends (a
        body the server refused to read), so that closing with unread data does not reset the
        connection before the client has read the answer."""
        try:
            request.shutdown(socket.SHUT_WR)
            request.settimeout(0.1)
            drained = 0
            while drained < 1 << 20:
                chunk = request.recv(65536)
                if not chunk:
                    break
                drained += len(chunk)
        except OSError:
            pass
        self.close_request(request)

    @property
    def port(self):
        return self.server_address[1]

    def handle_error(self, request, client_address):
        """A client that goes away mid-request is one log line, not a traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, socket.timeout)):
            log.info("REST client %s:%s went away: %s", *client_address[:2],
                     type(error).__name__)
            return
        super().handle_error(request, client_address)

    def start(self):
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="glomo-serve-rest", daemon=True)
        self._thread.start()

    def stop(self):
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=30)


_JSON_OUTPUT_TYPES = {"DT_FLOAT", "DT_DOUBLE", "DT_HALF", "DT_BFLOAT16", "DT_INT8", "DT_INT16",
                      "DT_INT32", "DT_INT64", "DT_UINT8", "DT_UINT16", "DT_UINT32", "DT_UINT64",
                      "DT_BOOL", "DT_STRING"}
