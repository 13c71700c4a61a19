"""``glomo serve``: ``tensorflow_model_server``'s flags, then a
:class:`glomo_tf.serving.server.ModelServer` until SIGTERM or Ctrl-C."""

import argparse
import dataclasses
import logging
import os
import signal
import sys
import threading

from glomo_tf.cli.common import HelpFormatter, UsageError
from glomo_tf.serving.limits import RequestLimits
from glomo_tf.serving.server import (DEFAULT_BATCHING, IGNORED_FLAGS, ModelServer,
                                     ServerOptions, parse_batching_parameters)

log = logging.getLogger("glomo_tf.serving")
DESCRIPTION = ("``glomo serve``: a development model server that speaks TF Serving's REST and "
               "gRPC APIs.")


def _bool(text):
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


# tensorflow_model_server's flags, listed as its main.cc lists them: (flag, type, default, help).
_MODEL_FLAGS = (
    ("port", int, 8500, "gRPC port"),
    ("rest_api_port", int, 8501, "REST port (0 turns the REST API off)"),
    ("host", str, "127.0.0.1", "address to bind (0.0.0.0 for every interface)"),
    ("model_name", str, "default", "name of the model in requests"),
    ("model_base_path", str, None, "directory holding the numeric version directories"),
    ("model_config_file", str, None,
     "ModelServerConfig text proto (model_config_list) for several models"),
    ("model_config_file_poll_wait_seconds", float, 0,
     "re-read --model_config_file this often (0: never)"),
    ("file_system_poll_wait_seconds", float, 1,
     "seconds between scans for new model versions (0: never)"),
    ("saved_model_tags", str, "serve", "comma-separated MetaGraph tags to load"),
    ("max_num_load_retries", int, 5, "retries for a version that fails to load"),
    ("enable_batching", _bool, True,
     "merge concurrent requests into batches (where outputs allow it)"),
    ("batching_parameters_file", str, None,
     "BatchingParameters text proto (max_batch_size, batch_timeout_micros, num_batch_threads, "
     "max_enqueued_batches)"),
)
_REQUEST_FLAGS = (
    ("rest_api_timeout_in_ms", int, 30000, "how long a REST request may wait for its batch"),
    ("rest_api_enable_cors_support", _bool, False, "send CORS headers"),
    ("grpc_max_threads", int, 16, "gRPC calls converting their tensors at once"),
    ("rest_api_num_threads", int, 4, "REST requests read and decoded at once (TF Serving's flag)"),
    ("max_queued_requests", int, 16,
     "requests that may wait for a turn, per API; one more is refused with 503 / UNAVAILABLE"),
    ("rest_api_max_connections", int, 64,
     "open REST connections; one more is answered 503 and closed"),
)


def _add_flags(parser, flags):
    for name, kind, default, help in flags:
        switch = {"nargs": "?", "const": True} if kind is _bool else {}
        parser.add_argument(f"--{name}", type=kind, default=default, help=help, **switch)


def register(subparsers):
    p = subparsers.add_parser(
        "serve", help="serve SavedModels over TF Serving's REST and gRPC APIs",
        description=DESCRIPTION + " Flags follow tensorflow_model_server's; "
        "both --flag=value and --flag value work.",
        formatter_class=HelpFormatter)
    _add_flags(p, _MODEL_FLAGS)
    for field, default in DEFAULT_BATCHING.items():
        p.add_argument(f"--{field}", type=int, default=None,
                       help=f"batching {field.replace('_', ' ')} (overrides the batching "
                            f"parameters file; default {default})")
    _add_flags(p, _REQUEST_FLAGS)
    limits = p.add_argument_group(
        "request limits (checked before any array is built; over a limit: 413 / "
        "RESOURCE_EXHAUSTED, 400 / INVALID_ARGUMENT for --max_request_rank)")
    for field in dataclasses.fields(RequestLimits):
        limits.add_argument(f"--{field.name}", type=int, default=field.default,
                            help=field.metadata["help"])
    p.add_argument("--monitoring_config_file",
                   help="MonitoringConfig text proto; prometheus_config { enable: true } serves "
                        "Prometheus metrics on the REST port (serving/monitoring.config)")
    threads = p.add_argument_group("TensorFlow's threads (as tensorflow_model_server's flags; "
                                   "0: TensorFlow's choice)")
    threads.add_argument("--tensorflow_session_parallelism", type=int, default=0, metavar="N",
                         help="threads for running the models: both pools below, unless set")
    threads.add_argument("--tensorflow_intra_op_parallelism", type=int, default=0, metavar="N",
                         help="threads within one op (small models on few cores: 1 leaves the "
                              "cores to the requests' handling)")
    threads.add_argument("--tensorflow_inter_op_parallelism", type=int, default=0, metavar="N",
                         help="ops run side by side")
    p.add_argument("--access_log", metavar="FILE",
                   help="write one line per request to FILE ('-': standard error)")
    ignored = p.add_argument_group("accepted for tensorflow_model_server compatibility, ignored")
    for flag in IGNORED_FLAGS:
        ignored.add_argument(f"--{flag}", dest=f"ignored_{flag}", metavar="VALUE", nargs="?",
                             const="true", default=None,
                             help="tensorflow_model_server's flag: accepted, has no effect here")
    p.set_defaults(func=run)


def server_from_args(args):
    """Check the flags and build (not start) the :class:`ModelServer` they describe."""
    import importlib.util
    for module in ("tensorflow_serving", "aiohttp"):
        if importlib.util.find_spec(module) is None:
            raise UsageError(f"glomo serve needs {module}, which this installation lacks: "
                             "pip install 'glomo_tf[serve]'")
    if bool(args.model_base_path) == bool(args.model_config_file):
        raise UsageError("give either --model_base_path (with --model_name) or "
                         "--model_config_file")
    if not 0 < args.port < 65536:
        raise UsageError(f"--port must be a port number, got {args.port}")
    if not 0 <= args.rest_api_port < 65536:
        raise UsageError(f"--rest_api_port must be a port number or 0, got {args.rest_api_port}")
    batching = dict(DEFAULT_BATCHING)
    if args.batching_parameters_file:
        try:
            with open(args.batching_parameters_file, encoding="utf-8") as f:
                batching.update(parse_batching_parameters(f.read()))
        except (OSError, ValueError) as error:
            raise UsageError(f"--batching_parameters_file: {error}") from None
    for field in DEFAULT_BATCHING:
        if getattr(args, field) is not None:
            batching[field] = getattr(args, field)
    for field in ("max_batch_size", "num_batch_threads", "max_enqueued_batches"):
        if batching[field] < 1:
            raise UsageError(f"{field} must be at least 1, got {batching[field]}")
    if batching["batch_timeout_micros"] < 0:
        raise UsageError("batch_timeout_micros must be at least 0")
    if args.model_base_path and not os.path.isdir(args.model_base_path):
        raise UsageError(f"--model_base_path {args.model_base_path} is not a directory")
    for flag in IGNORED_FLAGS:
        if getattr(args, f"ignored_{flag}", None) is not None:
            log.warning("--%s has no effect in glomo serve; ignored", flag)
    tensorflow_threads(args)  # checks the values; applied by run() before anything loads
    metrics_path = None
    if args.monitoring_config_file:
        from glomo_tf.serving.monitoring import parse_monitoring_config
        try:
            with open(args.monitoring_config_file, encoding="utf-8") as f:
                metrics_path = parse_monitoring_config(f.read())
        except (OSError, ValueError) as error:
            raise UsageError(f"--monitoring_config_file: {error}") from None
        if metrics_path and not args.rest_api_port:
            raise UsageError("--monitoring_config_file serves metrics on the REST port; give "
                             "a --rest_api_port")
    tags = tuple(t.strip() for t in args.saved_model_tags.split(",") if t.strip())
    limits = {field.name: getattr(args, field.name) for field in dataclasses.fields(RequestLimits)}
    try:
        options = ServerOptions(
            model_name=args.model_name, model_base_path=args.model_base_path or None,
            model_config_file=args.model_config_file or None, host=args.host, grpc_port=args.port,
            rest_port=args.rest_api_port or None, enable_batching=args.enable_batching,
            file_system_poll_wait_seconds=args.file_system_poll_wait_seconds,
            model_config_file_poll_wait_seconds=args.model_config_file_poll_wait_seconds,
            rest_api_timeout_in_ms=args.rest_api_timeout_in_ms, saved_model_tags=tags,
            cors=args.rest_api_enable_cors_support, grpc_max_threads=args.grpc_max_threads,
            max_num_load_retries=args.max_num_load_retries,
            rest_api_num_threads=args.rest_api_num_threads,
            max_queued_requests=args.max_queued_requests,
            rest_api_max_connections=args.rest_api_max_connections, metrics_path=metrics_path,
            access_log=bool(args.access_log), **batching, **limits)
        server = ModelServer(options)
    except (OSError, ValueError) as error:
        raise UsageError(str(error)) from None
    if args.model_config_file:
        for model in server.models:
            if not os.path.isdir(model.base_path):
                raise UsageError(f"model {model.name}: base_path {model.base_path} is not a "
                                 "directory")
    return server


def tensorflow_threads(args):
    """``(intra-op, inter-op)`` threads the flags ask for (0: TensorFlow's choice): the specific
    flags win over --tensorflow_session_parallelism, as in tensorflow_model_server."""
    for flag in ("tensorflow_session_parallelism", "tensorflow_intra_op_parallelism",
                 "tensorflow_inter_op_parallelism"):
        if getattr(args, flag) < 0:
            raise UsageError(f"--{flag} must be 0 (TensorFlow's choice) or a number of threads, "
                             f"got {getattr(args, flag)}")
    session = args.tensorflow_session_parallelism
    return (args.tensorflow_intra_op_parallelism or session,
            args.tensorflow_inter_op_parallelism or session)


def apply_tensorflow_threads(intra_op, inter_op):
    """Set TensorFlow's thread pools; must run before TensorFlow runs its first op."""
    import tensorflow as tf

    if intra_op:
        tf.config.threading.set_intra_op_parallelism_threads(intra_op)
    if inter_op:
        tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    return (tf.config.threading.get_intra_op_parallelism_threads(),
            tf.config.threading.get_inter_op_parallelism_threads())


def open_access_log(target):
    """Send the ``glomo_tf.serving.access`` lines to ``target`` (a file, or '-': stderr)."""
    access = logging.getLogger("glomo_tf.serving.access")
    try:
        handler = (logging.StreamHandler(sys.stderr) if target == "-"
                   else logging.FileHandler(target, encoding="utf-8"))
    except OSError as error:
        raise UsageError(f"--access_log {target}: {error.strerror or error}") from None
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    access.propagate = False


def check_ports_free(host, ports):
    """Raises :class:`UsageError` naming the first ``(flag, port)`` that cannot be bound on
    ``host`` (checked before any model loads; 0 and None are skipped)."""
    import socket

    for flag, port in ports:
        if not port:
            continue
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as error:
                raise UsageError(f"{flag} {port} on {host}: {error.strerror or error}; stop what "
                                 f"holds it or pass another {flag}.") from None


def run(args):
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
    server = server_from_args(args)  # checks the flags; loads nothing yet
    intra_op, inter_op = apply_tensorflow_threads(*tensorflow_threads(args))
    log.info("TensorFlow threads: intra-op %s, inter-op %s (0: TensorFlow's choice)",
             intra_op, inter_op)
    if "MALLOC_ARENA_MAX" not in os.environ:
        # Large requests are decoded in several threads; with glibc's default of 8 arenas per
        # core, their pages stay spread over many arenas (see serving/memory.py).
        from glomo_tf.serving.memory import limit_arenas
        limit_arenas(2)
    if args.access_log:
        open_access_log(args.access_log)
    check_ports_free(args.host, [("--port", args.port), ("--rest_api_port", args.rest_api_port)])
    try:
        server.start()
    except OSError as error:
        raise UsageError(f"cannot start: {error}") from None
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        if server.grpc_target:
            log.info("Running gRPC ModelServer at %s:%d ...", server.host, server.grpc_port)
        if server.rest_url:
            log.info("Exporting HTTP/REST API at:%s:%d ...", server.host, server.rest_port)
        log.info("serving %s", ", ".join(f"{m.name} ({m.base_path})" for m in server.models))
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        log.info("shutting down")
        server.stop()
    return 0
