"""What the REST and gRPC front ends share: predictions, model status and metadata as protos."""

import logging

import numpy as np

from glomo_tf.serving.errors import CODES, ServingError, invalid
from glomo_tf.serving.models import STATES

log = logging.getLogger("glomo_tf.serving")


def cut_answer_stands(signature, outputs, rows):
    """Whether the answer to texts cut by ``signature.shorten_texts`` is the whole texts' answer:
    every cut row still ``truncated`` (its units ran past ``max_length``); else the whole texts
    must run."""
    if bool(np.all(outputs["truncated"][rows])):
        return True
    log.debug("signature %s: a cut text kept too few units; running the whole texts",
              signature.name)
    return False


class ServingCore:
    """Runs requests against a :class:`~glomo_tf.serving.models.ModelManager`.

    Args:
        manager: the model manager.
        batcher: a :class:`~glomo_tf.serving.batching.Batcher`, or None to run every request alone.
    """

    def __init__(self, manager, batcher=None, limits=None, metrics=None):
        from glomo_tf.serving.limits import RequestLimits
        self.manager = manager
        self.batcher = batcher
        self.limits = limits or RequestLimits()
        self.metrics = metrics

    def predict(self, signature, inputs, timeout=None):
        """Validate ``inputs`` against ``signature`` and run it (batched where possible).

        Texts of a GLoMo export longer than a prefix that surely holds more than its
        ``max_length`` units are cut to that prefix before tokenisation (the answer is the
        same, as the ``truncated`` output confirms; otherwise the whole texts run)."""
        signature.check_inputs(inputs)
        shortened = signature.shorten_texts(inputs)
        if shortened is not None:
            cut_inputs, rows = shortened
            outputs = self._run(signature, cut_inputs, timeout)
            if cut_answer_stands(signature, outputs, rows):
                return outputs
        return self._run(signature, inputs, timeout)

    def submit(self, signature, inputs, done):
        """:meth:`predict` without waiting, for a front end that must not block: the request is
        checked here (a :class:`ServingError` raised), queued on the batcher, and ``done(outputs,
        error)`` is called from a batch thread. Returns a function that cancels the request (it
        is not run if still queued), or None where the request is not queued (no batcher, or
        one that cannot be merged): the caller runs :meth:`predict` in a thread of its own."""
        if self.batcher is None:
            return None
        signature.check_inputs(inputs)
        shortened = signature.shorten_texts(inputs)
        tasks = []

        def cancel():
            for task in tasks:
                task.cancelled = True

        def whole(outputs, error):
            if error is None and not cut_answer_stands(signature, outputs, rows):
                try:  # queued as the cut texts were: the same signature and rows
                    tasks.append(self.batcher.submit(signature, inputs, done))
                except ServingError as refused:
                    done(None, refused)
                return
            done(outputs, error)

        if shortened is None:
            task = self.batcher.submit(signature, inputs, done)
        else:
            cut_inputs, rows = shortened
            task = self.batcher.submit(signature, cut_inputs, whole)
        if task is None:
            return None
        tasks.append(task)
        return cancel

    def _run(self, signature, inputs, timeout):
        if self.batcher is not None:
            return self.batcher.run(signature, inputs, timeout=timeout)
        return signature.run(inputs)

    def status_response(self, name, version=None, label=None):
        """``GetModelStatusResponse`` for a model, or one version of it."""
        from tensorflow_serving.apis import get_model_status_pb2
        if not name:
            raise invalid("Missing model name in request.")
        response = get_model_status_pb2.GetModelStatusResponse()
        for state in self.manager.status(name, version, label):
            entry = response.model_version_status.add()
            entry.version = state.version
            entry.state = STATES[state.state]
            entry.status.error_code = CODES[state.error_code][0]
            entry.status.error_message = state.error_message
        return response

    def metadata_response(self, name, version=None, label=None, fields=("signature_def",)):
        """``GetModelMetadataResponse`` with ``signature_def`` (TF Serving's one field)."""
        from tensorflow_serving.apis import get_model_metadata_pb2
        if not name:
            raise invalid("Missing model name in request.")
        if not fields:
            raise invalid("GetModelMetadataRequest must specify at least one metadata_field")
        for field in fields:
            if field != "signature_def":
                raise invalid(f"Metadata field {field} is not supported (only signature_def)")
        servable = self.manager.resolve(name, version, label)
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        response.model_spec.name = servable.model_name
        response.model_spec.version.value = servable.version
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        for key, signature_def in servable.signature_defs.items():
            signature_map.signature_def[key].CopyFrom(signature_def)
        response.metadata["signature_def"].Pack(signature_map)
        return response


def message_json(message):
    """A TF Serving message in its REST form: every field, proto field names."""
    from google.protobuf import json_format
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True,
                                     preserving_proto_field_name=True)


def metadata_json(response):
    """A ``GetModelMetadataResponse`` as TF Serving's REST API answers it (its ``Any`` unpacked)."""
    from tensorflow_serving.apis import get_model_metadata_pb2
    signature_map = get_model_metadata_pb2.SignatureDefMap()
    response.metadata["signature_def"].Unpack(signature_map)
    return {"model_spec": message_json(response.model_spec),
            "metadata": {"signature_def": message_json(signature_map)}}
