"""A client for TF Serving (or ``glomo serve``) over REST or gRPC that returns NumPy arrays.

::

    from glomo_tf.serving import ServingClient
    client = ServingClient("localhost:8501", model_name="glomo")              # REST
    client = ServingClient("localhost:8500", model_name="glomo", protocol="grpc")
    outputs = client.extract(["the cat sat", "on the mat"])    # {"tokens": ..., "graphs": ...}
    outputs = client.predict({"x": [[1.0, 2.0, 3.0]], "k": [2]}, signature_name="scale")

Inputs are cast to the dtypes the model's signature declares (read once from its metadata), and
outputs come back as arrays of the declared dtypes (strings as ``bytes`` objects, like
``tensor.numpy()``), so the result of a served call equals the in-process call of the same
SavedModel. Over REST the columnar format is used, so outputs of any shape (scalars, outputs whose
first dimension is not the batch) come back.

Every call has a ``timeout`` (seconds; over REST it bounds each socket operation, over gRPC it is
the call's deadline) and is retried ``retries`` times, with exponential backoff, when the server is
UNAVAILABLE (connection refused or reset, HTTP 503, gRPC UNAVAILABLE). Failures raise
:class:`~glomo_tf.serving.errors.ServingError` with the server's canonical status code and message.
"""

import json
import socket
import threading
import time
import urllib.parse
from http.client import responses

import numpy as np

from glomo_tf.serving.core import message_json, metadata_json
from glomo_tf.serving.errors import CODES, ServingError, from_http_status
from glomo_tf.serving.tensors import (NUMPY_DTYPES, array_to_json, json_to_numpy, loads,
                                      read_outputs)

DEFAULT_SIGNATURE = "serving_default"


def _metadata_signatures(metadata):
    """REST-form metadata -> ``{signature: {"inputs": {alias: dtype}, "outputs": {...}}}`` and
    ``{signature: {output: [dims] or None}}`` (-1 for unknown dims, None for unknown rank)."""
    signatures, shapes = {}, {}
    for name, definition in metadata["metadata"]["signature_def"]["signature_def"].items():
        signatures[name] = {side: {alias: info.get("dtype", "DT_INVALID")
                                   for alias, info in definition.get(side, {}).items()}
                            for side in ("inputs", "outputs")}
        shapes[name] = {}
        for alias, info in definition.get("outputs", {}).items():
            shape = info.get("tensor_shape", {})
            shapes[name][alias] = (None if shape.get("unknown_rank") else
                                   [int(d.get("size", -1)) for d in shape.get("dim", [])])
    return signatures, shapes


def _restore_empty_dims(array, shape):
    """JSON cannot show the dimensions after an empty one (``[[]]`` for a ``[1, 0, 5]`` tensor):
    put them back from the signature's rank (static dims as declared, unknown ones as 0)."""
    if array.size or shape is None or array.ndim >= len(shape):
        return array
    tail = [d if d >= 0 else 0 for d in shape[array.ndim:]]
    return array.reshape(array.shape + tuple(tail))


def _to_array(value, dtype_name, alias):
    """A user's input value -> ndarray of the signature's dtype (strings as bytes objects)."""
    if dtype_name == "DT_STRING":
        array = np.asarray(value, dtype=object)
        flat = []
        for item in array.ravel().tolist():
            if isinstance(item, str):
                flat.append(item.encode("utf-8"))
            elif isinstance(item, (bytes, bytearray, np.bytes_)):
                flat.append(bytes(item))
            else:
                raise TypeError(f"input {alias!r} takes strings, got {type(item).__name__}")
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
        return out.reshape(array.shape)
    if dtype_name not in NUMPY_DTYPES:
        raise TypeError(f"input {alias!r} has type {dtype_name}, which this client cannot send")
    return np.asarray(value, dtype=NUMPY_DTYPES[dtype_name])


class _Answer:
    """What httptools' parser reads of one answer (its callbacks)."""

    def __init__(self, parser):
        self.parser = parser(self)
        self.body, self.head, self.complete, self.delimited = [], False, False, False
        self.keep_alive = False

    def on_headers_complete(self):
        self.head = True

    def on_header(self, name, value):
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.delimited = True

    def on_body(self, data):
        self.body.append(data)

    def on_message_complete(self):
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()  # the parser resets after this


class _Connection:
    """One kept-alive HTTP/1.1 connection, Nagle's algorithm off: a request goes out in one
    write (its headers and a body of up to :attr:`ONE_WRITE_LIMIT` bytes: a second write would
    cost the server a second read and wake-up), and its answer is read by httptools' parser
    (llhttp, in C; the server's is the same parser under aiohttp)."""

    ONE_WRITE_LIMIT = 1 << 16  # bytes of body joined to the headers (a larger one is not copied)

    def __init__(self, scheme, host, port, timeout):
        try:
            import httptools
        except ImportError:
            raise ImportError("ServingClient's REST protocol reads answers with httptools: "
                              "pip install 'glomo_tf[serve]' (or use protocol='grpc')") from None
        self._parser, self._parse_error = httptools.HttpResponseParser, httptools.HttpParserError
        self.sock = socket.create_connection((host, port), timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if scheme == "https":
            import ssl
            self.sock = ssl.create_default_context().wrap_socket(self.sock, server_hostname=host)
        self.host = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.answered = 0  # answers read: a closed connection that had served one is retried

    def send(self, data):
        self.sock.sendall(data)

    def request(self, method, path, body=None):
        """``(status, payload, keep_alive)`` of one request (``body``: JSON bytes or None)."""
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        head = (head + "\r\n").encode("latin-1")
        if body is None or len(body) <= self.ONE_WRITE_LIMIT:
            self.send(head + (body or b""))
        else:
            self.send(head)
            self.send(body)
        answer = _Answer(self._parser)
        try:
            while not answer.complete:
                data = self.sock.recv(1 << 18)
                if not data:
                    if answer.head and not answer.delimited:  # ends with the connection
                        break
                    raise ConnectionResetError("the server closed the connection before "
                                               "answering")
                try:
                    answer.parser.feed_data(data)
                except self._parse_error as error:
                    raise ValueError(f"a malformed HTTP answer: {error}") from None
            self.answered += 1
            return answer.parser.get_status_code(), b"".join(answer.body), answer.keep_alive
        finally:
            answer.parser = None  # answered or not, no reference cycle is left behind

    def close(self):
        self.sock.close()


class ServingClient:
    """Calls one served model.

    Args:
        target: ``host:port`` (``http://host:port`` also works for REST).
        model_name: the model's name on the server.
        protocol: ``"rest"`` or ``"grpc"``.
        version / version_label: pin a version (default: the latest the server has).
        timeout: seconds per call (see the module docstring).
        retries: extra attempts when the server is UNAVAILABLE.
        retry_backoff: seconds before the first retry; doubled each time (at most 5 s).
        max_message_bytes: largest gRPC message sent or received.
    """

    def __init__(self, target, model_name="default", *, protocol="rest", version=None,
                 version_label=None, timeout=30.0, retries=3, retry_backoff=0.1,
                 max_message_bytes=512 << 20):
        if protocol not in ("rest", "grpc"):
            raise ValueError(f"protocol must be 'rest' or 'grpc', got {protocol!r}")
        if version is not None and version_label is not None:
            raise ValueError("give version or version_label, not both")
        if retries < 0 or timeout is not None and timeout <= 0:
            raise ValueError("retries must be >= 0 and timeout > 0")
        self.protocol = protocol
        self.model_name = model_name
        self.version = None if version is None else int(version)
        self.version_label = version_label
        self.timeout = timeout
        self.retries = retries
        self.retry_backoff = retry_backoff
        self.attempts = 0  # calls made to the server, retries included (for diagnostics)
        self._signatures = None
        self._output_shapes = {}
        if protocol == "rest":
            parsed = urllib.parse.urlsplit(target if "://" in target else "http://" + target)
            if parsed.scheme not in ("http", "https") or not parsed.hostname:
                raise ValueError(f"cannot read a REST address from {target!r}")
            self._http = (parsed.scheme, parsed.hostname, parsed.port or
                          (443 if parsed.scheme == "https" else 80))
            self.target = f"{parsed.scheme}://{parsed.netloc}"
            self._local = threading.local()
            prefix = f"/v1/models/{urllib.parse.quote(model_name, safe='')}"
            if self.version is not None:
                prefix += f"/versions/{self.version}"
            elif version_label is not None:
                prefix += f"/labels/{urllib.parse.quote(version_label, safe='')}"
            self._prefix = prefix
        else:
            import grpc
            from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc
            self.target = target.split("://", 1)[-1]
            self._channel = grpc.insecure_channel(self.target, options=[
                ("grpc.max_receive_message_length", max_message_bytes),
                ("grpc.max_send_message_length", max_message_bytes)])
            self._prediction = prediction_service_pb2_grpc.PredictionServiceStub(self._channel)
            self._model = model_service_pb2_grpc.ModelServiceStub(self._channel)

    # -- public API
    def status(self):
        """``[{"version", "state", "error_code", "error_message"}]``, newest version first."""
        if self.protocol == "rest":
            doc = self._document("GET", self._prefix)
            entries = doc.get("model_version_status", [])
        else:
            from tensorflow_serving.apis import get_model_status_pb2
            request = get_model_status_pb2.GetModelStatusRequest()
            self._fill_spec(request.model_spec)
            response = self._retrying(lambda: self._grpc(self._model.GetModelStatus, request))
            entries = message_json(response).get("model_version_status", [])
        return [{"version": int(e["version"]), "state": e.get("state", "UNKNOWN"),
                 "error_code": e.get("status", {}).get("error_code", "OK"),
                 "error_message": e.get("status", {}).get("error_message", "")}
                for e in entries]

    def metadata(self):
        """The model's metadata in TF Serving's REST form (``model_spec`` + ``signature_def``)."""
        if self.protocol == "rest":
            return self._document("GET", self._prefix + "/metadata")
        from tensorflow_serving.apis import get_model_metadata_pb2
        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        self._fill_spec(request.model_spec)
        return metadata_json(self._retrying(
            lambda: self._grpc(self._prediction.GetModelMetadata, request)))

    def signature(self, name=DEFAULT_SIGNATURE):
        """``{"inputs": {alias: dtype}, "outputs": {alias: dtype}}`` of a signature (cached)."""
        if self._signatures is None or name not in self._signatures:
            self._signatures, self._output_shapes = _metadata_signatures(self.metadata())
        if name not in self._signatures:
            raise ServingError("INVALID_ARGUMENT", f"model {self.model_name!r} has no signature "
                               f"{name!r} (it has: {', '.join(sorted(self._signatures))})")
        return self._signatures[name]

    def predict(self, inputs, signature_name=DEFAULT_SIGNATURE, output_filter=None):
        """Run a signature: ``inputs`` is ``{alias: array-like}``, or one array-like when the
        signature takes a single input. Returns ``{alias: ndarray}`` (only ``output_filter``'s
        aliases when given)."""
        spec = self.signature(signature_name)
        if not isinstance(inputs, dict):
            if len(spec["inputs"]) != 1:
                raise ValueError(f"signature {signature_name!r} takes several inputs "
                                 f"({', '.join(sorted(spec['inputs']))}); pass a dict")
            inputs = {next(iter(spec["inputs"])): inputs}
        unknown = sorted(set(inputs) - set(spec["inputs"]))
        missing = sorted(set(spec["inputs"]) - set(inputs))
        if unknown or missing:
            raise ValueError(f"signature {signature_name!r} takes inputs "
                             f"{sorted(spec['inputs'])}; unknown: {unknown}, missing: {missing}")
        arrays = {alias: _to_array(value, spec["inputs"][alias], alias)
                  for alias, value in inputs.items()}
        if output_filter is not None:
            unknown = sorted(set(output_filter) - set(spec["outputs"]))
            if unknown:
                raise ValueError(f"signature {signature_name!r} has no outputs {unknown} (it has "
                                 f"{sorted(spec['outputs'])})")
        if self.protocol == "rest":
            outputs = self._predict_rest(arrays, signature_name, spec)
            if output_filter is not None:
                outputs = {alias: outputs[alias] for alias in output_filter}
            return outputs
        return self._predict_grpc(arrays, signature_name, output_filter)

    def extract(self, texts, signature_name=DEFAULT_SIGNATURE):
        """Send a batch of texts to a signature with one string input (the GLoMo export's
        ``serving_default``: tokens, ids, lengths and graphs come back)."""
        if isinstance(texts, (str, bytes)):
            raise TypeError("extract takes a list of texts, not a single string")
        texts = list(texts)
        if not texts:
            raise ValueError("extract needs at least one text")
        spec = self.signature(signature_name)
        if len(spec["inputs"]) != 1 or next(iter(spec["inputs"].values())) != "DT_STRING":
            raise ServingError("INVALID_ARGUMENT", f"signature {signature_name!r} does not take "
                               f"one string input (it takes {spec['inputs']})")
        return self.predict(texts, signature_name)

    def wait_until_available(self, timeout=60.0, interval=0.2):
        """Poll the status until a version is AVAILABLE; returns its number."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                entries = self.status()
                for entry in entries:
                    if entry["state"] == "AVAILABLE":
                        return entry["version"]
                errors = [f"version {e['version']}: {e['error_message']}" for e in entries
                          if e["error_code"] != "OK"]
                last = "; ".join(errors) or "no version is AVAILABLE yet"
            except ServingError as error:
                last = str(error)
            if time.monotonic() >= deadline:
                raise ServingError("UNAVAILABLE", f"model {self.model_name!r} at {self.target} "
                                   f"is not available after {timeout} s: {last}")
            time.sleep(interval)

    def close(self):
        if self.protocol == "grpc":
            self._channel.close()
        else:
            self._drop_connection()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- retries
    def _retrying(self, call):
        delay = self.retry_backoff
        for attempt in range(self.retries + 1):
            self.attempts += 1
            try:
                return call()
            except ServingError as error:
                if error.code != "UNAVAILABLE":
                    raise
                if attempt == self.retries:
                    raise ServingError("UNAVAILABLE", f"{error.message} (gave up after "
                                       f"{attempt + 1} attempts)", error.http_status) from None
            time.sleep(delay)
            delay = min(delay * 2, 5.0)

    # -- REST
    def _connection(self):
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = _Connection(*self._http, timeout=self.timeout)
            self._local.connection = connection
        return connection

    def _drop_connection(self):
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None

    def _rest(self, method, path, body=None):
        """The payload of a request's 200 answer (``body``: JSON text or None); any other
        answer raised as the :class:`ServingError` its status and ``{"error": ...}`` name."""
        data = None if body is None else body.encode("utf-8")
        while True:
            reused = False
            try:
                connection = self._connection()
                reused = connection.answered > 0
                status, payload, keep_alive = connection.request(method, path, data)
                break
            except socket.timeout:
                self._drop_connection()
                raise ServingError("DEADLINE_EXCEEDED", f"{method} {self.target}{path}: no "
                                   f"response within {self.timeout} s") from None
            except (OSError, ValueError) as error:  # ValueError: a malformed answer
                self._drop_connection()
                if not isinstance(error, ValueError) and reused:
                    continue  # a kept-alive connection the server had closed: a fresh one
                raise ServingError("UNAVAILABLE", f"{method} {self.target}{path}: "
                                   f"{type(error).__name__}: {error}") from None
        if not keep_alive:
            self._drop_connection()
        if status == 200:
            return payload
        try:
            message = loads(payload).get("error")
        except (ValueError, AttributeError):
            message = None
        if not isinstance(message, str):  # not TF Serving's {"error": ...}
            message = payload[:500].decode("utf-8", "replace") or responses.get(
                status, f"HTTP status {status}")
        raise ServingError(from_http_status(status), message, status)

    def _document(self, method, path):
        """The JSON object a GET answers."""
        doc = self._retrying(lambda: self._rest(method, path))
        try:
            doc = loads(doc)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise ServingError("INTERNAL", f"{method} {self.target}{path}: the response is not a "
                               "JSON object")
        return doc

    def _predict_rest(self, arrays, signature_name, spec):
        body = ('{"signature_name": ' + json.dumps(signature_name) + ', "inputs": {' + ", ".join(
            json.dumps(alias) + ": " + array_to_json(array) for alias, array in arrays.items())
            + "}}")
        payload = self._retrying(lambda: self._rest("POST", self._prefix + ":predict", body))
        outputs = read_outputs(payload, spec["outputs"])
        if outputs is not None:
            return outputs
        try:
            outputs = loads(payload)["outputs"]
        except (ValueError, TypeError, KeyError):
            raise ServingError("INTERNAL", "the response has no 'outputs'") from None
        if len(spec["outputs"]) == 1:
            outputs = {next(iter(spec["outputs"])): outputs}
        elif not isinstance(outputs, dict):
            raise ServingError("INTERNAL", "expected an object of outputs in the response")
        shapes = self._output_shapes.get(signature_name, {})
        return {alias: _restore_empty_dims(json_to_numpy(value, spec["outputs"].get(alias, "")),
                                           shapes.get(alias))
                for alias, value in outputs.items()}

    # -- gRPC
    def _fill_spec(self, model_spec, signature_name=None):
        model_spec.name = self.model_name
        if self.version is not None:
            model_spec.version.value = self.version
        elif self.version_label is not None:
            model_spec.version_label = self.version_label
        if signature_name is not None:
            model_spec.signature_name = signature_name

    def _grpc(self, method, request):
        import grpc
        try:
            return method(request, timeout=self.timeout)
        except grpc.RpcError as error:
            code = error.code().name if error.code() is not None else "UNKNOWN"
            raise ServingError(code if code in CODES else "UNKNOWN",
                               error.details() or code) from None

    def _predict_grpc(self, arrays, signature_name, output_filter):
        import tensorflow as tf
        from tensorflow_serving.apis import predict_pb2
        request = predict_pb2.PredictRequest()
        self._fill_spec(request.model_spec, signature_name)
        for alias, array in arrays.items():
            request.inputs[alias].CopyFrom(tf.make_tensor_proto(array))
        if output_filter is not None:
            request.output_filter.extend(output_filter)
        response = self._retrying(lambda: self._grpc(self._prediction.Predict, request))
        return {alias: tf.make_ndarray(proto) for alias, proto in response.outputs.items()}


def extract(texts, target="localhost:8501", model_name="default", *, protocol="rest",
            signature_name=DEFAULT_SIGNATURE, **options):
    """One-shot :meth:`ServingClient.extract`: ``{output: ndarray}`` for a batch of texts."""
    with ServingClient(target, model_name, protocol=protocol, **options) as client:
        return client.extract(texts, signature_name)
