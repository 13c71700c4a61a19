"""TF Serving's gRPC API: ``tensorflow.serving.PredictionService`` and ``ModelService``.

Implemented: ``PredictionService.Predict`` (with ``output_filter``, versions and version labels),
``Classify`` and ``Regress`` (tf.Example signatures), ``GetModelMetadata`` (``signature_def``),
``ModelService.GetModelStatus`` and ``ModelService.HandleReloadConfigRequest`` (replaces the
served model list). ``MultiInference`` answers UNIMPLEMENTED. Errors carry TF Serving's codes.
"""

import logging
import time
from concurrent import futures

import grpc
from tensorflow_serving.apis import (classification_pb2, model_management_pb2,
                                     model_service_pb2_grpc, predict_pb2,
                                     prediction_service_pb2_grpc, regression_pb2)

from glomo_tf.serving.errors import ServingError, invalid
from glomo_tf.serving.limits import Admission
from glomo_tf.serving.models import model_configs_from_proto
from glomo_tf.serving.monitoring import Metrics

log = logging.getLogger("glomo_tf.serving")
access_log = logging.getLogger("glomo_tf.serving.access")


def _version_and_label(model_spec):
    choice = model_spec.WhichOneof("version_choice")
    version = model_spec.version.value if choice == "version" else None
    label = model_spec.version_label if choice == "version_label" else None
    return version, label


class _Front:
    """What the gRPC services share: admission, metrics and the access log."""

    def __init__(self, core, admission=None, access_log=False):
        self.core = core
        self.metrics = core.metrics or Metrics()
        self.admission = admission
        self.access_log = access_log

    def call(self, context, api, model_name, function):
        """Run ``function``; turn a ServingError into the gRPC status it names; count the
        call."""
        started = time.monotonic()
        failure = None
        try:
            return function()
        except ServingError as error:
            failure = error
        except Exception as error:  # a bug must not take the server down
            log.exception("gRPC call failed")
            failure = ServingError("INTERNAL", f"{type(error).__name__}: {error}")
        finally:
            code = failure.code if failure is not None else "OK"
            seconds = time.monotonic() - started
            self.metrics.record_request(model_name, api, "GRPC", code, seconds)
            if self.access_log:
                access_log.info('%s "gRPC %s %s" %s %.1fms', context.peer(), api, model_name,
                                code, seconds * 1e3)
        context.abort(failure.grpc_code, failure.message)


class PredictionServicer(prediction_service_pb2_grpc.PredictionServiceServicer, _Front):

    def Predict(self, request, context):
        return self.call(context, "predict", request.model_spec.name,
                         lambda: self._predict(request, context))

    def _predict(self, request, context):
        import tensorflow as tf
        version, label = _version_and_label(request.model_spec)
        servable = self.core.manager.resolve(request.model_spec.name, version, label)
        signature = servable.signature(request.model_spec.signature_name)
        with self.admission.slot(context.time_remaining()):
            inputs = self._inputs(request, signature)
        unknown = [name for name in request.output_filter if name not in signature.outputs]
        if unknown:
            raise invalid(f"output tensor alias not found in signature: {unknown[0]} Outputs "
                          f"expected to be in the set {{{','.join(sorted(signature.outputs))}}}.")
        remaining = context.time_remaining()
        outputs = self.core.predict(signature, inputs, timeout=remaining)
        if request.output_filter:
            outputs = {name: outputs[name] for name in request.output_filter}
        response = predict_pb2.PredictResponse()
        self._fill_spec(response, servable, signature)
        for name, value in outputs.items():
            response.outputs[name].CopyFrom(tf.make_tensor_proto(value))
        return response

    def _inputs(self, request, signature):
        """The request's tensors as arrays, each checked against the limits before it is
        built."""
        import tensorflow as tf
        sent, wanted = set(request.inputs), set(signature.inputs)
        inputs, elements = {}, 0
        for alias, proto in request.inputs.items():
            if alias not in wanted:
                continue  # reported below with the full picture
            spec = signature.inputs[alias]
            if proto.dtype != spec.enum:
                got = tf.dtypes.as_dtype(proto.dtype).name if proto.dtype else "DT_INVALID"
                raise invalid(f"Expects arg[{alias}] to be {tf.dtypes.as_dtype(spec.enum).name} "
                              f"but {got} is provided")
            elements += check_tensor_proto(alias, proto, self.core.limits, elements)
            try:
                inputs[alias] = tf.make_ndarray(proto)
            except (TypeError, ValueError) as error:
                raise invalid(f"input {alias}: malformed TensorProto: {error}") from None
        if sent != wanted:
            extra = sorted(sent - wanted)
            for alias in extra:
                inputs[alias] = None
            signature.check_inputs(inputs)  # raises with the names sent and wanted
        return inputs

    def GetModelMetadata(self, request, context):
        version, label = _version_and_label(request.model_spec)
        return self.call(context, "GetModelMetadata", request.model_spec.name,
                         lambda: self.core.metadata_response(
                             request.model_spec.name, version, label,
                             tuple(request.metadata_field)))

    def _examples(self, request, context):
        from glomo_tf.serving import inference
        version, label = _version_and_label(request.model_spec)
        servable = self.core.manager.resolve(request.model_spec.name, version, label)
        signature = servable.signature(request.model_spec.signature_name)
        with self.admission.slot(context.time_remaining()):
            serialized = inference.serialized_examples_from_proto(
                request.input, self.core.limits.max_request_bytes)
        return servable, signature, serialized, context.time_remaining()

    @staticmethod
    def _fill_spec(response, servable, signature):
        response.model_spec.name = servable.model_name
        response.model_spec.version.value = servable.version
        response.model_spec.signature_name = signature.name

    def Classify(self, request, context):
        return self._examples_call("classify", request, context)

    def Regress(self, request, context):
        return self._examples_call("regress", request, context)

    def _examples_call(self, verb, request, context):
        """Classify or Regress: tf.Examples in, classes or values out."""
        from glomo_tf.serving import inference

        def run():
            servable, signature, serialized, timeout = self._examples(request, context)
            if verb == "classify":
                response = classification_pb2.ClassificationResponse()
                for classes in inference.classify(self.core, signature, serialized, timeout):
                    entry = response.result.classifications.add()
                    for label, score in classes:
                        entry.classes.add(label=label.decode("utf-8", "replace"), score=score)
            else:
                response = regression_pb2.RegressionResponse()
                for value in inference.regress(self.core, signature, serialized, timeout):
                    response.result.regressions.add(value=value)
            self._fill_spec(response, servable, signature)
            return response
        return self.call(context, verb, request.model_spec.name, run)

    def MultiInference(self, request, context):
        context.abort(grpc.StatusCode.UNIMPLEMENTED,
                      "glomo serve does not implement MultiInference; use Classify, Regress or "
                      "Predict")


class ModelServicer(model_service_pb2_grpc.ModelServiceServicer, _Front):

    def GetModelStatus(self, request, context):
        version, label = _version_and_label(request.model_spec)
        return self.call(context, "GetModelStatus", request.model_spec.name,
                         lambda: self.core.status_response(request.model_spec.name, version,
                                                           label))

    def HandleReloadConfigRequest(self, request, context):
        def reload():
            try:
                configs = model_configs_from_proto(request.config)
            except ValueError as error:
                raise invalid(str(error)) from None
            self.core.manager.set_configs(configs)
            self.core.manager.poll()
            response = model_management_pb2.ReloadConfigResponse()
            response.status.error_code = 0
            return response
        return self.call(context, "HandleReloadConfigRequest", "", reload)


class GrpcServer:
    """The gRPC front end on ``host:port`` (port 0: a free port, see :attr:`port`).

    ``max_workers`` calls convert their tensors at once and ``max_queued`` more wait for a turn
    (an :class:`~glomo_tf.serving.limits.Admission`); one more is refused with UNAVAILABLE.
    Beyond ``max_workers + max_queued + 8`` calls in flight, gRPC itself answers
    RESOURCE_EXHAUSTED.
    """

    def __init__(self, core, host="127.0.0.1", port=0, max_workers=16, max_queued=16,
                 access_log=False):
        admission = Admission(max_workers, max_queued, "gRPC", "--grpc_max_threads")
        # Threads for the calls that run, wait or are refused; calls beyond them get
        # RESOURCE_EXHAUSTED from gRPC before any Python code runs.
        threads = max_workers + max_queued + 8
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=threads,
                                       thread_name_prefix="glomo-serve-grpc"),
            maximum_concurrent_rpcs=threads,
            options=[("grpc.max_receive_message_length", core.limits.max_request_bytes),
                     ("grpc.max_send_message_length", -1),
                     ("grpc.so_reuseport", 0)])
        prediction = PredictionServicer(core, admission, access_log)
        prediction.metrics.gauge(":glomo:serving:queue_depth", "queue", "GRPC",
                                 lambda: admission.waiting)
        prediction.metrics.gauge(":glomo:serving:running_requests", "entrypoint", "GRPC",
                                 lambda: admission.running)
        self.admission = admission
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(prediction,
                                                                            self.server)
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(
            ModelServicer(core, None, access_log), self.server)
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            self.port = self.server.add_insecure_port(address)
        except RuntimeError as error:
            raise OSError(f"cannot bind gRPC to {address}: {error}") from None
        if not self.port:
            raise OSError(f"cannot bind gRPC to {address}")

    def start(self):
        self.server.start()

    def stop(self, grace=1.0):
        self.server.stop(grace).wait(timeout=30)


def check_tensor_proto(alias, proto, limits, elements_before=0):
    """Refuses a request ``TensorProto`` whose shape is negative or too deep, which holds (with
    ``elements_before`` of the request's other inputs) more elements than ``limits`` allow, or
    a string longer than they allow, before ``make_ndarray`` would allocate anything. Returns
    its number of elements."""
    dims = [int(d.size) for d in proto.tensor_shape.dim]
    if proto.tensor_shape.unknown_rank:
        raise invalid(f"input {alias}: a request tensor needs a known shape")
    negative = [d for d in dims if d < 0]
    if negative:
        raise invalid(f"input {alias}: dimension {negative[0]} in shape {dims} is negative")
    limits.check_rank(len(dims), f"input {alias}")
    elements = 1
    for d in dims:
        elements *= d
    limits.check_elements(elements_before + elements,
                          f"the request (input {alias}: shape {dims}, {elements} elements)")
    for value in proto.string_val:
        limits.check_text(len(value), f"input {alias}: a string")
    return elements
