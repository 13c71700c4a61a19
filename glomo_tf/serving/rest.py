"""TF Serving's REST API on aiohttp: :class:`RestServer` holds a
:class:`~glomo_tf.serving.rest_api.RestApi` and serves it on one event loop.

As in TF Serving, whose dispatcher holds its ``HttpRestApiHandler`` and leaves HTTP to libevent,
the HTTP/1.1 mechanics (request and header parsing, chunked bodies, keep-alive, lingering close)
are a maintained library's: aiohttp and its C parser (llhttp), with the refusals of
:mod:`glomo_tf.serving.connection`. Every error is answered as ``{"error": "<message>"}`` with
TF Serving's HTTP status for its canonical code. A request never takes the server down.
"""

import asyncio
import concurrent.futures
import logging
import socket
import threading
import time

from aiohttp import web

from glomo_tf.serving import connection
from glomo_tf.serving.errors import ServingError, from_http_status, invalid
from glomo_tf.serving.limits import Admission, LoopTurns, too_large
from glomo_tf.serving.monitoring import CONTENT_TYPE, Metrics
from glomo_tf.serving.rest_api import Prediction, not_found_message, route_of

log = logging.getLogger("glomo_tf.serving")
access_log = logging.getLogger("glomo_tf.serving.access")

METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS")
HAS_BODY = ("POST", "PUT", "PATCH")  # requests that hold a worker turn while their body is read
JSON_HEADERS = {"Content-Type": "application/json"}
CORS_HEADERS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Methods": "POST, GET",
                "Access-Control-Allow-Headers": "Content-Type"}
# aiohttp's settings: a request or header line of up to 64 KB and 100 header lines (as Python's
# http.client allows), two minutes idle between requests, 0.1 s of reading what a client still
# sends after a refusal (so that it reads the answer before the connection closes).
MAX_LINE, MAX_HEADERS, IDLE_TIMEOUT, LINGER = 65536, 100, 120.0, 0.1
DECODE_IN_POOL = 64 << 10  # bodies of this size or more are decoded in a worker thread


class _Exchange:
    """One request's bookkeeping: the answer's status and size, its canonical code, and the
    ``(model, API)`` its metrics count it under when not its path's."""

    __slots__ = ("status", "size", "code", "cancel", "route")

    def __init__(self):
        self.status, self.size, self.code, self.cancel, self.route = None, 0, "OK", None, None


class RestServer:
    """A :class:`~glomo_tf.serving.rest_api.RestApi` served on aiohttp: one event loop reads and
    answers every connection.

    A prediction is queued on the batcher without a thread waiting for it
    (:meth:`~glomo_tf.serving.core.ServingCore.submit`); the batch thread hands the outputs back
    to the loop, which writes the answers. Other work (model status and metadata,
    classify/regress, a prediction without a batcher, decoding a body of 64 KB or more) runs in
    a pool of ``workers`` threads, so that the loop never waits on a model or a large parse.

    Args:
        api: the :class:`~glomo_tf.serving.rest_api.RestApi` (its core's ``limits`` and
            ``metrics``; its timeout bounds the wait for a worker and then for a batch).
        host, port: where to listen (port 0: a free port, see :attr:`port`).
        cors: answer with CORS headers.
        workers, max_queued: requests with a body read and decoded at once, and waiting for
            a turn (:class:`~glomo_tf.serving.limits.Admission`; more are refused with 503).
        max_connections: open connections; a request on one more is answered 503 and closed.
        body_timeout: seconds a request body may take to arrive (408 after).
        metrics_path: where Prometheus metrics are served (None: nowhere).
        access_log: log one line per request to the ``glomo_tf.serving.access`` logger.
    """

    def __init__(self, api, host="127.0.0.1", port=0, cors=False, workers=4, max_queued=16,
                 max_connections=64, body_timeout=30.0, metrics_path=None, access_log=False):
        self.api = api
        self.core = api.core
        self.limits = api.limits
        self.request_timeout = api.request_timeout
        self.metrics = self.core.metrics or Metrics()
        self.cors = cors
        self.admission = Admission(workers, max_queued, "REST", "--rest_api_num_threads")
        self.turns = LoopTurns(self.admission)
        self.max_connections = max_connections
        self.body_timeout = body_timeout
        self.metrics_path = metrics_path
        self.access_log = access_log
        self.metrics.gauge(":glomo:serving:queue_depth", "queue", "REST",
                           lambda: self.admission.waiting)
        self.metrics.gauge(":glomo:serving:running_requests", "entrypoint", "REST",
                           lambda: self.admission.running)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.create_server((host, port), family=family, backlog=128)
        self.pool = concurrent.futures.ThreadPoolExecutor(workers,
                                                          thread_name_prefix="glomo-serve-rest")
        self.open, self.over = set(), set()  # connections served, and those over the cap
        self.waiting = {}  # connection -> the exchange of its request being served
        self.loop = self._server = self._thread = None

    @property
    def port(self):
        return self.socket.getsockname()[1]

    @property
    def connections(self):
        """Connections open and served (one over ``max_connections`` is not)."""
        return len(self.open)

    # -- one request
    async def handle(self, request):
        started = time.monotonic()
        exchange = _Exchange()
        path = request.rel_url.raw_path
        self.waiting[request.protocol] = exchange
        over = request.protocol in self.over
        try:
            if over:  # a connection over the cap: refused, then closed
                exchange.route = ("", "connection")
                raise ServingError("UNAVAILABLE", f"the server is busy: {self.max_connections} "
                                   "connections are open (the most it takes); retry later")
            answer = await self._serve(request, exchange, path)
        except ServingError as error:
            answer = self._error(exchange, error.http_status, error.message, error.code)
        except (ConnectionError, asyncio.CancelledError):  # the client went away
            exchange.code = "CANCELLED"
            self._finished(request, path, exchange, time.monotonic() - started)
            raise
        except Exception as error:  # a bug must not take the server down
            log.exception("REST %s %s failed", request.method, path)
            answer = self._error(exchange, 500, f"Internal: {type(error).__name__}: {error}",
                                 "INTERNAL")
        finally:
            self.waiting.pop(request.protocol, None)
        if over or exchange.code != "OK" and request.can_read_body or \
                getattr(request.protocol, "closing", bool)():
            answer.force_close()  # over the cap, its body maybe unread, or its client done
        if self.cors:
            answer.headers.update(CORS_HEADERS)
        exchange.status, exchange.size = answer.status, answer.content_length or 0
        self._finished(request, path, exchange, time.monotonic() - started)
        return answer

    async def _serve(self, request, exchange, path):
        method = request.method
        if method == "OPTIONS" and self.cors:
            return web.Response(status=204)
        if method == "GET" and self.metrics_path and path == self.metrics_path:
            return web.Response(body=self.metrics.exposition().encode("utf-8"),
                                headers={"Content-Type": CONTENT_TYPE})
        if method not in METHODS:
            raise invalid(f"Malformed request: unsupported method {method!r}")
        if method not in HAS_BODY:
            return await self._run(exchange, *self._dispatch(method, path, b""))
        async with self.turns.turn(self.request_timeout):
            body = await connection.read_body(request, self.limits.max_request_bytes,
                                              self.body_timeout)
            if len(body) >= DECODE_IN_POOL:  # a large parse must not hold up the others
                status, answer = await self.loop.run_in_executor(
                    self.pool, self._dispatch, method, path, body)
            else:
                status, answer = self._dispatch(method, path, body)
        return await self._run(exchange, status, answer)

    def _dispatch(self, method, path, body):
        if not path.lower().startswith("/v1/"):
            raise ServingError("NOT_FOUND", not_found_message(method, path))
        return self.api.dispatch(method, path, body)

    async def _run(self, exchange, status, answer):
        if isinstance(answer, Prediction):
            done = self.loop.create_future()

            def finished(outputs, error):
                self.loop.call_soon_threadsafe(_settle, done, outputs, error)

            exchange.cancel = self.core.submit(answer.signature, answer.inputs, finished)
            if exchange.cancel is not None:
                try:
                    outputs = await connection.within(done, self.request_timeout)
                except asyncio.TimeoutError:
                    exchange.cancel()
                    raise ServingError("DEADLINE_EXCEEDED", "the request was not served within "
                                       f"{self.request_timeout:.3f} s", 504) from None
                finally:
                    exchange.cancel = None  # the queued task refers back: no cycle is left
                text = answer.writer(outputs)
            else:
                text = await self.loop.run_in_executor(self.pool, answer)
        elif callable(answer):
            text = await self.loop.run_in_executor(self.pool, answer)
        else:
            text = answer
        return web.Response(status=status, body=text.encode("utf-8"), headers=JSON_HEADERS)

    @staticmethod
    def _error(exchange, status, message, code=None):
        exchange.code = code or from_http_status(status)
        return connection.error_response(status, message)

    def _finished(self, request, path, exchange, seconds):
        """Count an answered request and write its access-log line."""
        model, api = exchange.route or route_of(request.method, path)
        self.metrics.record_request(model, api, "REST", exchange.code, seconds)
        if self.access_log:
            access_log.info('%s "%s %s" %s %d %.1fms', request.remote, request.method,
                            request.path_qs, exchange.status or "-", exchange.size,
                            seconds * 1e3)

    # -- lifecycle
    def start(self):
        """Serves on a thread of its own until :meth:`stop`."""
        ready = threading.Event()

        def run():
            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)

            async def serve():
                self._server = connection.Server(
                    self, keepalive_timeout=IDLE_TIMEOUT, lingering_time=LINGER,
                    max_line_size=MAX_LINE, max_field_size=MAX_LINE, max_headers=MAX_HEADERS,
                    access_log=None, auto_decompress=False)
                return await self.loop.create_server(self._server, sock=self.socket)
            listening = self.loop.run_until_complete(serve())
            ready.set()
            self.loop.run_forever()
            listening.close()
            self.loop.run_until_complete(self._server.shutdown(1.0))
            self.loop.close()

        self._thread = threading.Thread(target=run, name="glomo-serve-rest", daemon=True)
        self._thread.start()
        ready.wait(30)

    def stop(self):
        if self.loop is not None and self._thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=30)
            self._thread = None
        else:
            self.socket.close()
        self.pool.shutdown(wait=False, cancel_futures=True)


def _settle(future, outputs, error):
    if not future.done():
        if error is None:
            future.set_result(outputs)
        else:
            future.set_exception(error)
