"""Prometheus metrics, turned on as TF Serving turns them on: ``--monitoring_config_file``.

The file is a ``MonitoringConfig`` text proto (``serving/monitoring.config``)::

    prometheus_config {
      enable: true
      path: "/monitoring/prometheus/metrics"
    }

and the metrics are then served on the REST port at ``path`` in Prometheus' text format (0.0.4).
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

import bisect
import threading

DEFAULT_PATH = "/monitoring/prometheus/metrics"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Microseconds: 10 us .. about 30 s, in steps of 1.8x (TF Serving's request_latency buckets).
LATENCY_BUCKETS = tuple(10 * 1.8 ** i for i in range(26))
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


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


def _escape(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names, values, extra=()):
    pairs = [f'{n}="{_escape(v)}"' for n, v in zip(names, values)] + list(extra)
    return "{" + ",".join(pairs) + "}" if pairs else ""


def _number(value):
    if value == float("inf"):
        return "+Inf"
    return repr(float(value)) if isinstance(value, float) else str(value)


class _Histogram:
    def __init__(self, buckets):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0

    def observe(self, value):
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value


class Metrics:
    """The server's metrics; every method is thread-safe and cheap (a lock and a dict)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._requests = {}   # (model_name, status) -> count
        self._latency = {}    # (model_name, API, entrypoint) -> _Histogram
        self._batches = _Histogram(BATCH_BUCKETS)
        self._gauges = {}     # (metric, label name, label value) -> callable returning a number

    def record_request(self, model_name, api, entrypoint, status, seconds):
        """One answered request: its canonical status and its latency in seconds."""
        with self._lock:
            key = (model_name or "", status)
            self._requests[key] = self._requests.get(key, 0) + 1
            key = (model_name or "", api, entrypoint)
            if key not in self._latency:
                self._latency[key] = _Histogram(LATENCY_BUCKETS)
            self._latency[key].observe(seconds * 1e6)

    def record_batch(self, rows):
        with self._lock:
            self._batches.observe(rows)

    def gauge(self, metric, label, value, read):
        """Report ``read()`` as ``metric{label="value"}`` at every scrape."""
        with self._lock:
            self._gauges[(metric, label, value)] = read

    def exposition(self):
        """The metrics in Prometheus' text format."""
        with self._lock:
            lines = ["# TYPE :tensorflow:serving:request_count counter"]
            for (model, status), count in sorted(self._requests.items()):
                lines.append(":tensorflow:serving:request_count"
                             f"{_labels(('model_name', 'status'), (model, status))} {count}")
            lines.append("# TYPE :tensorflow:serving:request_latency histogram")
            for key, histogram in sorted(self._latency.items()):
                lines += _histogram_lines(":tensorflow:serving:request_latency",
                                          ("model_name", "API", "entrypoint"), key, histogram)
            lines.append("# TYPE :glomo:serving:batch_size histogram")
            lines += _histogram_lines(":glomo:serving:batch_size", (), (), self._batches)
            gauges = sorted(self._gauges.items())
        seen = set()
        for (metric, label, value), read in gauges:
            if metric not in seen:
                lines.append(f"# TYPE {metric} gauge")
                seen.add(metric)
            lines.append(f"{metric}{_labels((label,), (value,))} {_number(read())}")
        return "\n".join(lines) + "\n"


def _histogram_lines(metric, names, values, histogram):
    lines, cumulative = [], 0
    for bound, count in zip(list(histogram.buckets) + [float("inf")], histogram.counts):
        cumulative += count
        le = 'le="+Inf"' if bound == float("inf") else f'le="{_number(float(bound))}"'
        lines.append(f"{metric}_bucket{_labels(names, values, (le,))} {cumulative}")
    lines.append(f"{metric}_sum{_labels(names, values)} {_number(float(histogram.sum))}")
    lines.append(f"{metric}_count{_labels(names, values)} {cumulative}")
    return lines
