"""TF Serving's REST API (:mod:`glomo_tf.serving.rest`) on an asyncio event loop.

One thread reads, parses and answers every connection. A prediction is queued on the batcher
without a thread waiting for it (:meth:`~glomo_tf.serving.core.ServingCore.submit`); the batch
thread hands the outputs back to the loop, which writes the answers. The thread-per-connection
front end (:class:`~glomo_tf.serving.rest.RestServer`) wakes a connection thread for every
request and every answer, and those threads contend for the interpreter lock with the batch
threads; here a batch costs one wake-up each way. Endpoints, answers, limits and errors are
:class:`~glomo_tf.serving.rest.RestServer`'s. Other work (model status and metadata,
classify/regress, a prediction without a batcher, decoding a body of 64 KB or more) runs in a
pool of ``workers`` threads, so the loop never waits on a model or a large parse.
"""

import asyncio
import collections
import concurrent.futures
import email.utils
import functools
import http
import json
import logging
import socket
import sys
import threading
import time
import urllib.parse

from glomo_tf.serving.errors import ServingError, from_http_status
from glomo_tf.serving.memory import release_free_memory
from glomo_tf.serving.monitoring import CONTENT_TYPE
from glomo_tf.serving.rest import (CHUNK_SIZE, LARGE_BODY, MALFORMED_CHUNKS, BodyTooLarge,
                                   Prediction, RestApi, body_ended_message, body_length,
                                   not_found_message, too_large_message)

log = logging.getLogger("glomo_tf.serving")

MAX_LINE = 65536  # longest request or header line, as http.server and http.client allow
MAX_HEADERS = 100  # most header lines, as http.client allows
IDLE_TIMEOUT = 120.0  # seconds a connection may sit idle between requests
LINGER = 0.1  # seconds a closing connection reads what the client still sends
LINGER_BYTES = 1 << 20
HELD_BYTES = 64 << 10  # bytes read ahead of a running request before reading pauses
DECODE_IN_POOL = 64 << 10  # bodies of this size or more are decoded in a worker thread
SERVER_HEADER = f"glomo-serve Python/{sys.version.split()[0]}"
_HAS_BODY = ("POST", "PUT", "PATCH")
_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS")


class _Request:
    """One request of a connection (what :meth:`RestApi.finished` reads of a handler)."""

    def __init__(self, method, path, headers, close, peer):
        self.command = method
        self.path = path
        self.route = urllib.parse.urlsplit(path).path  # the path without its query
        self.headers = headers  # {lower-case name: [values]}
        self.close_connection = close
        self.peer = peer
        self.started = time.monotonic()
        self._answer, self._code = (None, 0), "OK"
        self.body_unread = method in _HAS_BODY
        self.large = False
        self.turn = False  # holds one of the admission's turns
        self.done = False  # answered (a late batch result is dropped)
        self.cancel = None  # cancels a queued prediction
        self.timer = None

    def header(self, name):
        return self.headers.get(name, [])

    def address_string(self):
        return self.peer


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: parses requests one at a time and answers each in order."""

    def __init__(self, server):
        self.server = server
        self.loop = server.loop
        self.transport = None
        self.buffer = bytearray()
        self.request = None
        self.state = "head"  # head -> body | chunks -> running -> head ...; closing; closed
        self.eof = False
        self.timer = None
        self.chunks = None
        self.chunk_left = None
        self.chunk_end = False
        self.body_length = 0
        self.lingered = 0
        self.paused = False
        self.scanned = 0  # bytes of a partial head already searched, the lines they hold
        self.lines = 0  # and where the last one begins
        self.line_start = 0

    # -- asyncio callbacks
    def connection_made(self, transport):
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self.peer, self.peer_port = (peer[0], peer[1]) if isinstance(peer, tuple) else (
            str(peer), "")
        server = self.server
        if len(server.open) >= server.max_connections:
            transport.write(server.refuse_connection())
            self._linger()
            return
        server.open.add(self)
        self._idle()

    def data_received(self, data):
        if self.state == "closing":
            self.lingered += len(data)
            if self.lingered > LINGER_BYTES:
                self.transport.close()
            return
        self.buffer += data
        if self.state == "running" and len(self.buffer) > HELD_BYTES and not self.paused:
            self.transport.pause_reading()  # what comes next waits in the socket, as it would
            self.paused = True  # for a connection thread busy with this request
        self._advance()

    def _resume(self):
        if self.paused:
            self.paused = False
            self.transport.resume_reading()

    def eof_received(self):
        self.eof = True
        if self.state == "closing":
            self.transport.close()
            return False
        self._advance()
        return True  # keep the write side open: an answer may still be on its way

    def connection_lost(self, error):
        self.server.open.discard(self)
        self._cancel_timer()
        request, self.request = self.request, None
        if request is not None and not request.done:
            request.done = True
            request._code = "CANCELLED"
            if request.cancel is not None:
                request.cancel()
            self._give_turn_back(request)
            if self.state != "closing":
                log.info("REST client %s:%s went away: %s", self.peer, self.peer_port,
                         type(error).__name__ if error else "closed")
                self.server.finished(request, request.command, request.route,
                                     time.monotonic() - request.started)
        self.state = "closed"

    # -- timers
    def _cancel_timer(self):
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _idle(self):
        self._cancel_timer()
        self.timer = self.loop.call_later(IDLE_TIMEOUT, self._close_idle)

    def _close_idle(self):
        self.timer = None
        if self.state == "head" and self.transport is not None:
            self.transport.close()

    # -- parsing
    def _advance(self):
        """Parse and start what the buffer holds, until a request is running or more bytes are
        needed."""
        while self.state in ("head", "body", "chunks"):
            if self.state == "head":
                if not self._read_head():
                    break
            elif self.state == "body":
                if not self._read_body():
                    break
            elif not self._read_chunks():
                break
        if self.eof and self.state == "head" and not self.buffer:
            self.transport.close()

    def _line(self, limit):
        """The next line (with its newline) out of the buffer, or None until it is whole; a line
        over ``limit`` bytes raises ``ValueError``."""
        end = self.buffer.find(b"\n", 0, limit + 1)
        if end < 0:
            if len(self.buffer) > limit:
                raise ValueError
            return None
        line = bytes(self.buffer[:end + 1])
        del self.buffer[:end + 1]
        return line

    def _read_head(self):
        # Only the bytes not looked at before are searched: a head sent a byte at a time costs
        # its length, not its length squared.
        start = max(0, self.scanned - 3)
        end = self.buffer.find(b"\n\n", start)
        crlf = self.buffer.find(b"\r\n\r\n", start)
        if crlf >= 0 and (end < 0 or crlf < end):
            end = crlf + 2
        if end < 0:  # not whole yet: check the lines so far against the limits
            newline = self.buffer.rfind(b"\n", self.scanned)
            if newline >= 0:
                self.lines += self.buffer.count(b"\n", self.scanned)
                self.line_start = newline + 1
            self.scanned = len(self.buffer)
            last = len(self.buffer) - self.line_start
            if last > MAX_LINE and self.lines == 0:
                self._refuse_head(414, "Request-URI Too Long")
            elif last > MAX_LINE:
                self._refuse_head(431, "Line too long")
            elif self.lines > MAX_HEADERS + 1:
                self._refuse_head(431, "Too many headers")
            elif self.eof:
                self.transport.close()
            return False
        self.scanned = self.lines = self.line_start = 0
        head = bytes(self.buffer[:end + 1])
        del self.buffer[:end + 2 if self.buffer[end + 1:end + 2] == b"\n" else end + 1]
        lines = head.split(b"\n")
        request_line = lines[0].rstrip(b"\r").decode("iso-8859-1")
        if len(lines[0]) > MAX_LINE:
            self._refuse_head(414, "Request-URI Too Long")
            return False
        words = request_line.split()
        if not words:  # an empty request line: http.server closes without an answer
            self.transport.close()
            self.state = "closed"
            return False
        close, version = True, "HTTP/0.9"
        if len(words) >= 3:
            version = words[-1]
            try:
                if not version.startswith("HTTP/"):
                    raise ValueError
                numbers = version.split("/", 1)[1].split(".")
                if len(numbers) != 2 or not all(n.isdigit() and len(n) <= 10 for n in numbers):
                    raise ValueError
                number = int(numbers[0]), int(numbers[1])
            except (ValueError, IndexError):
                self._refuse_head(400, f"Bad request version ({version!r})")
                return False
            if number >= (2, 0):
                self._refuse_head(505, f"Invalid HTTP version ({version.split('/', 1)[1]})")
                return False
            close = number < (1, 1)
        if not 2 <= len(words) <= 3:
            self._refuse_head(400, f"Bad request syntax ({request_line!r})")
            return False
        method, path = words[:2]
        if len(words) == 2:
            close = True
            if method != "GET":
                self._refuse_head(400, f"Bad HTTP/0.9 request type ({method!r})")
                return False
        if path.startswith("//"):
            path = "/" + path.lstrip("/")
        header_lines = [line for line in lines[1:] if line.rstrip(b"\r")]
        if any(len(line) > MAX_LINE for line in header_lines):
            self._refuse_head(431, "Line too long")
            return False
        if len(header_lines) > MAX_HEADERS:
            self._refuse_head(431, "Too many headers")
            return False
        headers, last = {}, None
        for raw in header_lines:
            line = raw.rstrip(b"\r\n").decode("iso-8859-1")
            if line[:1] in (" ", "\t") and last is not None:  # a folded line continues a value
                values = headers[last]
                values[-1] += line
                continue
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                break  # not a header: the email parser ends the headers here too
            last = name.lower()
            headers.setdefault(last, []).append(value.strip(" \t"))
        connection = ",".join(headers.get("connection", [])).strip().lower()
        if connection == "close":
            close = True
        elif connection == "keep-alive":
            close = False
        self._cancel_timer()
        request = _Request(method, path, headers, close, self.peer)
        self.request = request
        if (",".join(headers.get("expect", [])).lower() == "100-continue"
                and version >= "HTTP/1.1"):
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        self._start(request)
        return self.state in ("body", "chunks")

    def _refuse_head(self, status, message):
        """http.server's own refusals (a bad request line or headers), as JSON errors."""
        request = _Request("", "", {}, True, self.peer)
        request.body_unread = False
        self.request = request
        self.state = "running"
        self._answer_error(request, status, message)

    # -- one request
    def _start(self, request):
        method = request.command
        if method not in _METHODS:
            request.close_connection = True
            self.state = "running"
            self._answer_error(request, 400, f"Malformed request: unsupported method {method!r}")
            return
        if method == "OPTIONS" and self.server.cors:
            request.body_unread = False
            self.state = "running"
            self._write(request, 204, b"")
            return
        path = request.route
        if method == "GET" and self.server.metrics_path and path == self.server.metrics_path:
            self.state = "running"
            self._write(request, 200, self.server.metrics.exposition().encode("utf-8"),
                        CONTENT_TYPE)
            return
        if not request.body_unread:
            self.state = "running"
            self._dispatch(request, path, b"")
            return
        self.state = "running"  # waits for a turn before its body is read
        if self.server.take_turn(self, request):
            self._turn(request)

    def _turn(self, request):
        request.turn = True
        self._resume()
        try:
            self._begin_body(request)
        except ServingError as error:
            self._answer_error(request, error.http_status, error.message, error.code)

    def turn_given(self, request):
        """The admission gave a waiting ``request`` its turn: read its body."""
        if request is not self.request or request.done:
            request.turn = True
            self._give_turn_back(request)
            return
        self._turn(request)
        self._advance()

    def turn_refused(self, request, error):
        if request is self.request and not request.done:
            self._answer_error(request, error.http_status, error.message, error.code)

    def _begin_body(self, request):
        self.timer = self.loop.call_later(self.server.body_timeout, self._body_late, request)
        try:
            length = body_length(request.header("transfer-encoding"),
                                 request.header("content-length"),
                                 self.server.limits.max_request_bytes)
        except BodyTooLarge as error:
            self._too_large(request, error.args[0])
            return
        except ServingError:
            request.close_connection = True
            raise
        if length is None:
            request.close_connection = False
            self.chunks, self.body_length = [], 0
            self.chunk_left, self.chunk_end = None, False
            self.state = "chunks"
            return
        self.body_length = length
        self.state = "body"

    def _too_large(self, request, size):
        self._answer_error(request, 413, too_large_message(
            size, self.server.limits.max_request_bytes), "RESOURCE_EXHAUSTED")

    def _body_late(self, request):
        self.timer = None
        if request is self.request and not request.done and self.state in ("body", "chunks"):
            self._answer_error(request, 408, "the request body did not arrive within "
                               f"{self.server.body_timeout:g} s", "DEADLINE_EXCEEDED")

    def _read_body(self):
        request = self.request
        if len(self.buffer) < self.body_length:
            if self.eof:
                got = len(self.buffer)
                del self.buffer[:]
                request.close_connection = True
                self._answer_error(request, 400, body_ended_message(got, self.body_length))
            return False
        body = bytes(self.buffer[:self.body_length])
        del self.buffer[:self.body_length]
        self._body_read(request, body)
        return False

    def _read_chunks(self):
        """The chunked body, read as the threaded front end reads it (size lines of up to 1024
        bytes, each chunk's line end of up to 8, trailers up to an empty line or the end)."""
        request = self.request
        while True:
            if self.chunk_end:  # the line end after a chunk's data
                end = self.buffer.find(b"\n", 0, 8)
                if end < 0 and len(self.buffer) < 8:
                    if self.eof:
                        self._bad_chunks(request)
                    return False
                del self.buffer[:end + 1 if end >= 0 else 8]
                self.chunk_end = False
            if self.chunk_left is None:  # a chunk-size line
                try:
                    line = self._line(1024)
                except ValueError:
                    self._bad_chunks(request)
                    return False
                if line is None:
                    if self.eof:
                        self._bad_chunks(request)
                    return False
                digits = line.split(b";")[0].strip()
                if not CHUNK_SIZE.fullmatch(digits):
                    self._bad_chunks(request)
                    return False
                size = int(digits, 16)
                if size:
                    self.body_length += size
                    if self.body_length > self.server.limits.max_request_bytes:
                        self._too_large(request, self.body_length)
                        return False
                self.chunk_left = size
            if self.chunk_left == 0:  # trailers, up to an empty line (or the end)
                try:
                    line = self._line(1024)
                except ValueError:
                    del self.buffer[:1024]
                    continue
                if line is None and not self.eof:
                    return False
                if line and line.strip():
                    continue
                self._body_read(request, b"".join(self.chunks))
                return False
            if len(self.buffer) < self.chunk_left:
                if self.eof:
                    request.close_connection = True
                    self._answer_error(request, 400, "chunked request body ended inside a "
                                       "chunk")
                return False
            self.chunks.append(bytes(self.buffer[:self.chunk_left]))
            del self.buffer[:self.chunk_left]
            self.chunk_left = None
            self.chunk_end = True

    def _bad_chunks(self, request):
        request.close_connection = True
        self._answer_error(request, 400, MALFORMED_CHUNKS)

    def _body_read(self, request, body):
        self._cancel_timer()
        request.body_unread = False
        self.state = "running"
        request.large = len(body) >= LARGE_BODY
        self._dispatch(request, request.route, body)

    # -- running
    def _dispatch(self, request, path, body):
        if not path.lower().startswith("/v1/"):
            self._answer_error(request, 404, not_found_message(request.command, path))
            return
        work = functools.partial(self.server.dispatch, request.command, path, body)
        if len(body) >= DECODE_IN_POOL:  # a large parse must not hold up the other connections
            self._in_pool(work, self._dispatched, request)
            return
        try:
            result, error = work(), None
        except Exception as failed:
            result, error = None, failed
        self._dispatched(request, result, error)

    def _in_pool(self, work, then, *args):
        """Runs ``work()`` in the pool, then ``then(*args, result, error)`` on the loop."""
        def run():
            try:
                result, error = work(), None
            except Exception as failed:
                result, error = None, failed
            self.loop.call_soon_threadsafe(then, *args, result, error)
        self.server.pool.submit(run)

    def _dispatched(self, request, result, error):
        self._give_turn_back(request)
        if request.done:
            return
        if error is not None:
            self._failed(request, error)
            return
        self._run(request, *result)

    def _run(self, request, status, answer):
        if isinstance(answer, Prediction):
            try:
                request.cancel = self.server.core.submit(
                    answer.signature, answer.inputs,
                    lambda outputs, error: self.loop.call_soon_threadsafe(
                        self._predicted, request, answer, outputs, error))
            except Exception as error:
                self._failed(request, error)
                return
            if request.cancel is not None:
                timeout = self.server.request_timeout
                if timeout is not None:
                    request.timer = self.loop.call_later(timeout, self._expired, request)
                return
        if callable(answer):
            self._in_pool(answer, self._answered, request, status)
            return
        self._write(request, status, answer.encode("utf-8"))

    def _answered(self, request, status, text, error):
        if request.done:
            return
        if error is not None:
            self._failed(request, error)
            return
        self._write(request, status, text.encode("utf-8"))

    def _predicted(self, request, answer, outputs, error):
        text = None
        if error is None and not request.done:
            try:
                text = answer.writer(outputs)
            except Exception as failed:
                error = failed
        self._answered(request, 200, text, error)

    def _expired(self, request):
        request.timer = None
        if request.done:
            return
        if request.cancel is not None:
            request.cancel()
        timeout = self.server.request_timeout
        self._answer_error(request, 504, f"the request was not served within {timeout:.3f} s",
                           "DEADLINE_EXCEEDED")

    def _failed(self, request, error):
        if isinstance(error, ServingError):
            self._answer_error(request, error.http_status, error.message, error.code)
            return
        log.error("REST %s %s failed", request.command, request.path,
                  exc_info=(type(error), error, error.__traceback__))
        self._answer_error(request, 500, f"Internal: {type(error).__name__}: {error}",
                           "INTERNAL")

    # -- answering
    def _answer_error(self, request, status, message, code=None):
        request._code = code or from_http_status(status)
        if request.body_unread:  # the unread body makes the stream unusable
            request.close_connection = True
        self._write(request, status, json.dumps({"error": message},
                                                ensure_ascii=False).encode("utf-8"))

    def _write(self, request, status, body, content_type="application/json"):
        if request.done or self.transport is None or self.transport.is_closing():
            return
        request.done = True
        if request.timer is not None:
            request.timer.cancel()
            request.timer = None
        request.cancel = None  # the queued task refers back to the request: no cycle is left
        self._give_turn_back(request)
        self._cancel_timer()
        request._answer = (status, len(body))
        try:
            reason = http.HTTPStatus(status).phrase
        except ValueError:
            reason = ""
        head = [f"HTTP/1.1 {status} {reason}", f"Server: {SERVER_HEADER}",
                f"Date: {self.server.date()}", f"Content-Type: {content_type}",
                f"Content-Length: {len(body)}"]
        if self.server.cors:
            head += ["Access-Control-Allow-Origin: *", "Access-Control-Allow-Methods: POST, GET",
                     "Access-Control-Allow-Headers: Content-Type"]
        if request.close_connection:
            head.append("Connection: close")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("iso-8859-1")
        self.transport.write(data + body if request.command != "HEAD" else data)
        self.server.finished(request, request.command, request.route,
                             time.monotonic() - request.started)
        if request.large:  # once this callback's references to its arrays are gone
            self.loop.call_soon(self.server.pool.submit, release_free_memory)
        self.request = None
        if request.close_connection:
            self._linger()
            return
        self.state = "head"
        self._idle()
        self._resume()
        if self.buffer or self.eof:
            self.loop.call_soon(self._advance)

    def _linger(self):
        """Close after the answer, reading briefly what the client still sends (a body the
        server refused to read), so that unread data does not reset the connection before the
        client has read the answer."""
        self.state = "closing"
        self.buffer = bytearray()
        self._cancel_timer()
        self._resume()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        if self.eof:
            self.transport.close()
            return
        self.timer = self.loop.call_later(LINGER, self.transport.close)

    def _give_turn_back(self, request):
        if request.turn:
            request.turn = False
            self.server.give_turn_back()


class LoopRestServer(RestApi):
    """The REST front end on an asyncio event loop; arguments as
    :class:`~glomo_tf.serving.rest.RestServer`'s (``workers`` is also the size of the pool that
    runs the work the loop must not wait on)."""

    def __init__(self, core, host="127.0.0.1", port=0, timeout_ms=30000, cors=False,
                 workers=4, max_queued=16, max_connections=64, body_timeout=30.0,
                 metrics_path=None, access_log=False):
        self._init_api(core, timeout_ms, cors, workers, max_queued, max_connections,
                       body_timeout, metrics_path, access_log)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.create_server((host, port), family=family, backlog=128)
        self.server_address = self.socket.getsockname()
        self.pool = concurrent.futures.ThreadPoolExecutor(workers,
                                                          thread_name_prefix="glomo-serve-rest")
        self.open = set()  # the connections being served (a refused one is not)
        self.loop = None
        self._server = None
        self._thread = None
        self._waiting = collections.deque()  # (connection, request, deadline timer)
        self._date = (0, "")

    @property
    def port(self):
        return self.server_address[1]

    @property
    def _connections(self):  # as RestServer counts them
        return len(self.open)

    def date(self):
        now = int(time.time())
        if self._date[0] != now:
            self._date = (now, email.utils.formatdate(now, usegmt=True))
        return self._date[1]

    # -- admission: the threaded front end's turns, without a thread waiting for one
    def take_turn(self, connection, request):
        """True when ``request`` has a turn now; else it waits (``connection.turn_given`` when
        one is free) or is refused (``connection.turn_refused``)."""
        try:
            if self.admission.take():
                return True
        except ServingError as refused:
            connection.turn_refused(request, refused)
            return False
        entry = [connection, request, None]
        if self.request_timeout is not None:
            entry[2] = self.loop.call_later(self.request_timeout, self._turn_late, entry)
        self._waiting.append(entry)
        return False

    def _turn_late(self, entry):
        if entry in self._waiting:
            self._waiting.remove(entry)
            self.admission.leave_queue()
            connection, request, _ = entry
            connection.turn_refused(request, self.admission.late(self.request_timeout))

    def give_turn_back(self):
        self.admission.give_back()
        while self._waiting and self.admission.running < self.admission.workers:
            connection, request, timer = self._waiting.popleft()
            self.admission.leave_queue()
            if timer is not None:
                timer.cancel()
            if request.done or connection.state == "closed":
                continue
            self.admission.take()  # a turn is free: held from here
            connection.turn_given(request)

    # -- lifecycle
    def start(self):
        ready = threading.Event()

        def run():
            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)

            async def serve():
                self._server = await self.loop.create_server(lambda: _Connection(self),
                                                             sock=self.socket)
            self.loop.run_until_complete(serve())
            ready.set()
            self.loop.run_forever()
            self.loop.close()

        self._thread = threading.Thread(target=run, name="glomo-serve-rest", daemon=True)
        self._thread.start()
        ready.wait(30)

    def stop(self):
        if self.loop is not None and self._thread is not None:
            def close():
                self._server.close()
                for connection in list(self.open):
                    if connection.transport is not None:
                        connection.transport.abort()
                self.loop.stop()
            self.loop.call_soon_threadsafe(close)
            self._thread.join(timeout=30)
            self._thread = None
        else:
            self.socket.close()
        self.pool.shutdown(wait=False, cancel_futures=True)
