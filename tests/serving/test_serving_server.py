"""`glomo serve` (glomo_tf.cli.serve, glomo_tf.serving.server) against TF Serving's APIs.

Every prediction is compared with an independent in-process call of the same SavedModel
(``tf.saved_model.load(...).signatures[...]``); REST is spoken with ``http.client`` and gRPC with
the ``tensorflow_serving.apis`` stubs directly, not through glomo_tf's own client.
"""

import base64
import http.client
import json
import os
import re
import shutil
import socket
import struct
import threading
import time
from concurrent import futures
import urllib.parse

import grpc
import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import json_format
from tensorflow_serving.apis import (classification_pb2, get_model_metadata_pb2,
                                     get_model_status_pb2, inference_pb2, model_management_pb2,
                                     model_service_pb2_grpc, predict_pb2,
                                     prediction_service_pb2_grpc, regression_pb2)
from tensorflow_serving.config import model_server_config_pb2

from glomo_tf.cli import build_parser
from glomo_tf.cli.common import UsageError
from glomo_tf.cli.serve import server_from_args
from glomo_tf.serving.limits import RequestLimits
from glomo_tf.serving.server import ModelServer, ServerOptions, parse_batching_parameters
from _serving_fixtures import raw_http, write_half_plus_two, write_toy_model

MAX_BYTES = 1 << 20
SERVE_ONLY = [("serve", "glomo_tf.cli.serve")]  # the `glomo serve` parser, alone


def parse(argv):
    return build_parser(SERVE_ONLY).parse_args(argv)
AVAILABLE = get_model_status_pb2.ModelVersionStatus.State.Value("AVAILABLE")


# ----------------------------------------------------------------------------- fixtures, helpers

@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Version 1 (factor 2) and version 2 (factor 3) of the toy model, written once."""
    root = tmp_path_factory.mktemp("store")
    write_toy_model(str(root / "1"), factor=2.0)
    write_toy_model(str(root / "2"), factor=3.0)
    return root


def publish(store, version, base):
    """Copy a stored version into ``base`` the way exports should appear: by a rename."""
    os.makedirs(base, exist_ok=True)
    staging = os.path.join(base, f".incoming-{version}")
    shutil.copytree(os.path.join(store, str(version)), staging)
    os.rename(staging, os.path.join(base, str(version)))


@pytest.fixture(scope="module")
def reference(store):
    """In-process signatures of both versions: {version: {signature: ConcreteFunction}}."""
    return {v: tf.saved_model.load(str(store / str(v))).signatures for v in (1, 2)}


def expected(reference, version, signature, **inputs):
    outputs = reference[version][signature](**{k: tf.constant(v) for k, v in inputs.items()})
    return {k: v.numpy() for k, v in outputs.items()}


@pytest.fixture(scope="module")
def server(store, tmp_path_factory):
    """The toy model, served."""
    base = tmp_path_factory.mktemp("served") / "toy"
    publish(store, 1, base)
    with ModelServer(model_name="toy", model_base_path=str(base), grpc_port=0, rest_port=0,
                     file_system_poll_wait_seconds=0, max_request_bytes=MAX_BYTES) as running:
        yield running


@pytest.fixture(scope="module")
def stubs(server):
    channel = grpc.insecure_channel(server.grpc_target)
    yield (prediction_service_pb2_grpc.PredictionServiceStub(channel),
           model_service_pb2_grpc.ModelServiceStub(channel))
    channel.close()


def rest(url, method="GET", body=None, raw=None, headers=None):
    """(status, parsed JSON body) of one HTTP request."""
    parsed = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=120)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        connection.request(method, parsed.path, body=data, headers=headers or {})
        response = connection.getresponse()
        payload = response.read()
        assert response.getheader("Content-Type") == "application/json"
        return response.status, (json.loads(payload) if payload else None)
    finally:
        connection.close()


def predict_request(name, signature, version=None, label=None, output_filter=(), **inputs):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    request.model_spec.signature_name = signature
    if version is not None:
        request.model_spec.version.value = version
    if label is not None:
        request.model_spec.version_label = label
    for alias, value in inputs.items():
        request.inputs[alias].CopyFrom(tf.make_tensor_proto(value))
    request.output_filter.extend(output_filter)
    return request


def as_bytes(value):
    """A REST string value -> bytes ({"b64": ...} decoded)."""
    if isinstance(value, dict):
        assert list(value) == ["b64"]
        return base64.b64decode(value["b64"])
    return value.encode("utf-8")


def wait_for(condition, what, timeout=60):
    """Poll ``condition()`` (bounded); fail with ``what`` if it never holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def versions_of(url, name):
    status, doc = rest(f"{url}/v1/models/{name}")
    if status != 200:
        return {}
    return {int(e["version"]): e["state"] for e in doc["model_version_status"]}


# ----------------------------------------------------------------------------- status, metadata

def test_status_rest_and_grpc(server, stubs):
    want = {"model_version_status": [{"version": "1", "state": "AVAILABLE", "status": {
        "error_code": "OK", "error_message": ""}}]}
    assert rest(f"{server.rest_url}/v1/models/toy") == (200, want)
    assert rest(f"{server.rest_url}/v1/models/toy/versions/1") == (200, want)
    assert rest(f"{server.rest_url}/V1/MODELS/toy") == (200, want)  # TF Serving: case-insensitive

    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = "toy"
    response = stubs[1].GetModelStatus(request, timeout=60)
    assert [(s.version, s.state, s.status.error_code) for s in response.model_version_status] == [
        (1, AVAILABLE, 0)]


def _dtype_name(dtype):
    return "DT_" + tf.as_dtype(dtype).name.upper().replace("FLOAT32", "FLOAT").replace(
        "FLOAT64", "DOUBLE")


def test_metadata_matches_the_saved_model(server, stubs, reference):
    status, doc = rest(f"{server.rest_url}/v1/models/toy/metadata")
    assert status == 200
    assert doc["model_spec"] == {"name": "toy", "signature_name": "", "version": "1"}
    defs = doc["metadata"]["signature_def"]["signature_def"]
    assert {"serving_default", "scale", "ids"} <= set(defs)
    for name in ("serving_default", "scale", "ids"):
        function = reference[1][name]
        specs = function.structured_input_signature[1]
        assert defs[name]["method_name"] == "tensorflow/serving/predict"
        assert {k: v["dtype"] for k, v in defs[name]["inputs"].items()} == {
            k: _dtype_name(s.dtype) for k, s in specs.items()}
        assert {k: [int(d["size"]) for d in v["tensor_shape"]["dim"]]
                for k, v in defs[name]["inputs"].items()} == {
            k: [-1 if d is None else d for d in s.shape.as_list()] for k, s in specs.items()}
        assert {k: v["dtype"] for k, v in defs[name]["outputs"].items()} == {
            k: _dtype_name(s.dtype) for k, s in function.structured_outputs.items()}
    assert defs["scale"]["inputs"]["x"]["tensor_shape"] == {
        "dim": [{"size": "-1", "name": ""}, {"size": "3", "name": ""}], "unknown_rank": False}

    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    request.model_spec.name = "toy"
    response = stubs[0].GetModelMetadata(request, timeout=60)
    assert response.model_spec.name == "toy" and response.model_spec.version.value == 1
    signature_map = get_model_metadata_pb2.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(signature_map)
    assert json_format.MessageToDict(signature_map, always_print_fields_with_no_presence=True,
                                     preserving_proto_field_name=True) == doc["metadata"][
        "signature_def"]


# ----------------------------------------------------------------------------- predictions

TEXTS = [b"ab", "h\u00e9llo w\u00f6rld".encode(), b"", b"\xff\xfe raw"]


def _text_json(text):
    try:
        return text.decode("utf-8")
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(text).decode()}


def test_predict_strings_row_and_columnar(server, reference):
    want = expected(reference, 1, "serving_default", texts=np.array(TEXTS, dtype=object))
    url = f"{server.rest_url}/v1/models/toy:predict"
    status, doc = rest(url, "POST", {"instances": [_text_json(t) for t in TEXTS]})
    assert status == 200, doc
    rows = doc["predictions"]
    assert len(rows) == len(TEXTS)
    for i, row in enumerate(rows):
        assert as_bytes(row["upper"]) == want["upper"][i]
        assert row["length"] == want["length"][i]
        assert isinstance(row["head_bytes"], dict)  # *_bytes outputs are always base64
        assert as_bytes(row["head_bytes"]) == want["head_bytes"][i]

    status, doc = rest(url, "POST", {"signature_name": "serving_default",
                                     "inputs": [_text_json(t) for t in TEXTS]})
    assert status == 200, doc
    outputs = doc["outputs"]
    assert [as_bytes(v) for v in outputs["upper"]] == list(want["upper"])
    assert outputs["length"] == want["length"].tolist()
    assert [as_bytes(v) for v in outputs["head_bytes"]] == list(want["head_bytes"])
    assert all(isinstance(v, dict) for v in outputs["head_bytes"])
    assert outputs["upper"][:3] == [v.decode() for v in want["upper"][:3]]  # plain JSON strings

    # One input: the instance value may also be an object keyed by the input's name.
    status, doc = rest(url, "POST", {"instances": [{"texts": "ab"}]})
    assert status == 200 and doc["predictions"][0]["upper"] == "AB"


def test_predict_numbers_rest_and_grpc(server, stubs, reference, rng):
    x = rng.normal(size=(5, 3)).astype(np.float32)
    x[0] = [0.1, np.nan, np.inf]
    k = np.array([1, 2, 0, 3, 7], np.int32)
    want = expected(reference, 1, "scale", x=x, k=k)
    url = f"{server.rest_url}/v1/models/toy/versions/1:predict"

    status, doc = rest(url, "POST", {"signature_name": "scale", "instances": [
        {"x": row.tolist(), "k": int(kk)} for row, kk in zip(x, k)]})
    assert status == 200, doc
    for name in ("y", "total", "batch"):
        got = np.array([row[name] for row in doc["predictions"]], dtype=want[name].dtype)
        np.testing.assert_array_equal(got, want[name] if name != "batch" else np.full(5, 5))

    status, doc = rest(url, "POST", {"signature_name": "scale",
                                     "inputs": {"x": x.tolist(), "k": k.tolist()}})
    assert status == 200, doc
    for name in ("y", "total"):
        np.testing.assert_array_equal(np.array(doc["outputs"][name], np.float32), want[name])

    response = stubs[0].Predict(predict_request("toy", "scale", x=x, k=k), timeout=60)
    assert response.model_spec.name == "toy" and response.model_spec.version.value == 1
    assert response.model_spec.signature_name == "scale"
    assert set(response.outputs) == {"y", "total", "batch"}
    for name in ("y", "total"):
        np.testing.assert_array_equal(tf.make_ndarray(response.outputs[name]), want[name])

    response = stubs[0].Predict(predict_request("toy", "scale", output_filter=["total"], x=x, k=k),
                                timeout=60)
    assert set(response.outputs) == {"total"}
    np.testing.assert_array_equal(tf.make_ndarray(response.outputs["total"]), want["total"])


def test_predict_dynamic_shapes_scalars_and_bools(server, stubs, reference):
    ids = np.array([[3, 0, 0], [1, 2, 5]], np.int64)
    want = expected(reference, 1, "ids", ids=ids)
    status, doc = rest(f"{server.rest_url}/v1/models/toy:predict", "POST",
                       {"signature_name": "ids", "inputs": {"ids": ids.tolist()}})
    assert status == 200, doc
    assert doc["outputs"]["doubled"] == want["doubled"].tolist()
    assert doc["outputs"]["positive"] == want["positive"].tolist()
    assert doc["outputs"]["nonzero"] == want["nonzero"].tolist()
    assert doc["outputs"]["mean"] == float(want["mean"])
    # A scalar output cannot be split into rows: TF Serving's row format refuses it too.
    status, doc = rest(f"{server.rest_url}/v1/models/toy:predict", "POST",
                       {"signature_name": "ids", "instances": ids.tolist()})
    assert status == 400 and "mean" in doc["error"]

    response = stubs[0].Predict(predict_request("toy", "ids", ids=ids), timeout=60)
    for name, value in want.items():
        np.testing.assert_array_equal(tf.make_ndarray(response.outputs[name]), value)

    strings = np.array(TEXTS, dtype=object)
    response = stubs[0].Predict(predict_request("toy", "", texts=strings), timeout=60)
    assert response.model_spec.signature_name == "serving_default"
    for name, value in expected(reference, 1, "serving_default", texts=strings).items():
        np.testing.assert_array_equal(tf.make_ndarray(response.outputs[name]), value)


def test_single_input_and_output_drop_the_names(server, reference):
    v = np.array([1.5, -2.0, 16777215.0], np.float32)
    want = expected(reference, 1, "negate", v=v)["negated"]
    url = f"{server.rest_url}/v1/models/toy:predict"
    status, doc = rest(url, "POST", {"signature_name": "negate", "instances": v.tolist()})
    assert status == 200 and doc == {"predictions": want.tolist()}
    status, doc = rest(url, "POST", {"signature_name": "negate", "inputs": v.tolist()})
    assert status == 200 and doc == {"outputs": want.tolist()}
    status, doc = rest(url, "POST", {"signature_name": "negate", "inputs": {"v": v.tolist()}})
    assert status == 200 and doc == {"outputs": want.tolist()}


# ----------------------------------------------------------------------------- bad requests

PREDICT = "/v1/models/toy:predict"
SCALE_ROW = {"x": [1, 2, 3], "k": 1}
BAD_REST = [
    # (method, path, body or raw bytes, status, words the error must contain)
    ("POST", PREDICT, b"{not json", 400, "JSON Parse error"),
    ("POST", PREDICT, b"", 400, "empty"),
    ("POST", PREDICT, b"\xff\xfe", 400, "UTF-8"),
    ("POST", PREDICT, b"[" * 100000 + b"]" * 100000, 400, "JSON Parse error"),
    ("POST", PREDICT, [1, 2], 400, "Is not object"),
    ("POST", PREDICT, {}, 400, "Missing 'inputs' or 'instances'"),
    ("POST", PREDICT, {"instances": ["a"], "inputs": ["a"]}, 400, "only one of"),
    ("POST", PREDICT, {"instances": []}, 400, "No values in 'instances'"),
    ("POST", PREDICT, {"inputs": []}, 400, "empty batch"),
    ("POST", PREDICT, {"instances": "ab"}, 400, "list/array"),
    ("POST", PREDICT, {"signature_name": 3, "instances": ["a"]}, 400, "signature_name"),
    ("POST", PREDICT, {"signature_name": "nope", "instances": ["a"]}, 400, '"nope" not found'),
    ("POST", PREDICT, {"signature_name": "scale", "instances": [dict(SCALE_ROW, z=1)]}, 400,
     "does not have named input: z"),
    ("POST", PREDICT, {"signature_name": "scale", "inputs": {"x": [[1, 2, 3]], "k": [1],
                                                             "z": [1]}}, 400,
     "unknown input(s): z"),
    ("POST", PREDICT, {"signature_name": "scale", "inputs": {"x": [[1, 2, 3]]}}, 400,
     "Missing named input: k"),
    ("POST", PREDICT, {"signature_name": "scale", "instances": [{"x": [1, 2, 3]}]}, 400,
     "keys must be equal to: k,x"),
    ("POST", PREDICT, {"signature_name": "scale", "instances": [[1, 2, 3]]}, 400,
     "expecting list of objects"),
    ("POST", PREDICT, {"signature_name": "scale", "instances": [SCALE_ROW, [1, 2, 3]]}, 400,
     "Expecting object"),
    ("POST", PREDICT, {"signature_name": "scale", "inputs": {"x": [["a", 2, 3]], "k": [1]}},
     400, "is not of expected type: float"),
    ("POST", PREDICT, {"signature_name": "scale", "inputs": {"x": [[True, 2, 3]], "k": [1]}},
     400, "is not of expected type: float"),
    ("POST", PREDICT, {"signature_name": "scale", "inputs": {"x": [[{"b64": "AA=="}, 2, 3]],
                                                             "k": [1]}}, 400,
     "is not of expected type: float"),
    ("POST", PREDICT, {"signature_name": "scale", "inputs": {"x": [[1, 2, 3]], "k": [1.5]}},
     400, "is not of expected type: int32"),
    ("POST", PREDICT, {"signature_name": "scale", "inputs": {"x": [[1, 2, 3]], "k": [2 ** 40]}},
     400, "out of range for int32"),
    ("POST", PREDICT, {"signature_name": "scale", "inputs": {"x": [[1e39, 2, 3]], "k": [1]}},
     400, "without loss of precision"),
    ("POST", PREDICT, {"signature_name": "scale", "inputs": {"x": [[2 ** 24, 2, 3]], "k": [1]}},
     400, "without loss of precision"),
    ("POST", PREDICT, {"instances": [1]}, 400, "is not of expected type: string"),
    ("POST", PREDICT, {"instances": [{"b64": "!!not base64"}]}, 400, "base64"),
    ("POST", PREDICT, {"signature_name": "scale", "instances": [SCALE_ROW, {"x": [1, 2],
                                                                            "k": 1}]}, 400,
     "Expecting shape [3] but got: [2]"),
    ("POST", PREDICT, {"signature_name": "ids", "inputs": {"ids": [[1, 2], [3]]}}, 400,
     "unexpected size"),
    ("POST", PREDICT, {"signature_name": "ids", "inputs": {"ids": [[1, [2]], [3, 4]]}}, 400,
     "unexpected level"),
    ("POST", PREDICT, {"signature_name": "scale", "inputs": {"x": [1, 2, 3], "k": [1]}}, 400,
     "expects [-1,3]"),
    ("POST", PREDICT, {"signature_name": "scale", "inputs": {"x": [[1, 2]], "k": [1]}}, 400,
     "expects [-1,3]"),
    ("POST", PREDICT, {"signature_name": "scale", "inputs": {"x": [[1, 2, 3]], "k": [-1]}}, 400,
     "k must be >= 0"),
    ("POST", "/v1/models/nope:predict", {"instances": ["a"]}, 404, "nope"),
    ("POST", "/v1/models/toy/versions/9:predict", {"instances": ["a"]}, 404,
     "Specific(toy, 9)"),
    ("POST", "/v1/models/toy/labels/stable:predict", {"instances": ["a"]}, 400,
     "Unrecognized servable version label: stable"),
    ("POST", "/v1/models/toy:classify", {"examples": [{}]}, 400,
     "Expected classification signature method_name to be tensorflow/serving/classify"),
    ("POST", "/v1/models/toy:regress", {"examples": [{}]}, 400,
     "Expected regression signature method_name to be tensorflow/serving/regress"),
    ("POST", "/v1/models/toy:explain", {"instances": ["a"]}, 400, "Malformed request"),
    ("GET", "/v1/models/nope", None, 404, "nope"),
    ("GET", "/v1/models/toy/versions/9", None, 404, "version 9"),
    ("GET", "/v1/models/nope/metadata", None, 404, "nope"),
    ("GET", "/v1/models/toy/versions/9/metadata", None, 404, "Specific(toy, 9)"),
    ("GET", "/v1/models", None, 400, "Missing model name"),
    ("GET", "/v1/models/toy/versions/one", None, 400, "Malformed request"),
    ("GET", PREDICT, None, 400, "Malformed request"),
    ("PUT", "/v1/models/toy", {}, 400, "Malformed request"),
    ("GET", "/healthz", None, 404, "/v1/models/"),
]


@pytest.mark.parametrize("method,path,body,status,words", BAD_REST,
                         ids=[f"{i}-{case[4][:24]}" for i, case in enumerate(BAD_REST)])
def test_bad_rest_requests_get_a_clear_4xx(server, method, path, body, status, words):
    raw = body if isinstance(body, bytes) else None
    got, doc = rest(server.rest_url + path, method, None if raw is not None else body, raw=raw)
    assert got == status, doc
    assert list(doc) == ["error"] and words in doc["error"], doc


def test_oversized_bodies_are_refused_and_serving_goes_on(server, reference):
    status, doc = rest(server.rest_url + PREDICT, "POST", raw=b"{}",
                       headers={"Content-Length": str(10 * MAX_BYTES)})
    assert status == 413 and "exceeds the limit" in doc["error"]
    # A body under the limit but carrying a huge batch still works; the server kept serving.
    texts = ["x" * 100] * 2000
    status, doc = rest(server.rest_url + PREDICT, "POST", {"inputs": texts})
    assert status == 200 and doc["outputs"]["length"] == [100] * 2000


BAD_GRPC = [
    (dict(name="nope", signature="scale", x=np.ones((1, 3), np.float32),
          k=np.ones(1, np.int32)), "NOT_FOUND", "nope"),
    (dict(name="toy", signature="scale", version=9, x=np.ones((1, 3), np.float32),
          k=np.ones(1, np.int32)), "NOT_FOUND", "Specific(toy, 9)"),
    (dict(name="toy", signature="nope", x=np.ones((1, 3), np.float32)), "INVALID_ARGUMENT",
     '"nope" not found'),
    (dict(name="toy", signature="scale", x=np.ones((1, 3), np.float64), k=np.ones(1, np.int32)),
     "INVALID_ARGUMENT", "Expects arg[x] to be float32 but float64 is provided"),
    (dict(name="toy", signature="scale", x=np.ones((1, 3), np.float32)), "INVALID_ARGUMENT",
     "Missing but required: {k}"),
    (dict(name="toy", signature="scale", x=np.ones((1, 3), np.float32), k=np.ones(1, np.int32),
          z=np.ones(1, np.int32)), "INVALID_ARGUMENT", "Sent extra: {z}"),
    (dict(name="toy", signature="scale", x=np.ones((1, 4), np.float32), k=np.ones(1, np.int32)),
     "INVALID_ARGUMENT", "expects [-1,3]"),
    (dict(name="toy", signature="scale", x=np.ones((0, 3), np.float32), k=np.ones(0, np.int32)),
     "INVALID_ARGUMENT", "empty batch"),
    (dict(name="toy", signature="scale", x=np.ones((1, 3), np.float32), k=-np.ones(1, np.int32)),
     "INVALID_ARGUMENT", "k must be >= 0"),
    (dict(name="toy", signature="scale", output_filter=["nope"], x=np.ones((1, 3), np.float32),
          k=np.ones(1, np.int32)), "INVALID_ARGUMENT", "output tensor alias not found"),
    (dict(name="toy", signature="", texts=np.array([b"x" * (MAX_BYTES + 10)], dtype=object)),
     "RESOURCE_EXHAUSTED", ""),
]


@pytest.mark.parametrize("case,code,words", BAD_GRPC,
                         ids=[c[1] + "-" + c[2][:20] for c in BAD_GRPC])
def test_bad_grpc_requests_get_the_right_status(server, stubs, case, code, words):
    case = dict(case)
    request = predict_request(case.pop("name"), case.pop("signature"), **case)
    with pytest.raises(grpc.RpcError) as raised:
        stubs[0].Predict(request, timeout=60)
    assert raised.value.code().name == code
    assert words in raised.value.details()


def test_grpc_unsupported_calls_and_metadata_fields(server, stubs):
    request = inference_pb2.MultiInferenceRequest()
    with pytest.raises(grpc.RpcError) as raised:
        stubs[0].MultiInference(request, timeout=60)
    assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED
    for fields, words in (([], "at least one metadata_field"), (["foo"], "foo")):
        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=fields)
        request.model_spec.name = "toy"
        with pytest.raises(grpc.RpcError) as raised:
            stubs[0].GetModelMetadata(request, timeout=60)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert words in raised.value.details()
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = "nope"
    with pytest.raises(grpc.RpcError) as raised:
        stubs[1].GetModelStatus(request, timeout=60)
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    # ... and after all the bad requests the server still answers good ones.
    response = stubs[0].Predict(predict_request("toy", "", texts=np.array([b"ok"], dtype=object)),
                                timeout=60)
    assert tf.make_ndarray(response.outputs["upper"]).tolist() == [b"OK"]


# ----------------------------------------------------------------------------- TF1, classify

def test_tensorflow1_model_with_classify_and_regress_signatures(tmp_path):
    """TF Serving's half_plus_two example, answered as the TF Serving REST docs show it."""
    write_half_plus_two(str(tmp_path / "hp2" / "123"))
    with ModelServer(model_name="half_plus_two", model_base_path=str(tmp_path / "hp2"),
                     rest_port=0, grpc_port=0, file_system_poll_wait_seconds=0) as server:
        url = f"{server.rest_url}/v1/models/half_plus_two"
        assert rest(url + ":predict", "POST", {"instances": [1.0, 2.0, 5.0]}) == (
            200, {"predictions": [2.5, 3.0, 4.5]})
        assert rest(url + "/versions/123:regress", "POST", {
            "signature_name": "regress_x_to_y", "examples": [{"x": 1.0}, {"x": 2.0}, {"x": 5.0}]
        }) == (200, {"results": [2.5, 3.0, 4.5]})
        # The context's features go into every example; an example's own features win.
        assert rest(url + ":regress", "POST", {
            "signature_name": "regress_x_to_y", "context": {"x": 4.0},
            "examples": [{}, {"x": 0.0}]}) == (200, {"results": [4.0, 2.0]})
        assert rest(url + ":classify", "POST", {
            "signature_name": "classify_x_to_y", "examples": [{"x": 1.0}, {"x": 5.0}]}) == (
            200, {"results": [[["small", 2.5]], [["big", 4.5]]]})
        for body, words in (({"signature_name": "regress_x_to_y"}, "'examples' is expected"),
                            ({"signature_name": "regress_x_to_y", "examples": []}, "empty"),
                            ({"signature_name": "regress_x_to_y", "examples": [{"x": [[1]]}]},
                             "unexpected JSON type: Array"),
                            ({"signature_name": "regress_x_to_y", "examples": [{"x": [1, "a"]}]},
                             "Unexpected element type in feature: x"),
                            ({"signature_name": "regress_x_to_y", "examples": [{"y": 1.0}]},
                             "x"),
                            ({"examples": [{"x": 1.0}]}, "Expected regression signature")):
            status, doc = rest(url + ":regress", "POST", body)
            assert status == 400 and words in doc["error"], doc

        channel = grpc.insecure_channel(server.grpc_target)
        try:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            request = regression_pb2.RegressionRequest()
            request.model_spec.name = "half_plus_two"
            request.model_spec.signature_name = "regress_x_to_y"
            for x in (1.0, 3.0):
                request.input.example_list.examples.add().features.feature[
                    "x"].float_list.value.append(x)
            response = stub.Regress(request, timeout=60)
            assert [r.value for r in response.result.regressions] == [2.5, 3.5]
            assert response.model_spec.version.value == 123
            request = classification_pb2.ClassificationRequest()
            request.model_spec.name = "half_plus_two"
            request.model_spec.signature_name = "classify_x_to_y"
            context = request.input.example_list_with_context.context
            context.features.feature["x"].float_list.value.append(6.0)
            request.input.example_list_with_context.examples.add()
            response = stub.Classify(request, timeout=60)
            assert [(c.label, c.score) for c in response.result.classifications[0].classes] == [
                ("big", 5.0)]
            request.model_spec.signature_name = "serving_default"
            with pytest.raises(grpc.RpcError) as raised:
                stub.Classify(request, timeout=60)
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        finally:
            channel.close()


# ----------------------------------------------------------------------------- versions

def test_new_versions_are_picked_up_without_restart(store, reference, tmp_path):
    base = tmp_path / "hot"
    publish(store, 1, base)
    x, k = np.array([[1.0, 2.0, 3.0]], np.float32), np.array([2], np.int32)
    body = {"signature_name": "scale", "inputs": {"x": x.tolist(), "k": k.tolist()}}
    with ModelServer(model_name="toy", model_base_path=str(base), rest_port=0, grpc_port=None,
                     file_system_poll_wait_seconds=0.1) as server:
        url = server.rest_url
        status, doc = rest(url + PREDICT, "POST", body)
        np.testing.assert_array_equal(np.array(doc["outputs"]["y"], np.float32),
                                      expected(reference, 1, "scale", x=x, k=k)["y"])
        os.makedirs(base / "3")  # an export still being written: no saved_model.pb yet
        publish(store, 2, base)
        wait_for(lambda: versions_of(url, "toy") == {2: "AVAILABLE", 1: "END"},
                 "version 2 to replace version 1")
        status, doc = rest(url + PREDICT, "POST", body)
        want = expected(reference, 2, "scale", x=x, k=k)
        assert not np.array_equal(want["y"], expected(reference, 1, "scale", x=x, k=k)["y"])
        np.testing.assert_array_equal(np.array(doc["outputs"]["y"], np.float32), want["y"])
        assert rest(url + "/v1/models/toy/versions/1:predict", "POST", body)[0] == 404

        # A broken newer version is reported, and the working one keeps serving.
        with open(base / "3" / "saved_model.pb", "wb") as f:
            f.write(b"not a SavedModel")
        wait_for(lambda: versions_of(url, "toy").get(3) == "END", "version 3 to fail loading")
        status, doc = rest(url + "/v1/models/toy/versions/3")
        assert doc["model_version_status"][0]["status"]["error_code"] == "UNKNOWN"
        assert "failed to load" in doc["model_version_status"][0]["status"]["error_message"]
        status, doc = rest(url + PREDICT, "POST", body)
        np.testing.assert_array_equal(np.array(doc["outputs"]["y"], np.float32), want["y"])


def _config_text(entries):
    config = model_server_config_pb2.ModelServerConfig()
    for name, base, policy, labels in entries:
        entry = config.model_config_list.config.add(name=name, base_path=str(base),
                                                    model_platform="tensorflow")
        if policy == "all":
            entry.model_version_policy.all.SetInParent()
        elif policy:
            entry.model_version_policy.specific.versions.extend(policy)
        for label, version in labels.items():
            entry.version_labels[label] = version
    from google.protobuf import text_format
    return config, text_format.MessageToString(config)


def test_model_config_file_policies_labels_and_reloads(store, reference, tmp_path):
    base = tmp_path / "multi"
    publish(store, 1, base)
    publish(store, 2, base)
    _, text = _config_text([("pinned", base, [1], {}),
                            ("every", base, "all", {"stable": 1, "canary": 2})])
    config_file = tmp_path / "models.config"
    config_file.write_text(text)
    x, k = np.array([[1.0, -2.0, 0.5]], np.float32), np.array([3], np.int32)
    body = {"signature_name": "scale", "inputs": {"x": x.tolist(), "k": k.tolist()}}
    y = {v: expected(reference, v, "scale", x=x, k=k)["y"] for v in (1, 2)}

    def served_y(url, path):
        status, doc = rest(url + path, "POST", body)
        assert status == 200, doc
        return np.array(doc["outputs"]["y"], np.float32)

    with ModelServer(model_config_file=str(config_file), rest_port=0, grpc_port=0,
                     file_system_poll_wait_seconds=0,
                     model_config_file_poll_wait_seconds=0.1) as server:
        url = server.rest_url
        assert versions_of(url, "pinned") == {1: "AVAILABLE"}
        assert versions_of(url, "every") == {2: "AVAILABLE", 1: "AVAILABLE"}
        np.testing.assert_array_equal(served_y(url, "/v1/models/pinned:predict"), y[1])
        np.testing.assert_array_equal(served_y(url, "/v1/models/every:predict"), y[2])
        np.testing.assert_array_equal(served_y(url, "/v1/models/every/labels/stable:predict"),
                                      y[1])
        np.testing.assert_array_equal(served_y(url, "/v1/models/every/versions/1:predict"), y[1])
        assert rest(url + "/v1/models/every/labels/canary")[1]["model_version_status"][0][
            "version"] == "2"

        channel = grpc.insecure_channel(server.grpc_target)
        try:
            prediction = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            response = prediction.Predict(predict_request("every", "scale", label="canary", x=x,
                                                          k=k), timeout=60)
            assert response.model_spec.version.value == 2
            np.testing.assert_array_equal(tf.make_ndarray(response.outputs["y"]), y[2])

            # ModelService.HandleReloadConfigRequest replaces the served models.
            reload_config, _ = _config_text([("pinned", base, [2], {})])
            request = model_management_pb2.ReloadConfigRequest(config=reload_config)
            response = model_service_pb2_grpc.ModelServiceStub(channel).HandleReloadConfigRequest(
                request, timeout=120)
            assert response.status.error_code == 0
        finally:
            channel.close()
        assert versions_of(url, "pinned") == {2: "AVAILABLE", 1: "END"}
        assert rest(url + "/v1/models/every")[0] == 404

        # --model_config_file_poll_wait_seconds: an edited file is picked up.
        config_file.write_text(_config_text([("renamed", base, [1], {})])[1])
        wait_for(lambda: versions_of(url, "renamed") == {1: "AVAILABLE"},
                 "the edited config file to be applied")
        np.testing.assert_array_equal(served_y(url, "/v1/models/renamed:predict"), y[1])


# ----------------------------------------------------------------------------- concurrency

def test_concurrent_requests_are_batched_and_split_back(store, reference, tmp_path, rng):
    base = tmp_path / "batched"
    publish(store, 1, base)
    clients = 8
    FAIL = 2  # an even request: sent over REST
    xs = rng.normal(size=(clients, 1, 3)).astype(np.float32)
    ks = np.arange(clients, dtype=np.int32).reshape(clients, 1)
    ks[FAIL] = -1  # fails inside the model: the merged batch is re-run request by request
    results = [None] * clients
    # The batch is only released when max_batch_size rows are queued, so the 8 concurrent
    # one-row requests must end up in one batch (unless one of them fails).
    with ModelServer(model_name="toy", model_base_path=str(base), rest_port=0, grpc_port=0,
                     file_system_poll_wait_seconds=0, max_batch_size=clients,
                     batch_timeout_micros=120_000_000) as server:
        channel = grpc.insecure_channel(server.grpc_target)
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)

        def call(i):
            if i % 2:
                response = stub.Predict(predict_request("toy", "scale", x=xs[i], k=ks[i]),
                                        timeout=300)
                results[i] = (200, {k: tf.make_ndarray(v) for k, v in response.outputs.items()})
            else:
                status, doc = rest(server.rest_url + PREDICT, "POST", {
                    "signature_name": "scale", "inputs": {"x": xs[i].tolist(),
                                                          "k": ks[i].tolist()}})
                results[i] = (status, doc if status != 200 else {
                    k: np.array(v) for k, v in doc["outputs"].items()})

        threads = [threading.Thread(target=call, args=(i,)) for i in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        channel.close()
        stats = dict(server.batcher.stats)
    assert results[FAIL][0] == 400 and "k must be >= 0" in results[FAIL][1]["error"]
    for i in range(clients):
        if i == FAIL:
            continue
        status, outputs = results[i]
        assert status == 200, outputs
        want = expected(reference, 1, "scale", x=xs[i], k=ks[i])
        np.testing.assert_array_equal(outputs["y"].astype(np.float32), want["y"])
        np.testing.assert_array_equal(outputs["total"].astype(np.float32), want["total"])
        # Run alone after the merged run failed: each request saw a batch of its own size.
        assert outputs["batch"].tolist() == [1]
    assert stats["merged_batches"] == 1 and stats["largest_batch"] == clients


def test_concurrent_requests_merge_when_they_can(store, reference, tmp_path, rng):
    base = tmp_path / "merged"
    publish(store, 1, base)
    clients = 6
    xs = rng.normal(size=(clients, 2, 3)).astype(np.float32)
    ks = rng.integers(0, 5, size=(clients, 2)).astype(np.int32)
    ids = [rng.integers(0, 9, size=(1, 2 + i)).astype(np.int64) for i in range(clients)]
    results = {}
    with ModelServer(model_name="toy", model_base_path=str(base), rest_port=0, grpc_port=None,
                     file_system_poll_wait_seconds=0, max_batch_size=2 * clients,
                     batch_timeout_micros=120_000_000) as server:
        def scale(i):
            results["scale", i] = rest(server.rest_url + PREDICT, "POST", {
                "signature_name": "scale", "inputs": {"x": xs[i].tolist(), "k": ks[i].tolist()}})

        def id_call(i):  # dynamic output shapes: never merged, never kept waiting
            results["ids", i] = rest(server.rest_url + PREDICT, "POST", {
                "signature_name": "ids", "inputs": {"ids": ids[i].tolist()}})

        threads = [threading.Thread(target=f, args=(i,)) for i in range(clients)
                   for f in (scale, id_call)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    for i in range(clients):
        status, doc = results["scale", i]
        assert status == 200, doc
        want = expected(reference, 1, "scale", x=xs[i], k=ks[i])
        np.testing.assert_array_equal(np.array(doc["outputs"]["y"], np.float32), want["y"])
        assert doc["outputs"]["batch"] == [2 * clients] * 2  # ran in one merged batch
        status, doc = results["ids", i]
        assert status == 200, doc
        assert doc["outputs"]["doubled"] == expected(reference, 1, "ids", ids=ids[i])[
            "doubled"].tolist()


def test_rest_timeout_answers_504_while_a_batch_waits(store, tmp_path):
    base = tmp_path / "slow"
    publish(store, 1, base)
    with ModelServer(model_name="toy", model_base_path=str(base), rest_port=0, grpc_port=None,
                     file_system_poll_wait_seconds=0, max_batch_size=64,
                     batch_timeout_micros=600_000_000, rest_api_timeout_in_ms=300) as server:
        status, doc = rest(server.rest_url + PREDICT, "POST", {
            "signature_name": "scale", "inputs": {"x": [[1, 2, 3]], "k": [1]}})
        assert status == 504 and "not served within" in doc["error"]
        # Requests that are never merged do not wait for a batch.
        status, doc = rest(server.rest_url + PREDICT, "POST", {"signature_name": "ids",
                                                               "inputs": {"ids": [[1, 2]]}})
        assert status == 200 and doc["outputs"]["doubled"] == [[2, 4]]


def test_without_batching_every_request_runs_alone_and_cors(store, tmp_path):
    base = tmp_path / "unbatched"
    publish(store, 1, base)
    results = []
    with ModelServer(model_name="toy", model_base_path=str(base), rest_port=0, grpc_port=None,
                     file_system_poll_wait_seconds=0, enable_batching=False,
                     cors=True) as server:
        assert server.batcher is None
        connection = http.client.HTTPConnection("127.0.0.1", server.rest_port, timeout=60)
        connection.request("OPTIONS", PREDICT)
        response = connection.getresponse()
        response.read()
        assert response.status == 204
        assert response.getheader("Access-Control-Allow-Origin") == "*"
        connection.request("GET", "/v1/models/toy")
        response = connection.getresponse()  # the same kept-alive connection
        assert json.loads(response.read())["model_version_status"][0]["state"] == "AVAILABLE"
        assert response.getheader("Access-Control-Allow-Methods") == "POST, GET"
        connection.close()
        threads = [threading.Thread(target=lambda: results.append(rest(
            server.rest_url + PREDICT, "POST", {"signature_name": "scale", "inputs": {
                "x": [[1, 2, 3]], "k": [1]}}))) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    assert [doc["outputs"]["batch"] for _, doc in results] == [[1]] * 4


# ----------------------------------------------------------------------------- command line

def test_cli_flags_follow_tensorflow_model_server(tmp_path, store):
    base = tmp_path / "cli"
    publish(store, 1, base)
    batching = tmp_path / "batching.config"
    batching.write_text("max_batch_size { value: 16 }\nbatch_timeout_micros { value: 500 }\n"
                        "num_batch_threads { value: 3 }\n# a comment\n"
                        "pad_variable_length_inputs: true\n")
    args = parse([
        "serve", "--port=8600", "--rest_api_port=0", "--model_name=toy",
        f"--model_base_path={base}", "--enable_batching=true",
        f"--batching_parameters_file={batching}", "--max_enqueued_batches", "7",
        "--file_system_poll_wait_seconds=5", "--rest_api_timeout_in_ms=1234",
        "--saved_model_tags=serve", "--rest_api_enable_cors_support", "--grpc_max_threads=4",
        "--max_num_load_retries=2", "--max_request_bytes=4096"])
    server = server_from_args(args)
    assert server.models[0].name == "toy" and server.models[0].base_path == str(base)
    assert server._ports == {"grpc": 8600, "rest": None}  # --rest_api_port=0: REST off
    assert server.host == "127.0.0.1"
    assert server.options == ServerOptions(
        model_name="toy", model_base_path=str(base), grpc_port=8600, rest_port=None,
        enable_batching=True, max_batch_size=16, batch_timeout_micros=500, num_batch_threads=3,
        max_enqueued_batches=7, file_system_poll_wait_seconds=5.0,
        model_config_file_poll_wait_seconds=0, rest_api_timeout_in_ms=1234,
        max_request_bytes=4096, saved_model_tags=("serve",), cors=True, grpc_max_threads=4,
        max_num_load_retries=2, rest_api_num_threads=4, max_queued_requests=16,
        rest_api_max_connections=64, metrics_path=None, access_log=False)
    assert server.limits == RequestLimits(max_request_bytes=4096)
    args = parse(["serve", f"--model_base_path={base}", "--enable_batching=false",
                  "--host=0.0.0.0"])
    server = server_from_args(args)
    assert server.options.enable_batching is False and server.host == "0.0.0.0"
    assert server._ports == {"grpc": 8500, "rest": 8501} and server.models[0].name == "default"


def test_server_options_name_an_unknown_option_and_check_their_values(tmp_path):
    with pytest.raises(TypeError, match="unknown server option max_batchsize; ServerOptions "
                                        "has: .*max_batch_size"):
        ModelServer(model_base_path=str(tmp_path), max_batchsize=8)
    options = ServerOptions(model_base_path=str(tmp_path), rest_api_num_threads=2)
    server = ModelServer(options, grpc_port=None)
    assert server.options == ServerOptions(model_base_path=str(tmp_path), grpc_port=None,
                                           rest_api_num_threads=2)
    assert server._ports == {"grpc": None, "rest": 0} and server.models[0].name == "default"
    with pytest.raises(ValueError, match="exactly one of models, model_base_path"):
        ServerOptions()
    with pytest.raises(ValueError, match="--rest_api_max_connections must be an integer of at "
                                         "least 1, got 0"):
        ServerOptions(model_base_path=str(tmp_path), rest_api_max_connections=0)


def test_cli_accepts_and_reports_tensorflow_model_server_tuning_flags(tmp_path, caplog):
    from glomo_tf.cli.serve import tensorflow_threads
    args = parse(["serve", f"--model_base_path={tmp_path}", "--enable_model_warmup",
                  "--tensorflow_intra_op_parallelism", "2"])
    with caplog.at_level("WARNING", logger="glomo_tf.serving"):
        server_from_args(args)
    ignored = sorted(r.getMessage().split()[0] for r in caplog.records if "ignored" in
                     r.getMessage())
    assert ignored == ["--enable_model_warmup"]
    assert tensorflow_threads(args) == (2, 0)
    args = parse(["serve", f"--model_base_path={tmp_path}", "--tensorflow_session_parallelism",
                  "3", "--tensorflow_inter_op_parallelism", "1"])
    assert tensorflow_threads(args) == (3, 1)


@pytest.mark.parametrize("argv,words", [
    (["serve"], "--model_base_path"),
    (["serve", "--model_base_path=/nonexistent/glomo"], "is not a directory"),
    (["serve", "--model_base_path=BASE", "--model_config_file=CONFIG"], "either"),
    (["serve", "--model_config_file=/nonexistent/models.config"], "No such file"),
    (["serve", "--model_config_file=BAD_CONFIG"], "cannot parse the model config"),
    (["serve", "--model_base_path=BASE", "--port=0"], "--port"),
    (["serve", "--model_base_path=BASE", "--batching_parameters_file=BAD_BATCHING"],
     'has no field named "max_batch_sizes"'),
    (["serve", "--model_base_path=BASE", "--max_batch_size=0"], "max_batch_size"),
    (["serve", "--model_base_path=BASE", "--tensorflow_intra_op_parallelism=-1"],
     "--tensorflow_intra_op_parallelism must be 0"),
])
def test_cli_usage_errors(tmp_path, argv, words):
    (tmp_path / "bad.config").write_text("model_config_list { config { nme: 'x' } }")
    (tmp_path / "bad_batching").write_text("max_batch_sizes { value: 3 }")
    (tmp_path / "ok.config").write_text("")
    replace = {"BASE": str(tmp_path), "CONFIG": str(tmp_path / "ok.config"),
               "BAD_CONFIG": str(tmp_path / "bad.config"),
               "BAD_BATCHING": str(tmp_path / "bad_batching")}
    argv = [arg.replace(arg.split("=")[-1], replace.get(arg.split("=")[-1], arg.split("=")[-1]))
            for arg in argv]
    args = parse(argv)
    with pytest.raises(UsageError) as raised:
        args.func(args)
    assert words in str(raised.value)


def test_a_port_in_use_is_named_before_any_model_loads(tmp_path):
    """Another process holds the REST port: `glomo serve` says which port, without loading the
    model (the model directory here holds no model at all, so loading would fail differently)."""
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        from glomo_tf.cli.serve import check_ports_free
        with pytest.raises(UsageError, match=rf"--rest_api_port {port} on 127.0.0.1: .*in use"):
            check_ports_free("127.0.0.1", [("--port", 0), ("--rest_api_port", port)])
        args = parse(["serve", f"--model_base_path={tmp_path}", f"--port={port}"])
        with pytest.raises(UsageError, match=rf"--port {port} on 127.0.0.1: .*another --port"):
            args.func(args)


def test_batching_parameters_file_format():
    assert parse_batching_parameters(
        "max_batch_size { value: 128 }\nbatch_timeout_micros { value: 0 }\n"
        "max_enqueued_batches { value: 1000000 }\nnum_batch_threads { value: 8 }\n") == {
        "max_batch_size": 128, "batch_timeout_micros": 0, "max_enqueued_batches": 1000000,
        "num_batch_threads": 8}
    with pytest.raises(ValueError, match="1:25 : .*Couldn't parse integer: lots"):
        parse_batching_parameters("max_batch_size { value: lots }")
    with pytest.raises(ValueError, match='Expected "{"'):  # a wrapper field, as in TF Serving
        parse_batching_parameters("max_batch_size: 3")


def test_batching_parameters_this_server_does_not_use_are_named_and_ignored(caplog):
    with caplog.at_level("WARNING", logger="glomo_tf.serving"):
        got = parse_batching_parameters('num_batch_threads { value: 3 }\nallowed_batch_sizes: 8\n'
                                        'thread_pool_name { value: "pool" }')
    assert got == {"num_batch_threads": 3}
    assert sorted(r.getMessage() for r in caplog.records) == [
        f"batching parameter {name} is not used by glomo serve; ignored"
        for name in ("allowed_batch_sizes", "thread_pool_name")]


# ----------------------------------------------------------------------------- hostile input
def _tensor_proto(shape, dtype=tf.float32, values=()):
    proto = tf.make_tensor_proto(np.zeros([0], dtype.as_numpy_dtype), dtype=dtype)
    del proto.tensor_shape.dim[:]
    for size in shape:
        proto.tensor_shape.dim.add(size=size)
    proto.float_val.extend(values)
    return proto


@pytest.mark.parametrize("shape,code,words", [
    ([2 ** 40], "RESOURCE_EXHAUSTED", "shape [1099511627776], 1099511627776 elements) holds"),
    ([-1], "INVALID_ARGUMENT", "dimension -1 in shape [-1] is negative"),
    ([1] * 40, "INVALID_ARGUMENT", "has 40 dimensions"),
])
def test_grpc_tensor_shapes_are_checked_before_any_allocation(server, stubs, shape, code, words):
    """A TensorProto's shape is checked before make_ndarray would fill it: no MemoryError
    (INTERNAL), no negative dimension accepted."""
    request = predict_request("toy", "scale", k=np.ones(1, np.int32))
    request.inputs["x"].CopyFrom(_tensor_proto(shape, values=[1.0]))
    with pytest.raises(grpc.RpcError) as raised:
        stubs[0].Predict(request, timeout=60)
    assert raised.value.code().name == code
    assert words in raised.value.details()


def test_rest_nesting_deeper_than_numpy_allows_is_a_400(server):
    deep = "[" * 100 + '"x"' + "]" * 100
    status, doc = rest(server.rest_url + PREDICT, "POST",
                       raw=('{"instances": ' + deep + "}").encode())
    assert status == 400 and "at most 32 are accepted" in doc["error"], doc


def _raw_http(server, payload):
    """Sends raw bytes; returns the status line and the body of the answer."""
    head, _, body = raw_http(server.rest_port, payload).partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode(), body


def test_http_framing_conflicting_lengths_and_late_bodies_are_refused(server):
    body = json.dumps({"signature_name": "negate", "instances": [1.0]}).encode()
    request = (f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\nContent-Length: {len(body) + 5}\r\n"
               "Connection: close\r\n\r\n").encode() + body
    status, answer = _raw_http(server, request)
    assert status.split()[1] == "400" and b"Duplicate Content-Length" in answer, (status, answer)
    request = (f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body) + 40}\r\n\r\n").encode() + body
    server._rest.body_timeout = 0.5
    try:
        status, answer = _raw_http(server, request)
    finally:
        server._rest.body_timeout = 30.0
    assert status.split()[1] == "408" and b"did not arrive within 0.5 s" in answer, \
        (status, answer)


def test_pipelined_requests_are_answered_in_order_and_100_continue_is_sent(server):
    """Three requests in one write on one connection (the last closes it): three answers, in
    order, each its own request's; a request that asks for ``100 Continue`` gets it first."""
    def post(values, extra=""):
        body = json.dumps({"signature_name": "negate", "instances": values}).encode()
        return (f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                f"{extra}\r\n").encode() + body

    data = raw_http(server.rest_port, post([1.0]) + post([2.0, 3.0], "Expect: 100-continue\r\n")
                    + post([4.0], "Connection: close\r\n"), until_close=True)
    assert data.count(b"HTTP/1.1 100 Continue\r\n\r\n") == 1, data[:300]
    data = data.replace(b"HTTP/1.1 100 Continue\r\n\r\n", b"")
    answers = []
    while data:
        head, _, rest_ = data.partition(b"\r\n\r\n")
        length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
        assert head.startswith(b"HTTP/1.1 200"), head
        answers.append(json.loads(rest_[:length])["predictions"])
        data = rest_[length:]
    assert answers == [[-1.0], [-2.0, -3.0], [-4.0]]


@pytest.mark.parametrize("head,words", [
    (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", "Got more than 65536 bytes"),
    (b"GET /v1/models/toy HTTP/1.1\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n",
     "Got more than 65536 bytes"),
    (b"GET /v1/models/toy HTTP/1.1\r\n" + b"X-Many: 1\r\n" * 101 + b"\r\n",
     "Too many headers"),
    (b"GET /v1/models/toy HTTP/1.x\r\n\r\n", "Invalid minor version"),
])
def test_over_long_or_malformed_request_heads_get_a_json_error(server, head, words):
    """The limits the server sets on a request's head (65,536 bytes a line, 100 headers) and the
    parser's version check, answered 400 with TF Serving's JSON error body, the head sent in
    pieces as a slow client would."""
    with socket.create_connection(("127.0.0.1", server.rest_port), timeout=30) as connection:
        for start in range(0, len(head), 4096):
            connection.sendall(head[start:start + 4096])
        data = b""
        while True:
            try:
                chunk = connection.recv(65536)
            except ConnectionResetError:  # the server closed with the rest of the head unread
                break
            if not chunk:
                break
            data += chunk
    answer, _, body = data.partition(b"\r\n\r\n")
    assert answer.split(b"\r\n")[0].split()[1] == b"400", data[:300]
    assert b"application/json" in answer and words in json.loads(body)["error"], body


def test_a_hundred_headers_are_taken(server):
    status, answer = _raw_http(server, b"GET /v1/models/toy HTTP/1.1\r\nHost: x\r\n"
                               + b"X-Many: 1\r\n" * 99 + b"\r\n")
    assert status.split()[1] == "200" and b"AVAILABLE" in answer, (status, answer)


def test_head_is_answered_like_other_unsupported_methods(server):
    status, _ = _raw_http(server, f"HEAD {PREDICT} HTTP/1.1\r\nHost: x\r\n"
                                  "Connection: close\r\n\r\n".encode())
    assert status.split()[1] == "400", status


def test_a_client_gone_while_its_request_waits_for_a_batch_is_one_log_line(store, tmp_path,
                                                                           caplog):
    """The connection is reset while the request waits in the batcher: one log line,
    no traceback, the request is taken off the queue, and the server goes on serving."""
    base = tmp_path / "gone"
    publish(store, 1, base)
    with ModelServer(model_name="toy", model_base_path=str(base), rest_port=0, grpc_port=None,
                     file_system_poll_wait_seconds=0, max_batch_size=64,
                     batch_timeout_micros=2_000_000) as server, \
            caplog.at_level("INFO", logger="glomo_tf.serving"):
        body = json.dumps({"signature_name": "scale", "inputs": {"x": [[1, 2, 3]], "k": [1]}})
        sock = socket.create_connection(("127.0.0.1", server.rest_port))
        sock.sendall((f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}"
                      f"\r\n\r\n{body}").encode())
        time.sleep(0.3)  # decoded and queued, its batch not due for 2 s
        assert server.batcher.queued_requests() == 1
        port = sock.getsockname()[1]
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # a reset
        deadline = time.monotonic() + 10
        while server.batcher.queued_requests() and time.monotonic() < deadline:
            time.sleep(0.05)
        lines = [r.getMessage() for r in caplog.records if "went away" in r.getMessage()]
        assert lines == [f"REST client 127.0.0.1:{port} went away: ConnectionResetError"], lines
        assert not any(r.exc_info for r in caplog.records)
        assert server.batcher.stats["requests"] == 0  # taken off the queue, never run
        status, doc = rest(server.rest_url + PREDICT, "POST", {
            "signature_name": "ids", "inputs": {"ids": [[1, 2]]}})
        assert status == 200 and doc["outputs"]["doubled"] == [[2, 4]]


def test_float_tokens_are_the_shortest_round_trip_texts_for_sparse_and_dense_arrays(rng):
    """Mostly-zero arrays take a shortcut for the zeros; every token must still parse back to
    its float32, keep the sign of zero, and spell non-finite values as TF Serving does."""
    from glomo_tf.serving.tensors import float_tokens
    for sparsity in (0.0, 0.9):
        values = rng.normal(size=(3, 50)).astype(np.float32)
        values[rng.random(values.shape) < sparsity] = 0.0
        values[0, :3] = [-0.0, np.nan, -np.inf]
        tokens = float_tokens(values)
        for token, value in zip(tokens.ravel().tolist(), values.ravel().tolist()):
            if np.isnan(value):
                assert token == "NaN"
            elif np.isinf(value):
                assert token == ("Infinity" if value > 0 else "-Infinity")
            else:
                assert np.float32(float(token)) == np.float32(value), (token, value)
                assert np.signbit(float(token)) == np.signbit(value), (token, value)
                assert token == repr(np.float32(value).item()) or len(token) <= len(
                    repr(np.float32(value).item())), (token, value)


def test_response_json_parses_back_to_the_same_arrays(rng):
    """What orjson writes (finite numbers, UTF-8 strings) and what the general path writes
    (float16, a non-UTF-8 string) parse back to the very arrays, in both response formats: every
    float32 exactly (signed zeros, subnormals, the extremes), NaN and infinities spelled as TF
    Serving spells them."""
    import json
    from glomo_tf.serving import tensors
    tiny = np.finfo(np.float32).smallest_subnormal
    floats = rng.normal(size=(2, 3, 40)).astype(np.float32)
    floats[rng.random(floats.shape) < 0.5] = 0.0
    floats[0, 0, :6] = [-0.0, tiny, -tiny, np.finfo(np.float32).max, 1e-30, 0.1]
    outputs = {"graphs": floats, "ids": rng.integers(-2 ** 62, 2 ** 62, size=(2, 5)),
               "mask": rng.random((2, 5)) < 0.5, "scores": rng.normal(size=2),
               "half": rng.normal(size=(2, 3)).astype(np.float16),
               "tokens": np.array([[b"a", "\u00e9".encode()], [b"\xff", b"c"]], dtype=object)}
    columnar = json.loads(tensors.columnar_json(outputs))["outputs"]
    rows = json.loads(tensors.row_json(outputs))["predictions"]
    for name, want in outputs.items():
        got_columns = np.asarray(columnar[name])
        got_rows = np.asarray([row[name] for row in rows])
        for got in (got_columns, got_rows):
            if name == "tokens":
                assert got.tolist() == [["a", "\u00e9"], [{"b64": "/w=="}, "c"]]
                continue
            got = got.astype(want.dtype)
            np.testing.assert_array_equal(got, want, err_msg=name)
            if want.dtype.kind == "f":
                np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=name)
    assert json.loads(tensors.columnar_json({"half": np.float16([0.1])}))["outputs"] == [0.1]
    nonfinite = np.array([1.5, np.nan, -np.inf], np.float32)
    text = tensors.columnar_json({"x": nonfinite})
    assert text == '{"outputs": [1.5,NaN,-Infinity]}'
    assert np.array_equal(np.asarray(tensors.loads(text.encode())["outputs"], np.float32),
                          nonfinite, equal_nan=True)


def test_string_tensors_written_by_orjson_are_the_standard_library_text():
    """String tensors go through orjson in one call: the text equals the standard library's
    element by element (``json.dumps(..., ensure_ascii=False)``) for quotes, backslashes, every
    control character, non-ASCII and astral characters, in both response formats; a tensor with
    an element that is not UTF-8 is written the general way (that element as ``{"b64": ...}``),
    as is a ``*_bytes`` output."""
    import json
    from glomo_tf.serving import tensors
    tricky = ['say "hi"\\', "".join(map(chr, range(32))) + "\x7f",
              "caf\u00e9 \u2028 \U0001F600", ""]
    outputs = {
        "tokens": np.array([[t.encode() for t in tricky], [b"a", b"b", b"c", b"d"]],
                           dtype=object),
        "unicode": np.array([["x", "\u00e9"], ["y", "z"]]),  # NumPy str dtype
        "fixed": np.array([[b"ab", b"c"], [b"d", b"e"]]),  # NumPy bytes dtype
        "raw": np.array([[b"ok", b"\xff"], [b"a", b"b"]], dtype=object),  # not UTF-8
        "ids_bytes": np.array([[b"ab"], [b"c"]], dtype=object),
        "empty": np.zeros((2, 0), dtype=object),
    }

    def standard(value):  # the standard library's text, element by element
        if isinstance(value, list):
            return "[" + ",".join(standard(v) for v in value) + "]"
        return json.dumps(value, ensure_ascii=False)

    columnar = tensors.columnar_json(outputs)
    doc = json.loads(columnar)["outputs"]
    assert doc["tokens"][0] == tricky and doc["unicode"] == [["x", "\u00e9"], ["y", "z"]]
    assert doc["raw"] == [["ok", {"b64": "/w=="}], ["a", "b"]]
    assert doc["ids_bytes"] == [[{"b64": "YWI="}], [{"b64": "Yw=="}]]
    assert doc["empty"] == [[], []]
    for name in ("tokens", "unicode", "fixed"):  # the one-call path is the one taken
        assert tensors._orjson_text(outputs[name]) == standard(doc[name])
        assert tensors.array_to_json(outputs[name], name) == standard(doc[name])
        rows = json.loads(tensors.row_json({name: outputs[name]}))["predictions"]
        assert rows == doc[name]
    assert tensors._orjson_text(outputs["raw"]) is None
    assert tensors._orjson_text(outputs["tokens"], as_bytes=True) is None
    assert tensors.array_to_json(np.array(b"scalar", dtype=object)) == '"scalar"'


def _read_back(outputs):
    """The REST server's columnar answer for ``outputs`` read by the client's simdjson reader."""
    from glomo_tf.serving import tensors
    types = {name: "DT_" + {"float32": "FLOAT", "float64": "DOUBLE", "float16": "HALF",
                            "bool": "BOOL", "object": "STRING"}.get(value.dtype.name,
                                                                    value.dtype.name.upper())
             for name, value in outputs.items()}
    return tensors.read_outputs(tensors.columnar_json(outputs).encode(), types)


def test_simdjson_reader_gives_the_very_arrays_the_server_wrote(rng):
    """Numeric tensors read straight into arrays (no Python number per element) equal the arrays
    the server encoded, bit for bit and in dtype: float32 extremes, signed zeros and subnormals,
    64-bit integers at their limits, every integer width; strings (b64 for non-UTF-8) and bools go
    the general way inside the same answer; a scalar output and a single unnamed output too."""
    from glomo_tf.serving import tensors
    tiny = np.finfo(np.float32).smallest_subnormal
    floats = rng.normal(size=(2, 3, 4, 5)).astype(np.float32)
    floats[rng.random(floats.shape) < 0.5] = 0.0
    floats[0, 0, 0] = [-0.0, tiny, -tiny, np.finfo(np.float32).max, 0.1]
    outputs = {"graphs": floats, "scores": rng.normal(size=(3, 2)),
               "half": rng.normal(size=(2, 3)).astype(np.float16),
               "big": np.array([[-2 ** 63, 2 ** 63 - 1], [0, -1]], np.int64),
               "huge": np.array([2 ** 64 - 1, 0, 7], np.uint64),
               "ids": rng.integers(-2 ** 31, 2 ** 31, size=(4, 3)).astype(np.int32),
               "small": np.array([[-128, 127]], np.int8), "bytes": np.array([0, 255], np.uint8),
               "mask": rng.random((2, 5)) < 0.5, "count": np.array(3, np.int32),
               "tokens": np.array([[b"a", "\u00e9".encode()], [b"\xff", b"c"]], dtype=object)}
    got = _read_back(outputs)
    assert set(got) == set(outputs)
    for name, want in outputs.items():
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
        np.testing.assert_array_equal(got[name], want, err_msg=name)
        if want.dtype.kind == "f":
            np.testing.assert_array_equal(np.signbit(got[name]), np.signbit(want), err_msg=name)
    got["graphs"][0, 0, 0, 0] = 5.0  # the arrays are the caller's own
    (single,) = _read_back({"x": floats}).values()
    np.testing.assert_array_equal(single, floats)


@pytest.mark.parametrize("payload, types", [
    (b'{"outputs": [1.5, NaN]}', {"x": "DT_FLOAT"}),                    # not strict JSON
    (b'{"outputs": [[], []]}', {"x": "DT_FLOAT"}),                      # an empty dimension
    (b'{"outputs": [1, 300]}', {"x": "DT_INT8"}),                       # out of the type's range
    (b'{"outputs": [1, 2.5]}', {"x": "DT_INT32"}),                      # a fraction for an int
    (b'{"outputs": [1, -2]}', {"x": "DT_UINT16"}),                      # a negative unsigned
    (b'{"outputs": [1, "a"]}', {"x": "DT_FLOAT"}),                      # a string leaf
    (b'{"outputs": [[1, 2], [3]]}', {"x": "DT_FLOAT"}),                 # ragged
    (b'{"outputs": [1, 2]}', {"x": "DT_FLOAT", "y": "DT_FLOAT"}),       # not an object of outputs
    (b'{"predictions": [1, 2]}', {"x": "DT_FLOAT"}),                    # the row format
    (b'[1, 2]', {"x": "DT_FLOAT"}),
])
def test_simdjson_reader_leaves_what_it_cannot_take_to_the_general_path(payload, types):
    from glomo_tf.serving import tensors
    assert tensors.read_outputs(payload, types) is None


def test_simdjson_reader_survives_a_held_document():
    """Each thread reuses one parser; a document still referenced (which makes simdjson refuse
    to reuse its parser) costs a fresh parser, not an error."""
    from glomo_tf.serving import tensors
    payload = b'{"outputs": {"a": [[1.0, 2.0]], "b": [3]}}'
    types = {"a": "DT_FLOAT", "b": "DT_INT64"}
    held = tensors._parse(payload)
    got = tensors.read_outputs(payload, types)
    assert got["a"].tolist() == [[1.0, 2.0]] and got["b"].dtype == np.int64
    assert held["outputs"]["b"][0] == 3

    def read(_):
        return tensors.read_outputs(payload, types)["a"].sum()
    with futures.ThreadPoolExecutor(4) as pool:
        assert list(pool.map(read, range(64))) == [3.0] * 64


def test_parsing_pauses_the_garbage_collector_and_restores_it(monkeypatch):
    """Parsing a large answer must not trigger collections of the whole process; afterwards the
    collector is exactly as it was (enabled or not), also when a parse fails."""
    import gc
    from glomo_tf.serving import tensors
    seen = []
    real = tensors.json.loads

    def spy(text, *args, **kwargs):
        seen.append(gc.isenabled())
        return real(text, *args, **kwargs)

    monkeypatch.setattr(tensors.json, "loads", spy)  # NaN: orjson refuses, json reads
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            assert tensors.loads(b'{"outputs": [1.5, NaN]}')["outputs"][0] == 1.5
            with pytest.raises(ValueError):
                tensors.loads(b'{"outputs": [')
            assert gc.isenabled() is enabled
            with tensors.collection_paused:  # nested, as in concurrent parses
                tensors.loads(b"[1]")
                assert not gc.isenabled()
            assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert seen and not any(seen)


def test_serve_without_the_serve_extra_names_it(tmp_path, monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "aiohttp" else real(name, *a))
    with pytest.raises(UsageError, match=r"needs aiohttp.*pip install 'glomo_tf\[serve\]'"):
        server_from_args(parse(["serve", f"--model_base_path={tmp_path}"]))
