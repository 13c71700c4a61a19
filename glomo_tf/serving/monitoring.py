"""Prometheus metrics, turned on as TF Serving turns them on: ``--monitoring_config_file``.

The file is a ``MonitoringConfig`` text proto (``serving/monitoring.config``)::

    prometheus_config {
      enable: true
      path: "/monitoring/prometheus/metrics"
    }

and the metrics are then served on the REST port at ``path`` in Prometheus' text format (0.0.4),
written by ``prometheus_client``.
The request metrics carry TF Serving's names and labels, so dashboards written for it work:

* ``:tensorflow:serving:request_count{model_name, status}``: requests answered, by canonical
  status (``OK``, ``INVALID_ARGUMENT``, ``UNAVAILABLE``...);
* ``:tensorflow:serving:request_latency{model_name, API, entrypoint}``: a histogram of request
  latency in microseconds (``API``: ``predict``, ``classify``, ``regress``, ``GetModelStatus``...;
  ``entrypoint``: ``REST`` or ``GRPC``).

and this server's own:

* ``:glomo:serving:batch_size``: a histogram of the rows of each batch the batcher ran;
* ``:glomo:serving:queue_depth{queue}``: requests waiting for a worker (``REST``, ``GRPC``) and
  requests waiting in the batcher (``batching``), at the time of the scrape;
* ``:glomo:serving:running_requests{entrypoint}``: requests being served at that time.
"""

from prometheus_client import Counter, Gauge, Histogram, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

DEFAULT_PATH = "/monitoring/prometheus/metrics"
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
# Microseconds: 10 us .. about 30 s, in steps of 1.8x (TF Serving's request_latency buckets).
LATENCY_BUCKETS = tuple(10 * 1.8 ** i for i in range(26))
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
REQUEST_COUNT = ":tensorflow:serving:request_count"


def parse_monitoring_config(text):
    """A ``MonitoringConfig`` text proto -> the metrics path, or None when Prometheus is off.

    Raises:
        ValueError: text that is not a MonitoringConfig (protobuf's text-format error), or a
            path that is not absolute or lies under ``/v1/``.
    """
    from google.protobuf import text_format

    from glomo_tf.serving.protos import monitoring_config_pb2
    try:
        config = text_format.Parse(text, monitoring_config_pb2.MonitoringConfig())
    except text_format.ParseError as error:
        raise ValueError(f"not a MonitoringConfig text proto: {error}") from None
    if not config.prometheus_config.enable:
        return None
    path = config.prometheus_config.path or DEFAULT_PATH
    if not path.startswith("/") or path.lower().startswith("/v1/"):
        raise ValueError(f"prometheus_config.path must start with '/' and not with /v1/, got "
                         f"{path!r}")
    return path


class Metrics(Collector):
    """The server's metrics on ``prometheus_client``'s counters, histograms and gauges, in a
    registry of their own; every method is thread-safe.

    The text is TF Serving's (``tensorflow_serving/util/prometheus_exporter.cc``): TYPE lines
    without HELP lines, a counter's samples under the counter's own name (no ``_total``), no
    ``_created`` series.
    """

    def __init__(self):
        self._requests = Counter(REQUEST_COUNT, "Requests answered, by "
                                 "canonical status", ("model_name", "status"), registry=None)
        self._latency = Histogram(":tensorflow:serving:request_latency", "Request latency in "
                                  "microseconds", ("model_name", "API", "entrypoint"),
                                  buckets=LATENCY_BUCKETS, registry=None)
        self._batches = Histogram(":glomo:serving:batch_size", "Rows of each batch run",
                                  buckets=BATCH_BUCKETS, registry=None)
        self._gauges = {}  # metric name -> Gauge
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def record_request(self, model_name, api, entrypoint, status, seconds):
        """One answered request: its canonical status and its latency in seconds."""
        self._requests.labels(model_name or "", status).inc()
        self._latency.labels(model_name or "", api, entrypoint).observe(seconds * 1e6)

    def record_batch(self, rows):
        self._batches.observe(rows)

    def gauge(self, metric, label, value, read):
        """Report ``read()`` as ``metric{label="value"}`` at every scrape."""
        if metric not in self._gauges:
            self._gauges[metric] = Gauge(metric, metric.rsplit(":", 1)[-1].replace("_", " "),
                                         (label,), registry=None)
        self._gauges[metric].labels(value).set_function(read)

    def collect(self):
        families = [self._requests, self._latency, self._batches] + [
            self._gauges[name] for name in sorted(self._gauges)]
        for family in (f for metric in families for f in metric.collect()):
            written = Metric(family.name, family.documentation, family.type)
            for sample in family.samples:
                if not sample.name.endswith("_created"):
                    name = family.name if family.type == "counter" else sample.name
                    written.add_sample(name, sample.labels, sample.value)
            yield written

    def exposition(self):
        """The metrics in Prometheus' text format (0.0.4) as TF Serving's exporter writes it: a
        TYPE line for each family and no HELP line; the counter's own name on its TYPE line
        (prometheus_client adds "_total" there)."""
        lines = generate_latest(self.registry).decode("utf-8").splitlines(keepends=True)
        return "".join(line.replace(f" {REQUEST_COUNT}_total ", f" {REQUEST_COUNT} ")
                       for line in lines if not line.startswith("# HELP "))
