"""TF Serving's gRPC API for one served model: :class:`~glomo_tf.serving.client.ServingClient`'s
gRPC side (``PredictionService`` and ``ModelService`` stubs on one channel)."""

import grpc
import tensorflow as tf
from tensorflow_serving.apis import (get_model_metadata_pb2, get_model_status_pb2,
                                     model_service_pb2_grpc, predict_pb2,
                                     prediction_service_pb2_grpc)

from glomo_tf.serving.core import message_json, metadata_json
from glomo_tf.serving.errors import CODES, ServingError


class GrpcTransport:
    """Status, metadata and predict calls of one model over a gRPC channel.

    Args:
        target: ``host:port`` (a ``scheme://`` prefix is dropped).
        model_name / version / version_label: the model spec every request carries.
        timeout: each call's deadline in seconds (None: no deadline).
        max_message_bytes: largest message sent or received.
    """

    def __init__(self, target, model_name, version, version_label, timeout, max_message_bytes):
        self.target = target.split("://", 1)[-1]
        self.model_name, self.version, self.version_label = model_name, version, version_label
        self.timeout = timeout
        self._channel = grpc.insecure_channel(self.target, options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes)])
        self._prediction = prediction_service_pb2_grpc.PredictionServiceStub(self._channel)
        self._model = model_service_pb2_grpc.ModelServiceStub(self._channel)

    def status(self):
        """The model's ``model_version_status`` entries in TF Serving's REST form."""
        request = get_model_status_pb2.GetModelStatusRequest()
        self._fill_spec(request.model_spec)
        response = self._call(self._model.GetModelStatus, request)
        return message_json(response).get("model_version_status", [])

    def metadata(self):
        """The model's metadata in TF Serving's REST form (``model_spec`` + ``signature_def``)."""
        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        self._fill_spec(request.model_spec)
        return metadata_json(self._call(self._prediction.GetModelMetadata, request))

    def predict(self, arrays, signature_name, output_filter=None, output_types=None,
                output_shapes=None):
        """``{alias: ndarray}`` of a signature run on ``{alias: ndarray}`` (the server leaves out
        the outputs that ``output_filter`` does not name). ``output_types`` and
        ``output_shapes`` are not needed: the answer's tensor protos carry both."""
        request = predict_pb2.PredictRequest()
        self._fill_spec(request.model_spec, signature_name)
        for alias, array in arrays.items():
            request.inputs[alias].CopyFrom(tf.make_tensor_proto(array))
        if output_filter is not None:
            request.output_filter.extend(output_filter)
        response = self._call(self._prediction.Predict, request)
        return {alias: tf.make_ndarray(proto) for alias, proto in response.outputs.items()}

    def close(self):
        self._channel.close()

    def _fill_spec(self, model_spec, signature_name=None):
        model_spec.name = self.model_name
        if self.version is not None:
            model_spec.version.value = self.version
        elif self.version_label is not None:
            model_spec.version_label = self.version_label
        if signature_name is not None:
            model_spec.signature_name = signature_name

    def _call(self, method, request):
        """One call; a failed one raised as the :class:`ServingError` of its status code."""
        try:
            return method(request, timeout=self.timeout)
        except grpc.RpcError as error:
            code = error.code().name if error.code() is not None else "UNKNOWN"
            raise ServingError(code if code in CODES else "UNKNOWN",
                               error.details() or code) from None
