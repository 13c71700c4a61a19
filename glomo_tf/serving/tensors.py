"""NumPy <-> JSON tensors in TF Serving's REST encoding (``tensorflow_serving/util/json_tensor``).

Decoding (request -> array): a JSON value is a scalar or a rectangular nested list whose leaves all
sit at the same depth; each leaf must be of the signature's type: numbers for floats, integers (no
fraction) for integer types, ``true``/``false`` for bools, and for ``DT_STRING`` either a string
(sent as its UTF-8 bytes) or ``{"b64": "<base64>"}`` for arbitrary bytes.

Encoding (array -> JSON text): floats as the shortest decimal that parses back to the same value
of their own precision (``0.1`` for float32 0.1, as TF Serving writes them), ``NaN``/``Infinity``
spelled as TF Serving spells them, strings as JSON strings, and strings whose tensor name ends in
``_bytes`` as ``{"b64": ...}``. One deliberate difference: a string value that is not valid UTF-8
is written as ``{"b64": ...}`` too, where TF Serving would emit invalid JSON.
"""

import base64
import binascii
import gc
import json
import math
import threading

import numpy as np

from glomo_tf.serving.errors import ServingError, invalid
from glomo_tf.serving.limits import RequestLimits

try:  # the `serve` extra: orjson writes (and reads) numeric tensors in C, not per element;
    import orjson  # pysimdjson reads an answer's numeric tensors straight into arrays
    import simdjson
except ImportError as missing:
    raise ImportError(f"glomo_tf.serving needs the `serve` extra ({missing.name} is not "
                      "installed): pip install 'glomo_tf[serve]'") from None
# dtypes orjson writes exactly as this module does (shortest round-trip text of the value's own
# precision); float16 is left out: orjson writes it with float32's digits (0.099975586, not 0.1).
ORJSON_KINDS = frozenset((np.dtype(t) for t in (
    np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
    np.uint32, np.uint64, np.bool_)))

DEFAULT_LIMITS = RequestLimits()
UNLIMITED = RequestLimits(1 << 62, 1 << 62, 64, 1 << 62)  # what a client reads of an answer

# TF DataType names (as the metadata JSON spells them) -> NumPy dtype. bfloat16 has no NumPy
# dtype: it is carried as float32 on the NumPy side, and TensorFlow casts it at the model.
NUMPY_DTYPES = {
    "DT_FLOAT": np.float32, "DT_DOUBLE": np.float64, "DT_HALF": np.float16,
    "DT_BFLOAT16": np.float32,
    "DT_INT8": np.int8, "DT_INT16": np.int16, "DT_INT32": np.int32, "DT_INT64": np.int64,
    "DT_UINT8": np.uint8, "DT_UINT16": np.uint16, "DT_UINT32": np.uint32, "DT_UINT64": np.uint64,
    "DT_BOOL": np.bool_, "DT_STRING": np.object_,
}
FLOAT_TYPES = {"DT_FLOAT", "DT_DOUBLE", "DT_HALF", "DT_BFLOAT16"}
# Largest integer each float type holds exactly: TF Serving refuses larger JSON integers for it.
FLOAT_EXACT_INT = {"DT_FLOAT": 2 ** 24 - 1, "DT_DOUBLE": 2 ** 53 - 1, "DT_HALF": 2 ** 11 - 1,
                   "DT_BFLOAT16": 2 ** 8 - 1}
FLOAT_MAX = {"DT_FLOAT": float(np.finfo(np.float32).max), "DT_DOUBLE": math.inf,
             "DT_HALF": float(np.finfo(np.float16).max),
             "DT_BFLOAT16": float(np.finfo(np.float32).max)}
BYTES_SUFFIX = "_bytes"


def short_type(dtype_name):
    """``DT_FLOAT`` -> ``float``: the way TF Serving's messages name types."""
    return dtype_name[3:].lower() if dtype_name.startswith("DT_") else dtype_name


def json_type(value):
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (int, float)):
        return "Number"
    if isinstance(value, str):
        return "String"
    if isinstance(value, list):
        return "Array"
    return "Object"


def show(value, limit=120):
    """A JSON value as an error message quotes it: its text, cut after ``limit`` characters."""
    text = json.dumps(value)
    return text if len(text) <= limit else text[:limit] + "..."


def is_b64_object(value):
    """``{"b64": "<string>"}`` and nothing else: TF Serving's encoding of binary strings."""
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def decode_b64(value):
    try:
        return base64.b64decode(value["b64"], validate=True)
    except (binascii.Error, ValueError):
        raise invalid(f"Unable to base64 decode {show(value)}") from None


def _leaf_converter(dtype_name, limits=DEFAULT_LIMITS):
    """A function checking one JSON leaf against ``dtype_name`` and returning its Python value."""
    def type_error(value):
        return invalid(f"JSON Value: {show(value)} Type: {json_type(value)} is not of expected "
                       f"type: {short_type(dtype_name)}")

    if dtype_name in FLOAT_TYPES:
        limit, exact = FLOAT_MAX[dtype_name], FLOAT_EXACT_INT[dtype_name]

        def convert(value):
            if type(value) not in (int, float):
                raise type_error(value)
            if (abs(value) > exact if type(value) is int
                    else math.isfinite(value) and abs(value) > limit):
                raise invalid(f"Cannot convert JSON value: {value} to {short_type(dtype_name)} "
                              "without loss of precision.")
            return value
        return convert
    if dtype_name in NUMPY_DTYPES and np.issubdtype(NUMPY_DTYPES[dtype_name], np.integer):
        info = np.iinfo(NUMPY_DTYPES[dtype_name])

        def convert(value):
            if type(value) is not int:
                raise type_error(value)
            if not info.min <= value <= info.max:
                raise invalid(f"JSON Value: {value} is out of range for "
                              f"{short_type(dtype_name)}")
            return value
        return convert
    if dtype_name == "DT_BOOL":
        def convert(value):
            if type(value) is not bool:
                raise type_error(value)
            return value
        return convert
    if dtype_name == "DT_STRING":
        def convert(value):
            if isinstance(value, str):
                if len(value) * 4 > limits.max_text_bytes:  # a UTF-8 character takes 1-4 bytes
                    limits.check_text(len(value.encode("utf-8")))
                return value.encode("utf-8")
            if isinstance(value, dict):
                if not is_b64_object(value):
                    raise invalid(f"JSON Value: {show(value)} not formatted correctly for base64 "
                                  "data")
                decoded = decode_b64(value)
                limits.check_text(len(decoded))
                return decoded
            raise type_error(value)
        return convert
    raise ServingError("UNIMPLEMENTED",
                       f"Conversion of JSON values to type {short_type(dtype_name)} is not "
                       "supported")


def dense_shape(value):
    """The shape implied by following the first element of each nested list."""
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return tuple(shape)


def json_to_array(value, dtype_name, limits=DEFAULT_LIMITS, elements_before=0):
    """Decode one JSON tensor value of type ``dtype_name`` (``"DT_FLOAT"``...) into an array.

    ``limits`` (a :class:`~glomo_tf.serving.limits.RequestLimits`) is checked before anything is
    converted: the rank, and the elements of this value plus ``elements_before`` (those the
    request's other values already hold); the bytes of each string as it is converted.

    Raises:
        ServingError: INVALID_ARGUMENT for a ragged list, a leaf at the wrong depth or of the wrong
            type, bad base64, too many dimensions; RESOURCE_EXHAUSTED for too many elements or
            too long a string; UNIMPLEMENTED for types JSON cannot carry (complex, variant...).
    """
    convert = _leaf_converter(dtype_name, limits)
    shape = dense_shape(value)
    rank = len(shape)
    limits.check_rank(rank)
    limits.check_elements(elements_before + math.prod(shape))
    flat = []

    def fill(item, level):
        if isinstance(item, list):
            if level >= rank:
                raise invalid(f"Encountered list at unexpected level: {level} expected < {rank}")
            if len(item) != shape[level]:
                raise invalid(f"Encountered list at unexpected size: {len(item)} at level: "
                              f"{level} expected size: {shape[level]} (lists must be rectangular)")
            for element in item:
                fill(element, level + 1)
        else:
            if level != rank:
                raise invalid(f"JSON Value: {show(item)} found at incorrect level: {level + 1} in "
                              f"the JSON DOM. Expected at level: {rank}")
            flat.append(convert(item))

    fill(value, 0)
    if dtype_name == "DT_STRING":
        array = np.empty(len(flat), dtype=object)
        array[:] = flat
    else:
        array = np.array(flat, dtype=NUMPY_DTYPES[dtype_name])
    return array.reshape(shape)


# ----------------------------------------------------------------------------- encoding

def float_tokens(array):
    """Each float's shortest round-trip text; zeros (most of a sparse graph's entries) are
    written without formatting them one by one."""
    zero = array == 0
    if zero.mean() > 0.25 if array.size else False:
        tokens = np.full(array.shape, "0.0", dtype="<U16")
        tokens[zero & np.signbit(array)] = "-0.0"
        rest = ~zero
        tokens[rest] = array[rest].astype(str)
    else:
        tokens = array.astype(str)
    if not np.isfinite(array).all():
        tokens = np.where(np.isnan(array), "NaN", tokens)
        tokens = np.where(np.isposinf(array), "Infinity", tokens)
        tokens = np.where(np.isneginf(array), "-Infinity", tokens)
    return tokens


def _string_token(value, as_bytes):
    if not as_bytes:
        try:
            return json.dumps(value.decode("utf-8"), ensure_ascii=False)
        except UnicodeDecodeError:
            pass
    return '{"b64": "' + base64.b64encode(value).decode("ascii") + '"}'


def _tokens(array, as_bytes):
    """An array of the same shape holding each element's JSON text."""
    if array.dtype.kind == "V" and "float" in array.dtype.name:  # bfloat16 (ml_dtypes)
        array = array.astype(np.float32)
    kind = array.dtype.kind
    if kind == "f":
        if array.dtype == np.float64:
            return np.array([repr(v) if math.isfinite(v) else _nonfinite(v)
                             for v in array.ravel().tolist()], dtype=object).reshape(array.shape)
        return float_tokens(array)
    if kind in "iu":
        return array.astype(str)
    if kind == "b":
        return np.where(array, "true", "false")
    if kind in "OSU":
        flat = [_string_token(v if isinstance(v, bytes) else str(v).encode("utf-8"), as_bytes)
                for v in array.ravel().tolist()]
        tokens = np.empty(len(flat), dtype=object)
        tokens[:] = flat
        return tokens.reshape(array.shape)
    raise ServingError("UNIMPLEMENTED", f"Cannot write values of type {array.dtype} as JSON")


def _nonfinite(value):
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _nest(tokens):
    """Join a token array into nested JSON lists."""
    if not isinstance(tokens, np.ndarray):
        return str(tokens)
    if tokens.ndim == 0:
        return str(tokens[()])
    if 0 in tokens.shape:
        return json.dumps(np.zeros(tokens.shape).tolist())
    rows = [",".join(row) for row in tokens.reshape(-1, tokens.shape[-1]).tolist()]
    rows = ["[" + row + "]" for row in rows]
    for size in reversed(tokens.shape[:-1]):
        rows = ["[" + ",".join(rows[i:i + size]) + "]" for i in range(0, len(rows), size)]
    return rows[0]


def _orjson_text(array, as_bytes=False):
    """orjson's text of a tensor, where it is this module's text written in C: numbers of
    :data:`ORJSON_KINDS` that are all finite (orjson writes NaN as ``null``), and string tensors
    (orjson escapes exactly the characters ``json.dumps(..., ensure_ascii=False)`` does) that
    are UTF-8, not under a ``*_bytes`` name, and have no empty dimension. Else None."""
    if array.dtype in ORJSON_KINDS:
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            return None
        value = array[()] if array.ndim == 0 else np.ascontiguousarray(array)
        return orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY).decode()
    if as_bytes or array.dtype.kind not in "OSU" or 0 in array.shape:
        return None
    try:
        texts = [v.decode("utf-8") if isinstance(v, bytes) else str(v)
                 for v in array.ravel().tolist()]
    except UnicodeDecodeError:
        return None
    nested = np.empty(len(texts), dtype=object)
    nested[:] = texts
    return orjson.dumps(nested.reshape(array.shape).tolist()).decode()


def array_to_json(array, name=""):
    """JSON text of one tensor (strings under a ``*_bytes`` name as ``{"b64": ...}``)."""
    array, as_bytes = np.asarray(array), name.endswith(BYTES_SUFFIX)
    text = _orjson_text(array, as_bytes)
    return text if text is not None else _nest(_tokens(array, as_bytes))


def columnar_json(outputs):
    """``{"outputs": ...}``: the value itself for a single output, else an object by name."""
    if not outputs:
        raise invalid("Cannot convert empty tensor map to JSON")
    if len(outputs) == 1:
        ((name, value),) = outputs.items()
        return '{"outputs": ' + array_to_json(value, name) + "}"
    parts = [json.dumps(name) + ": " + array_to_json(value, name)
             for name, value in sorted(outputs.items())]
    return '{"outputs": {' + ", ".join(parts) + "}}"


def row_json(outputs):
    """``{"predictions": [...]}``: one entry per batch row (all outputs must share dimension 0)."""
    if not outputs:
        raise invalid("Cannot convert empty tensor map to JSON")
    batch = None
    for name, value in sorted(outputs.items()):
        if np.ndim(value) == 0:
            raise invalid(f"Tensor name: {name} has no shape information (a scalar output cannot "
                          "be split into rows; use the columnar 'inputs' format)")
        if batch is not None and value.shape[0] != batch:
            raise invalid(f"Tensor name: {name} has inconsistent batch size: {value.shape[0]} "
                          f"expecting: {batch} (use the columnar 'inputs' format)")
        batch = value.shape[0]
    names = sorted(outputs)
    per_output = {}
    for name in names:
        value, as_bytes = np.asarray(outputs[name]), name.endswith(BYTES_SUFFIX)
        rows = [_orjson_text(np.asarray(row), as_bytes) for row in value]
        if None in rows:
            tokens = _tokens(value, as_bytes)
            rows = [_nest(tokens[i]) for i in range(batch)]
        per_output[name] = rows
    if len(names) == 1:
        rows = per_output[names[0]]
    else:
        keys = [json.dumps(name) for name in names]
        rows = ["{" + ", ".join(f"{key}: {per_output[name][i]}" for key, name in zip(keys, names))
                + "}" for i in range(batch)]
    return '{"predictions": [' + ", ".join(rows) + "]}"


# ----------------------------------------------------------------------------- client side

class _CollectionPaused:
    """Pauses the cyclic garbage collector while responses are parsed: a large tensor's nested
    lists are a burst of new containers, and each collection they trigger walks every object of
    the process (TensorFlow's included), which made parsing a 600 KB answer 6x slower. The lists
    hold no cycles; the collector runs again when the last parse in flight is done."""

    def __init__(self):
        self._lock = threading.Lock()
        self._active = 0
        self._was_enabled = False

    def __enter__(self):
        with self._lock:
            if self._active == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._active += 1

    def __exit__(self, *exc):
        with self._lock:
            self._active -= 1
            if self._active == 0 and self._was_enabled:
                gc.enable()


collection_paused = _CollectionPaused()


def loads(payload):
    """``json.loads`` of a response body (bytes), through orjson; bodies holding
    ``NaN``/``Infinity`` (which orjson refuses) go through the standard library."""
    with collection_paused:
        try:
            return orjson.loads(payload)
        except orjson.JSONDecodeError:
            return json.loads(payload.decode("utf-8"))


# dtype name -> simdjson's buffer type ("d" double, "i" int64, "u" uint64) and the array's dtype.
_BUFFER_TYPES = {name: ("d" if name in FLOAT_TYPES else "u" if name.startswith("DT_UINT") else "i",
                        NUMPY_DTYPES[name])
                 for name in NUMPY_DTYPES if name not in ("DT_BOOL", "DT_STRING")}
_BUFFER_DTYPES = {"d": np.float64, "i": np.int64, "u": np.uint64}


def read_outputs(payload, output_types):
    """``{alias: ndarray}`` of a predict answer's ``"outputs"`` (columnar form), or None where this
    reader does not apply and :func:`loads` with :func:`json_to_numpy` must read it.

    Numeric tensors are parsed by simdjson straight into a flat buffer: ``loads`` builds a Python
    number and list for every element, and ``np.asarray`` walks them again (several times the
    time on a large answer: ``client_decode`` in ``benchmarks/outputs/serving_latency*.json``).
    Values equal the general path's: numbers are read as float64 (int64, uint64 for integer types)
    and cast as ``np.asarray`` casts Python numbers. The shape is read from the first element at
    each depth and must account for every number (servers write dense tensors: a ragged nesting is
    caught where its count differs, not where it happens to match); an answer this reader cannot
    take whole (``NaN``/``Infinity``, a leaf of the wrong type, an integer out of its
    type's range, an empty dimension) is left to the general path, which reads or refuses it as
    before. ``output_types`` is ``{alias: dtype name}`` from the signature's metadata."""
    try:
        doc = _parse(payload)
    except ValueError:  # not strict JSON (NaN, Infinity): the general path reads it
        return None
    if not isinstance(doc, simdjson.Object) or "outputs" not in doc:
        return None
    outputs = doc["outputs"]
    if len(output_types) == 1:
        outputs = {next(iter(output_types)): outputs}
    elif not isinstance(outputs, simdjson.Object):
        return None
    arrays = {}
    for alias in list(outputs.keys()):
        array = _read_tensor(outputs[alias], output_types.get(alias, ""))
        if array is None:
            return None
        arrays[alias] = array
    return arrays


_parsers = threading.local()


def _parse(payload):
    """simdjson's document of ``payload`` from this thread's parser: a parser keeps its buffers
    for the next answer (a fresh one allocates and faults in several MB for a large answer)."""
    parser = getattr(_parsers, "parser", None)
    if parser is not None:
        try:
            return parser.parse(payload)
        except RuntimeError:  # a document of its last parse is still referenced somewhere
            pass
    _parsers.parser = simdjson.Parser()
    return _parsers.parser.parse(payload)


def _read_tensor(value, dtype_name):
    """One output of a parsed answer: numeric arrays by :func:`_read_numbers`, the rest as the
    general path reads them; None where the answer must go the general way."""
    if dtype_name in _BUFFER_TYPES and isinstance(value, simdjson.Array):
        return _read_numbers(value, *_BUFFER_TYPES[dtype_name])
    if isinstance(value, simdjson.Array):
        value = value.as_list()
    elif isinstance(value, simdjson.Object):
        value = value.as_dict()
    return json_to_numpy(value, dtype_name)


def _read_numbers(value, buffer_type, dtype):
    """A numeric simdjson array as an array of ``dtype``, or None (see :func:`read_outputs`)."""
    shape, first = [], value
    while isinstance(first, simdjson.Array):
        shape.append(len(first))
        if not shape[-1]:
            return None  # JSON drops the dimensions after an empty one
        first = first[0]
    try:
        flat = np.frombuffer(value.as_buffer(of_type=buffer_type), _BUFFER_DTYPES[buffer_type])
    except (TypeError, ValueError):  # a leaf of another type, or an integer out of 64-bit range
        return None
    if flat.size != math.prod(shape):
        return None
    if flat.dtype != dtype and flat.dtype.kind in "iu" and flat.size:
        limits = np.iinfo(dtype)
        if flat.min() < limits.min or flat.max() > limits.max:
            return None
    return flat.astype(dtype, copy=False).reshape(shape)


def json_to_numpy(value, dtype_name):
    """A response tensor (nested lists from :func:`loads`) as an array of ``dtype_name``; strings
    as ``bytes`` objects (``{"b64": ...}`` decoded), as ``tensor.numpy()`` gives them."""
    if dtype_name != "DT_STRING":
        return np.asarray(value, dtype=NUMPY_DTYPES.get(dtype_name))
    try:
        return json_to_array(value, dtype_name, UNLIMITED)
    except ServingError as error:
        raise ServingError("INTERNAL", f"a malformed string tensor in the response: "
                           f"{error.message}") from None
