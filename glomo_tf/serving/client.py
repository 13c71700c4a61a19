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

The client is a facade over two transports: REST on aiohttp's HTTP client
(:class:`~glomo_tf.serving.rest_client.RestTransport`) and gRPC
(:class:`~glomo_tf.serving.grpc_client.GrpcTransport`); it checks and casts the inputs, keeps the
signatures and retries.

Every call has a ``timeout`` (seconds; over REST it bounds connecting and each read of an
answer, over gRPC it is the call's deadline) and is retried ``retries`` times, with exponential
backoff, when the server is UNAVAILABLE (connection refused or reset, HTTP 503, gRPC
UNAVAILABLE). Failures raise
:class:`~glomo_tf.serving.errors.ServingError` with the server's canonical status code and message.
"""

import time

import numpy as np

from glomo_tf.serving.errors import ServingError
from glomo_tf.serving.tensors import NUMPY_DTYPES

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


def _input_arrays(inputs, spec, signature_name, output_filter=None):
    """``predict``'s ``inputs`` (a dict, or one value for a signature with one input) checked
    against the signature ``spec`` and cast to its dtypes: ``{alias: ndarray}``."""
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
    unknown = sorted(set(output_filter or ()) - set(spec["outputs"]))
    if unknown:
        raise ValueError(f"signature {signature_name!r} has no outputs {unknown} (it has "
                         f"{sorted(spec['outputs'])})")
    return {alias: _to_array(value, spec["inputs"][alias], alias)
            for alias, value in inputs.items()}


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
            from glomo_tf.serving.rest_client import RestTransport
            self._transport = RestTransport(target, model_name, self.version, version_label,
                                            timeout)
        else:
            from glomo_tf.serving.grpc_client import GrpcTransport
            self._transport = GrpcTransport(target, model_name, self.version, version_label,
                                            timeout, max_message_bytes)
        self.target = self._transport.target

    # -- public API
    def status(self):
        """``[{"version", "state", "error_code", "error_message"}]``, newest version first."""
        return [{"version": int(e["version"]), "state": e.get("state", "UNKNOWN"),
                 "error_code": e.get("status", {}).get("error_code", "OK"),
                 "error_message": e.get("status", {}).get("error_message", "")}
                for e in self._retrying(self._transport.status)]

    def metadata(self):
        """The model's metadata in TF Serving's REST form (``model_spec`` + ``signature_def``)."""
        return self._retrying(self._transport.metadata)

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
        arrays = _input_arrays(inputs, spec, signature_name, output_filter)
        shapes = self._output_shapes.get(signature_name, {})
        return self._retrying(lambda: self._transport.predict(
            arrays, signature_name, output_filter, spec["outputs"], shapes))

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
        self._transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _retrying(self, call):
        """``call()``, attempted again (after a growing pause) while it raises UNAVAILABLE."""
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


def extract(texts, target="localhost:8501", model_name="default", *, protocol="rest",
            signature_name=DEFAULT_SIGNATURE, **options):
    """One-shot :meth:`ServingClient.extract`: ``{output: ndarray}`` for a batch of texts."""
    with ServingClient(target, model_name, protocol=protocol, **options) as client:
        return client.extract(texts, signature_name)
