"""TF Serving's REST API (https://www.tensorflow.org/tfx/serving/api_rest) without its transport.

Endpoints (paths are case-insensitive, as TF Serving's are; ``{l}`` is a version label)::

    GET  /v1/models/{name}[/versions/{v}|/labels/{l}]            model status
    GET  /v1/models/{name}[/versions/{v}|/labels/{l}]/metadata   model metadata (signature_def)
    POST /v1/models/{name}[/versions/{v}|/labels/{l}]:predict    predictions (row or columnar)
    POST /v1/models/{name}[/versions/{v}|/labels/{l}]:classify   tf.Example classification
    POST /v1/models/{name}[/versions/{v}|/labels/{l}]:regress    tf.Example regression

Every error is a :class:`~glomo_tf.serving.errors.ServingError` whose canonical code gives TF
Serving's HTTP status (400 for INVALID_ARGUMENT, 404 for NOT_FOUND, 503 for UNAVAILABLE...), plus
413 for a body over the size limit. :class:`~glomo_tf.serving.rest.RestServer` mounts the API on
aiohttp and answers errors as ``{"error": "<message>"}``.
"""

import json
import re
import urllib.parse

import numpy as np

from glomo_tf.serving import inference
from glomo_tf.serving.core import message_json, metadata_json
from glomo_tf.serving.errors import ServingError, invalid
from glomo_tf.serving.tensors import (DEFAULT_LIMITS, NUMPY_DTYPES, collection_paused,
                                      columnar_json, float_tokens, is_b64_object,
                                      json_to_array, row_json, short_type, show)

PREDICT_PATH = re.compile(r"/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?"
                          r":(classify|regress|predict)", re.IGNORECASE)
STATUS_PATH = re.compile(r"/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?"
                         r"(?:/(metadata))?", re.IGNORECASE)
def not_found_message(method, path):
    return f"Not found: {method} {path} (TF Serving's REST API is under /v1/models/)"


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
