"""A loaded model version and its signatures: what :class:`~glomo_tf.serving.models.ModelManager`
serves.

:class:`Servable` loads one version directory (a SavedModel) and keeps its SignatureDefs (all of
them, for metadata) and a callable :class:`Signature` for each; a GLoMo export's text signature
learns from ``assets/glomo_export.json`` how long a text may be before it can be cut.
"""

import dataclasses
import functools
import json
import logging
import os
import re

import numpy as np

from glomo_tf.serving.errors import CODE_NAMES, ServingError, invalid

log = logging.getLogger("glomo_tf.serving")

DEFAULT_SIGNATURE = "serving_default"


def _shape_of(tensor_info):
    """Signature shape as a tuple with -1 for unknown dims, or None for unknown rank."""
    shape = tensor_info.tensor_shape
    if shape.unknown_rank:
        return None
    return tuple(int(d.size) for d in shape.dim)


def _format_shape(shape):
    return "[?]" if shape is None else "[" + ",".join(str(d) for d in shape) + "]"


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    dtype: str          # "DT_FLOAT"...
    shape: tuple        # None: unknown rank; -1: unknown dim
    enum: int = 0       # the DataType number

    @property
    def batch_major(self):
        return self.shape is not None and len(self.shape) >= 1 and self.shape[0] == -1


class Signature:
    """One callable signature of a loaded SavedModel.

    ``inputs``/``outputs`` map tensor aliases to :class:`TensorSpec`. ``mergeable`` says whether
    requests may be concatenated along dimension 0 and their results split back: every input and
    output is batch-major, and every output dimension after the first is static, so that no
    output's shape can depend on what else is in the batch (a padded ``[B, T]`` output with
    dynamic ``T`` is never merged).
    """

    def __init__(self, name, signature_def, function):
        from tensorflow.core.framework import types_pb2
        self.name = name
        self.signature_def = signature_def
        self.function = function
        self.inputs = {k: TensorSpec(types_pb2.DataType.Name(v.dtype), _shape_of(v), v.dtype)
                       for k, v in signature_def.inputs.items()}
        self.outputs = {k: TensorSpec(types_pb2.DataType.Name(v.dtype), _shape_of(v), v.dtype)
                        for k, v in signature_def.outputs.items()}
        self.mergeable = bool(self.inputs) and bool(self.outputs) and all(
            spec.batch_major for spec in self.inputs.values()) and all(
            spec.batch_major and all(d >= 0 for d in spec.shape[1:])
            for spec in self.outputs.values())
        self.text_prefix_bytes = None  # set by Servable for a text signature of a GLoMo export
        # Set by Servable for a GLoMo text signature: its outputs are padded to the longest text
        # of the batch (every dynamic dimension after the first is that length, the `lengths`
        # output gives each text's), so requests may be merged and cut back to their own length.
        self.pads_to_longest = False

    def cut_to_own_length(self, outputs):
        """The outputs of some rows of a merged batch, cut to the length those rows' own batch
        would have had: ``max(lengths)`` on every dynamic dimension after the first."""
        length = int(np.max(outputs["lengths"], initial=0))
        cut = {}
        for name, value in outputs.items():
            shape = self.outputs[name].shape
            index = tuple(slice(0, length) if i > 0 and size == -1 else slice(None)
                          for i, size in enumerate(shape))
            cut[name] = value[index]
        return cut

    def shorten_texts(self, inputs):
        """For a GLoMo export's text signature: ``(inputs with long texts cut, rows cut)``, or
        None when no text is long enough to cut.

        A text longer than :attr:`text_prefix_bytes` is cut at the last ASCII space, tab or
        newline within its first :attr:`text_prefix_bytes` bytes, so the tokenizer (whose units
        never span whitespace) gives the same first units for the cut text as for the whole. The
        cut is only safe when those units are more than the export's ``max_length`` (then both
        are truncated to the same units), which the caller checks on the ``truncated`` output:
        see :meth:`glomo_tf.serving.core.ServingCore.predict`.
        """
        if self.text_prefix_bytes is None:
            return None
        (alias, texts), = inputs.items()
        limit = self.text_prefix_bytes
        rows, shortened = [], None
        for row, text in enumerate(texts):
            if len(text) <= limit:
                continue
            head = text[:limit]
            cut = max(head.rfind(b" "), head.rfind(b"\t"), head.rfind(b"\n"))
            if cut <= 0:
                continue  # one word as long as the prefix: nothing safe to cut
            if shortened is None:
                shortened = texts.copy()
            shortened[row] = head[:cut]
            rows.append(row)
        return None if shortened is None else ({alias: shortened}, rows)

    def check_inputs(self, inputs):
        """Validate a ``{alias: ndarray}`` request against the signature (names, ranks, dims)."""
        sent, wanted = set(inputs), set(self.inputs)
        if sent != wanted:
            extra = ", ".join(sorted(sent - wanted))
            missing = ", ".join(sorted(wanted - sent))
            raise invalid(f"input size does not match signature {self.name!r}: {len(sent)}!="
                          f"{len(wanted)} len({{{', '.join(sorted(sent))}}}) != "
                          f"len({{{', '.join(sorted(wanted))}}}). Sent extra: {{{extra}}}. "
                          f"Missing but required: {{{missing}}}.")
        for alias, array in inputs.items():
            spec = self.inputs[alias]
            if spec.shape is not None:
                compatible = array.ndim == len(spec.shape) and all(
                    want < 0 or want == got for want, got in zip(spec.shape, array.shape))
                if not compatible:
                    raise invalid(f"input {alias!r} has shape {_format_shape(array.shape)} but "
                                  f"signature {self.name!r} expects {_format_shape(spec.shape)}")
            if spec.batch_major and array.shape[0] == 0:
                raise invalid(f"empty batch: input {alias!r} has no rows (dimension 0 is 0)")

    def run(self, inputs):
        """Call the signature on validated NumPy inputs; returns ``{alias: ndarray}``."""
        import tensorflow as tf
        try:
            tensors = {alias: tf.constant(value, dtype=tf.dtypes.as_dtype(self.inputs[alias].enum))
                       for alias, value in inputs.items()}
            results = self.function(**tensors)
        except tf.errors.OpError as error:
            raise ServingError(CODE_NAMES.get(error.error_code, "UNKNOWN"),
                               client_message(error.message)) from None
        except (TypeError, ValueError) as error:
            raise invalid(f"signature {self.name!r} rejected the inputs: {error}") from None
        return {alias: np.asarray(value.numpy()) for alias, value in results.items()}


def client_message(message):
    """A model's run-time error as a client should read it: an assertion's own text (``assertion
    failed: [token id] [57] [is out of range...]`` -> ``token id 57 is out of range...``) without
    TensorFlow's "Graph execution error" preamble and node names; other errors unchanged."""
    found = re.search(r"assertion failed: (.*)", message)
    if not found:
        return message
    parts = re.findall(r"\[([^\[\]]*)\]", found.group(1))
    return " ".join(part.strip() for part in parts if part.strip()) or message


@functools.cache
def register_serving_ops():
    """Register the tensorflow-text tokenizer kernels that TF Serving links in (once), so a
    SavedModel that loads there (a GLoMo export included) loads here, in a process that never
    imported ``tensorflow_text``. Without tensorflow-text installed, only core ops are there."""
    try:
        from glomo_tf.export.serving_ops import load_serving_ops
        load_serving_ops()
    except Exception as error:  # tensorflow-text missing or unusable: core ops only
        log.warning("tensorflow-text tokenizer ops not registered (%s); SavedModels using them "
                    "will fail to load", error)


class Servable:
    """One loaded model version: its SignatureDefs (all, for metadata) and callables."""

    def __init__(self, model_name, version, path, tags=("serve",)):
        import tensorflow as tf
        register_serving_ops()
        self.model_name = model_name
        self.version = version
        self.path = path
        self.signature_defs = read_signature_defs(path, tags)
        self._loaded = tf.saved_model.load(path, tags=list(tags))
        self.signatures = {}
        for name, function in self._loaded.signatures.items():
            if name in self.signature_defs:
                self.signatures[name] = Signature(name, self.signature_defs[name], function)
        max_length = glomo_export_max_length(path)
        if max_length is not None:
            for signature in self.signatures.values():
                if _cuttable_text_signature(signature):
                    # Units are at least a byte; 32 bytes a unit leaves room for long words.
                    signature.text_prefix_bytes = max(4096, 32 * (max_length + 1))
                    signature.pads_to_longest = _pads_to_longest(signature)

    def signature(self, name):
        name = name or DEFAULT_SIGNATURE
        if name not in self.signatures:
            raise invalid(f"Serving signature name: \"{name}\" not found in signature def "
                          f"(model {self.model_name!r} version {self.version} has: "
                          f"{', '.join(sorted(self.signatures)) or 'none'})")
        return self.signatures[name]


def glomo_export_max_length(path):
    """The ``max_length`` a GLoMo export records in ``assets/glomo_export.json``, or None."""
    try:
        with open(os.path.join(path, "assets", "glomo_export.json"), encoding="utf-8") as f:
            value = json.load(f).get("max_length")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def _cuttable_text_signature(signature):
    """One ``[B]`` string input and a ``[B]`` bool ``truncated`` output: a GLoMo text
    signature, whose long texts :meth:`Signature.shorten_texts` may cut."""
    if len(signature.inputs) != 1:
        return False
    (spec,) = signature.inputs.values()
    truncated = signature.outputs.get("truncated")
    return (spec.dtype == "DT_STRING" and spec.shape == (-1,) and truncated is not None
            and truncated.dtype == "DT_BOOL" and truncated.shape == (-1,))


def _pads_to_longest(signature):
    """Batch-major outputs, among them ``lengths`` ``[B]``: a GLoMo text signature's layout."""
    lengths = signature.outputs.get("lengths")
    return (lengths is not None and lengths.shape == (-1,)
            and all(spec.batch_major for spec in signature.outputs.values()))


def read_signature_defs(path, tags=("serve",)):
    """``{name: SignatureDef}`` of the MetaGraph tagged ``tags`` in the SavedModel at ``path``."""
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2
    saved_model = saved_model_pb2.SavedModel()
    pb = os.path.join(path, "saved_model.pb")
    if os.path.exists(pb):
        with open(pb, "rb") as f:
            saved_model.ParseFromString(f.read())
    else:
        with open(os.path.join(path, "saved_model.pbtxt"), encoding="utf-8") as f:
            text_format.Parse(f.read(), saved_model)
    for meta_graph in saved_model.meta_graphs:
        if set(meta_graph.meta_info_def.tags) == set(tags):
            return dict(meta_graph.signature_def)
    found = [sorted(m.meta_info_def.tags) for m in saved_model.meta_graphs]
    raise ValueError(f"no MetaGraph tagged {sorted(tags)} in {path} (found {found})")
