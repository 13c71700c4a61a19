"""TF Serving's Classify and Regress APIs over signatures that take serialized ``tf.Example``s.

A classification signature (``method_name`` ``tensorflow/serving/classify``) takes one string input
``inputs`` (serialized Examples) and returns ``classes`` (string ``[batch, n]``) and/or ``scores``
(float ``[batch, n]``); a regression signature (``tensorflow/serving/regress``) returns ``outputs``
(float ``[batch]`` or ``[batch, 1]``). Examples come from JSON objects (REST:
``{"examples": [...], "context": {...}}``) or from ``tensorflow.serving.Input`` protos (gRPC);
the context's features are merged into each example, as TF Serving does by prepending the
serialized context to each serialized example.
"""

import numpy as np

from glomo_tf.serving.errors import ServingError, invalid

CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
INPUTS = "inputs"


def _feature_from_json(name, content, feature):
    values = content if isinstance(content, list) else [content]
    kinds = set()
    for value in values:
        if value is None or isinstance(value, list):
            raise invalid(f"Feature: {name} has element with unexpected JSON type: "
                          f"{'Null' if value is None else 'Array'}")
        if isinstance(value, bool):
            kinds.add("int64")
            feature.int64_list.value.append(int(value))
        elif isinstance(value, int):
            if not -2 ** 63 <= value < 2 ** 63:
                raise invalid(f"Feature: {name} has uint64 element. Only int64 is supported.")
            kinds.add("int64")
            feature.int64_list.value.append(value)
        elif isinstance(value, float):
            kinds.add("float")
            feature.float_list.value.append(value)
        elif isinstance(value, str):
            kinds.add("bytes")
            feature.bytes_list.value.append(value.encode("utf-8"))
        elif isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str):
            from glomo_tf.serving.tensors import decode_b64
            kinds.add("bytes")
            feature.bytes_list.value.append(decode_b64(value))
        else:
            raise invalid(f"Feature: {name} has element with unexpected JSON type: Object")
        if len(kinds) > 1:
            raise invalid(f"Unexpected element type in feature: {name} (mixes "
                          f"{' and '.join(sorted(kinds))} values)")


def example_from_json(value):
    """A JSON object of features -> ``tf.train.Example``."""
    from tensorflow.core.example import example_pb2
    if not isinstance(value, dict):
        raise invalid(f"Example must be JSON object but got JSON {type(value).__name__}")
    example = example_pb2.Example()
    for name, content in value.items():
        _feature_from_json(name, content, example.features.feature[name])
    return example


def _check_context_copies(context, count, max_bytes):
    """Each example gets its own copy of the context: refuse a request whose copies would
    take more than ``max_bytes`` (a small body could otherwise fill the memory)."""
    if max_bytes and len(context) * count > max_bytes:
        from glomo_tf.serving.limits import too_large
        raise too_large(f"the context ({len(context)} bytes) copied into each of {count} "
                        f"examples takes more than {max_bytes} bytes (--max_request_bytes)")


def serialized_examples_from_json(doc, verb, max_bytes=None):
    """The ``examples`` (and optional ``context``) of a REST classify/regress body, serialized."""
    if "examples" not in doc:
        raise invalid(f"When method is {verb}, key 'examples' is expected and was not found")
    examples = doc["examples"]
    if not isinstance(examples, list):
        raise invalid("Expecting 'examples' value to be an list/array")
    if not examples:
        raise invalid("'examples' value is an empty array")
    context = b""
    if "context" in doc:
        context = example_from_json(doc["context"]).SerializeToString()
    _check_context_copies(context, len(examples), max_bytes)
    return [context + example_from_json(e).SerializeToString() for e in examples]


def serialized_examples_from_proto(input_proto, max_bytes=None):
    """A ``tensorflow.serving.Input`` -> serialized examples (context merged into each)."""
    kind = input_proto.WhichOneof("kind")
    if kind == "example_list":
        examples, context = input_proto.example_list.examples, b""
    elif kind == "example_list_with_context":
        examples = input_proto.example_list_with_context.examples
        context = input_proto.example_list_with_context.context.SerializeToString()
    else:
        raise invalid("Input is empty")
    if not examples:
        raise invalid("Input is empty")
    _check_context_copies(context, len(examples), max_bytes)
    return [context + e.SerializeToString() for e in examples]


def _check_signature(signature, method, verb):
    if signature.signature_def.method_name != method:
        raise invalid(f"Expected {verb} signature method_name to be {method}. Was: "
                      f"{signature.signature_def.method_name}")
    spec = signature.inputs.get(INPUTS)
    if len(signature.inputs) != 1 or spec is None or spec.dtype != "DT_STRING":
        raise invalid(f"Expected one input Tensor named '{INPUTS}' of type string in signature "
                      f"{signature.name!r} (it has: {sorted(signature.inputs)})")


def _run(core, signature, serialized, timeout):
    array = np.empty(len(serialized), dtype=object)
    array[:] = serialized
    return core.predict(signature, {INPUTS: array}, timeout=timeout)


def classify(core, signature, serialized, timeout=None):
    """``[[(label bytes, score float), ...] per example]`` from a classification signature."""
    _check_signature(signature, CLASSIFY_METHOD, "classification")
    if "classes" not in signature.outputs and "scores" not in signature.outputs:
        raise invalid("Expected classification signature outputs to contain at least one of "
                      "'classes' and 'scores'")
    outputs = _run(core, signature, serialized, timeout)
    classes, scores = outputs.get("classes"), outputs.get("scores")
    batch = len(serialized)
    for name, value in (("classes", classes), ("scores", scores)):
        if value is not None and (value.ndim != 2 or value.shape[0] != batch):
            raise ServingError("INVALID_ARGUMENT", f"Expected Tensor shape: [{batch} "
                               f"num_classes] but got {list(value.shape)} for output {name}")
    if classes is not None and scores is not None and classes.shape != scores.shape:
        raise invalid(f"Tensors class and score should match in shape: {list(classes.shape)} vs "
                      f"{list(scores.shape)}")
    width = (classes if classes is not None else scores).shape[1]
    return [[(classes[i, c] if classes is not None else b"",
              float(scores[i, c]) if scores is not None else 0.0) for c in range(width)]
            for i in range(batch)]


def regress(core, signature, serialized, timeout=None):
    """``[value per example]`` from a regression signature."""
    _check_signature(signature, REGRESS_METHOD, "regression")
    if "outputs" not in signature.outputs:
        raise invalid("No output Tensor named 'outputs' in the regression signature")
    value = _run(core, signature, serialized, timeout)["outputs"]
    batch = len(serialized)
    if not (value.shape == (batch,) or value.shape == (batch, 1)):
        raise invalid(f"Expected output Tensor shape to be either [{batch}] or [{batch}, 1] but "
                      f"got {list(value.shape)}")
    return [float(v) for v in value.reshape(batch)]
