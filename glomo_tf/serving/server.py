"""A development model server that speaks TF Serving's REST and gRPC APIs (``glomo serve``).

It takes ``tensorflow_model_server``'s flags, so either can be started the same way::

    glomo serve --port=8500 --rest_api_port=8501 --model_name=glomo --model_base_path=/models/glomo
    glomo serve --model_config_file=models.config --model_config_file_poll_wait_seconds=60

and serves any SavedModel's signatures: the latest version directory under each base path (or the
versions the config's ``model_version_policy`` names), picking up new versions without a restart.
Differences from TF Serving: it binds 127.0.0.1 unless ``--host`` says otherwise; REST is on 8501
by default (TF Serving's binary leaves REST off unless ``--rest_api_port`` is given); batching is on
by default (``--enable_batching=false`` turns it off) and merges requests whose outputs cannot
change shape with the batch, and GLoMo text requests (cut back to their own length); gRPC
``MultiInference`` is not implemented. Python use::

    from glomo_tf.serving.server import ModelServer, ServerOptions
    options = ServerOptions(model_name="glomo", model_base_path="/models/glomo")
    with ModelServer(options) as server:
        print(server.rest_url, server.grpc_target)
"""

import dataclasses
import logging
import os
import threading

from glomo_tf.serving.limits import RequestLimits

log = logging.getLogger("glomo_tf.serving")

# BatchingParameters fields (session_bundle_config.proto) this server uses; the others are
# accepted (a TF Serving batching file works unchanged) and reported as ignored.
BATCHING_FIELDS = ("max_batch_size", "batch_timeout_micros", "num_batch_threads",
                   "max_enqueued_batches")
# tensorflow_model_server flags that are accepted (so a command line carries over unchanged) but
# have nothing to tune here; each one given is reported as ignored.
IGNORED_FLAGS = ("enable_model_warmup", "num_load_threads", "num_unload_threads",
                 "per_process_gpu_memory_fraction", "grpc_channel_arguments",
                 "allow_version_labels_for_unavailable_models",
                 "xla_cpu_compilation_enabled", "enable_signature_method_name_check")
DEFAULT_BATCHING = {"max_batch_size": 32, "batch_timeout_micros": 0, "num_batch_threads": 2,
                    "max_enqueued_batches": 100}


def parse_batching_parameters(text):
    """A ``--batching_parameters_file`` (``BatchingParameters`` text proto) -> ``{field: int}``.

    Raises:
        ValueError: text that is not a BatchingParameters message (protobuf's text-format
            error, naming the line and column).
    """
    from google.protobuf import text_format

    from glomo_tf.serving.protos import session_bundle_config_pb2
    try:
        parameters = text_format.Parse(text, session_bundle_config_pb2.BatchingParameters())
    except text_format.ParseError as error:
        raise ValueError(f"not a BatchingParameters text proto: {error}") from None
    for field, _ in parameters.ListFields():
        if field.name not in BATCHING_FIELDS:
            log.warning("batching parameter %s is not used by glomo serve; ignored", field.name)
    return {field: getattr(parameters, field).value for field in BATCHING_FIELDS
            if parameters.HasField(field)}


@dataclasses.dataclass(frozen=True)
class ServerOptions:
    """What a :class:`ModelServer` serves and how, as TF Serving's ``Server::Options`` holds its
    flags; ``glomo serve`` builds one from ``tensorflow_model_server``'s flags.

    Give exactly one of ``models`` (:class:`~glomo_tf.serving.models.ModelConfig` s),
    ``model_base_path`` (with ``model_name``) or ``model_config_file``.

    Args:
        host: address to bind (default loopback only).
        grpc_port / rest_port: ports; 0 picks a free one (see :attr:`ModelServer.grpc_port`,
            :attr:`ModelServer.rest_port`), None disables that API.
        enable_batching: merge concurrent requests (see :mod:`glomo_tf.serving.batching`).
        max_batch_size, batch_timeout_micros, num_batch_threads, max_enqueued_batches: batching.
        file_system_poll_wait_seconds: seconds between scans for new versions (<= 0: never).
        model_config_file_poll_wait_seconds: seconds between re-reads of the config file (<= 0:
            read once).
        rest_api_timeout_in_ms: how long a REST request may wait for a worker, then its batch.
        saved_model_tags: MetaGraph tags to load.
        cors: answer REST requests with CORS headers.
        grpc_max_threads: gRPC calls converting their tensors at once.
        max_num_load_retries: retries for a version that fails to load.
        max_request_bytes, max_request_elements, max_request_rank, max_text_bytes: the
            :class:`~glomo_tf.serving.limits.RequestLimits` (:attr:`limits`).
        rest_api_num_threads: REST requests read and decoded at once.
        max_queued_requests: requests that may wait for a turn, per API; one more is refused
            with UNAVAILABLE (HTTP 503).
        rest_api_max_connections: open REST connections; one more is answered 503.
        metrics_path: serve Prometheus metrics on the REST port at this path (None: off; see
            :func:`glomo_tf.serving.monitoring.parse_monitoring_config`).
        access_log: one line per request on the ``glomo_tf.serving.access`` logger.
    """

    models: tuple = None
    model_name: str = "default"
    model_base_path: str = None
    model_config_file: str = None
    host: str = "127.0.0.1"
    grpc_port: int = 0
    rest_port: int = 0
    enable_batching: bool = True
    max_batch_size: int = DEFAULT_BATCHING["max_batch_size"]
    batch_timeout_micros: int = DEFAULT_BATCHING["batch_timeout_micros"]
    num_batch_threads: int = DEFAULT_BATCHING["num_batch_threads"]
    max_enqueued_batches: int = DEFAULT_BATCHING["max_enqueued_batches"]
    file_system_poll_wait_seconds: float = 1.0
    model_config_file_poll_wait_seconds: float = 0
    rest_api_timeout_in_ms: int = 30000
    saved_model_tags: tuple = ("serve",)
    cors: bool = False
    grpc_max_threads: int = dataclasses.field(default=16, metadata={"least": 1})
    max_num_load_retries: int = 5
    rest_api_num_threads: int = dataclasses.field(default=4, metadata={"least": 1})
    max_queued_requests: int = dataclasses.field(default=16, metadata={"least": 0})
    rest_api_max_connections: int = dataclasses.field(default=64, metadata={"least": 1})
    max_request_bytes: int = RequestLimits.max_request_bytes
    max_request_elements: int = RequestLimits.max_request_elements
    max_request_rank: int = RequestLimits.max_request_rank
    max_text_bytes: int = RequestLimits.max_text_bytes
    metrics_path: str = None
    access_log: bool = False

    def __post_init__(self):
        given = sum(x is not None for x in (self.models, self.model_base_path,
                                            self.model_config_file))
        if given != 1:
            raise ValueError("give exactly one of models, model_base_path or model_config_file")
        if self.grpc_port is None and self.rest_port is None:
            raise ValueError("enable at least one of the gRPC and REST APIs")
        for field in dataclasses.fields(self):
            least, value = field.metadata.get("least"), getattr(self, field.name)
            if least is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < least):
                raise ValueError(f"--{field.name} must be an integer of at least {least}, got "
                                 f"{value!r}")
        self.limits  # checks the limits
        if self.models is not None:
            object.__setattr__(self, "models", tuple(self.models))
        object.__setattr__(self, "saved_model_tags", tuple(self.saved_model_tags))

    @property
    def limits(self):
        return RequestLimits(self.max_request_bytes, self.max_request_elements,
                             self.max_request_rank, self.max_text_bytes)

    @classmethod
    def of(cls, options=None, **fields):
        """``options`` (a :class:`ServerOptions`, or the ``models`` list) with ``fields``
        replaced; an unknown field is a TypeError that lists the known ones."""
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise TypeError(f"unknown server option{'s' * (len(unknown) > 1)} "
                            f"{', '.join(unknown)}; ServerOptions has: {', '.join(sorted(known))}")
        if isinstance(options, cls):
            return dataclasses.replace(options, **fields) if fields else options
        return cls(models=options, **fields) if options is not None else cls(**fields)


class ModelServer:
    """A TF-Serving-compatible REST + gRPC server for SavedModels, in this process.

    Args:
        options: a :class:`ServerOptions`, or the ``models`` to serve (a list of
            :class:`~glomo_tf.serving.models.ModelConfig`).
        **fields: :class:`ServerOptions` fields, replacing those of ``options``
            (``ModelServer(model_name="glomo", model_base_path=path)``).
    """

    def __init__(self, options=None, **fields):
        from glomo_tf.serving.models import ModelConfig
        self.options = options = ServerOptions.of(options, **fields)
        self.limits = options.limits
        self.model_config_file = options.model_config_file
        if options.model_config_file is not None:
            models = self._read_config_file()
        elif options.model_base_path is not None:
            models = [ModelConfig(options.model_name, os.path.abspath(options.model_base_path))]
        else:
            models = options.models
        self.models = list(models)
        self.host = options.host
        self._ports = {"grpc": options.grpc_port, "rest": options.rest_port}
        self.manager = self.batcher = self.core = self.metrics = None
        self._grpc = self._rest = None
        self._stop = threading.Event()
        self._config_thread = None

    def _read_config_file(self):
        from glomo_tf.serving.models import parse_model_config_text
        with open(self.model_config_file, encoding="utf-8") as f:
            return parse_model_config_text(f.read())

    # -- lifecycle
    def start(self):
        """Load the models (waiting for the first versions), then open the ports."""
        from glomo_tf.serving.batching import Batcher
        from glomo_tf.serving.core import ServingCore
        from glomo_tf.serving.grpc_service import GrpcServer
        from glomo_tf.serving.models import ModelManager
        from glomo_tf.serving.monitoring import Metrics
        from glomo_tf.serving.rest import RestServer
        from glomo_tf.serving.rest_api import RestApi
        o = self.options
        self.metrics = Metrics()
        self.manager = ModelManager(self.models, tags=o.saved_model_tags,
                                    poll_seconds=o.file_system_poll_wait_seconds,
                                    max_load_retries=o.max_num_load_retries)
        self.manager.poll()
        if o.enable_batching:
            self.batcher = Batcher(o.max_batch_size, o.batch_timeout_micros,
                                   o.num_batch_threads, o.max_enqueued_batches,
                                   metrics=self.metrics)
            self.metrics.gauge(":glomo:serving:queue_depth", "queue", "batching",
                               self.batcher.queued_requests)
        self.core = ServingCore(self.manager, self.batcher, self.limits, self.metrics)
        try:
            if self._ports["grpc"] is not None:
                self._grpc = GrpcServer(self.core, self.host, self._ports["grpc"],
                                        o.grpc_max_threads, o.max_queued_requests, o.access_log)
                self._grpc.start()
            if self._ports["rest"] is not None:
                self._rest = RestServer(
                    RestApi(self.core, o.rest_api_timeout_in_ms), self.host, self._ports["rest"],
                    o.cors, workers=o.rest_api_num_threads, max_queued=o.max_queued_requests,
                    max_connections=o.rest_api_max_connections, metrics_path=o.metrics_path,
                    access_log=o.access_log)
                self._rest.start()
        except BaseException:
            self.stop()
            raise
        self.manager.start()
        if self.model_config_file and o.model_config_file_poll_wait_seconds > 0:
            self._config_thread = threading.Thread(target=self._watch_config, daemon=True,
                                                   name="glomo-serve-config")
            self._config_thread.start()
        return self

    def _watch_config(self):
        wait = self.options.model_config_file_poll_wait_seconds
        while not self._stop.wait(wait):
            try:
                models = self._read_config_file()
            except (OSError, ValueError) as error:
                log.error("keeping the current models: cannot read %s: %s",
                          self.model_config_file, error)
                continue
            if models != self.models:
                log.info("model config changed: now serving %s",
                         ", ".join(m.name for m in models))
                self.models = models
                self.manager.set_configs(models)
                self.manager.poll()

    def stop(self):
        """Close the ports and stop the threads (idempotent)."""
        self._stop.set()
        if self._rest is not None:
            self._rest.stop()
            self._rest = None
        if self._grpc is not None:
            self._grpc.stop()
            self._grpc = None
        if self.batcher is not None:
            self.batcher.stop()
        if self.manager is not None:
            self.manager.stop()
        if self._config_thread is not None:
            self._config_thread.join(timeout=30)
            self._config_thread = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def wait(self, timeout=None):
        """Block until :meth:`stop` (or ``timeout`` seconds)."""
        return self._stop.wait(timeout)

    # -- addresses
    @property
    def grpc_port(self):
        return self._grpc.port if self._grpc else None

    @property
    def rest_port(self):
        return self._rest.port if self._rest else None

    def _host_for_clients(self):
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.host, self.host)
        return f"[{host}]" if ":" in host else host

    @property
    def grpc_target(self):
        return f"{self._host_for_clients()}:{self.grpc_port}" if self._grpc else None

    @property
    def rest_url(self):
        return f"http://{self._host_for_clients()}:{self.rest_port}" if self._rest else None
