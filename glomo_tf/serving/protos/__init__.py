"""TF Serving's configuration messages that ``tensorflow-serving-api`` does not ship:
``MonitoringConfig`` (``--monitoring_config_file``) and ``BatchingParameters``
(``--batching_parameters_file``), parsed with protobuf's ``text_format`` so that every field and
error is TF Serving's own.

The ``.proto`` files are TF Serving's (Apache 2.0), unchanged below their licence header, in the
repository's ``third_party/tensorflow_serving/``; the ``_pb2`` modules are generated from them
(protoc 31.1, the ``grpcio-tools==1.74.0`` wheel, run in ``third_party/``), TensorFlow's own
descriptors standing in for the imports::

    cd third_party && python -m grpc_tools.protoc --descriptor_set_in=deps.pb -I. --python_out=. \\
        tensorflow_serving/config/monitoring_config.proto \\
        tensorflow_serving/servables/tensorflow/session_bundle_config.proto

where ``deps.pb`` is the ``FileDescriptorSet`` of ``tensorflow.core.protobuf.config_pb2``,
``named_tensor_pb2`` and ``google.protobuf.wrappers_pb2`` and their imports.
"""
