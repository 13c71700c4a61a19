"""The REST API's connections on aiohttp's low-level server, and what they refuse on their own.

aiohttp and its C parser (llhttp) do the HTTP/1.1 mechanics. Three refusals are this module's,
each answered as TF Serving's JSON error:

* a request that aiohttp's parser refuses (a malformed request line, header or chunked body; a
  head over the size limits): 400 with the parser's words, one log line, no traceback;
* a chunked body that declares a chunk which takes it over ``--max_request_bytes``: 413 as soon
  as the chunk's size line has arrived, as TF Serving's front end (libevent) refuses it, not
  once the body timeout has passed;
* a body cut short by a client that closes its side of the connection: 400 (and a request
  whose body had all arrived is still answered), then the connection closes.
"""

import asyncio
import ctypes
import json
import logging
from http import HTTPStatus

from aiohttp import streams, web, web_protocol

from glomo_tf.serving.errors import ServingError, invalid
from glomo_tf.serving.limits import too_large

log = logging.getLogger("glomo_tf.serving")


def too_large_message(limit, size=None):
    return (f"Request body {f'of {size} bytes ' if size else ''}exceeds the limit of {limit} "
            "bytes (--max_request_bytes)")


class BodyRefused(Exception):
    """Set on a request body's stream when the connection refuses the body; ``error`` is the
    :class:`~glomo_tf.serving.errors.ServingError` the request is answered with."""

    def __init__(self, error):
        super().__init__(error.message)
        self.error = error


class _LlhttpState(ctypes.Structure):
    """The head of llhttp's parser state (``struct llhttp__internal_s`` in llhttp.h) up to
    ``content_length``: the bytes of a body, or of the chunk being read, still to come."""

    _fields_ = [("index", ctypes.c_int32), ("span_pos0", ctypes.c_void_p),
                ("span_cb0", ctypes.c_void_p), ("error", ctypes.c_int32),
                ("reason", ctypes.c_void_p), ("error_pos", ctypes.c_void_p),
                ("data", ctypes.c_void_p), ("current", ctypes.c_void_p),
                ("content_length", ctypes.c_uint64)]


def llhttp_state(parser):
    """llhttp's state under aiohttp's C request parser, or None where it cannot be read safely.

    aiohttp keeps the llhttp parser in the first field of its parser object (after the object's
    head and Cython's method table) and points llhttp's ``data`` back at that object; the state
    is used only when that pointer checks out, so that another layout gives None, not a misread.
    """
    head = object.__basicsize__ + ctypes.sizeof(ctypes.c_void_p)
    if type(parser).__module__ != "aiohttp._http_parser" or \
            type(parser).__basicsize__ < head + ctypes.sizeof(ctypes.c_void_p):
        return None
    address = ctypes.c_void_p.from_address(id(parser) + head).value
    if not address or address % ctypes.alignment(_LlhttpState):
        return None
    state = _LlhttpState.from_address(address)
    return state if state.data == id(parser) else None


class Connection(web_protocol.RequestHandler):
    """aiohttp's connection handler with this server's refusals (see the module's docstring)."""

    def __init__(self, manager, **settings):
        super().__init__(manager, **settings)
        self.limit = manager.limit
        self.newest = None  # (message, body stream) of the request the parser read last
        self.half_closed = False
        self.refused = False  # a body was refused: nothing more is parsed
        self.answered = 0  # requests answered, of the connection's _request_count received
        parser = self._parser
        self.llhttp = (parser, llhttp_state(parser))  # the parser kept alive with its state

    def data_received(self, data):
        if self.refused:
            return  # the refused request's answer closes the connection
        super().data_received(data)
        if self._messages:
            self.newest = self._messages[-1]
        body = self._body_in_progress()
        if body is not None and getattr(self.newest[0], "chunked", False) and self.llhttp[1]:
            declared = body.total_bytes + self.llhttp[1].content_length
            if declared > self.limit:
                self._refuse(body, too_large(too_large_message(self.limit, declared)))

    def eof_received(self):
        """The client closed its side: a body still coming is refused; requests received are
        answered before the connection closes; an idle connection closes at once."""
        body = self._body_in_progress()
        if body is not None:
            length = self.newest[0].headers.get("Content-Length")
            of = f"{body.total_bytes} of its {length} bytes" if length else \
                f"{body.total_bytes} bytes of its chunked body"
            self._refuse(body, invalid(f"the request body was cut short: the client closed "
                                       f"its side of the connection after {of}"))
        if self._request_count == self.answered:
            return False
        self.half_closed = True
        return True  # the transport stays open for the answers

    async def finish_response(self, request, resp, start_time):
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            self.answered += 1

    def closing(self):
        """Whether the answer being made is the connection's last: its client closed its side,
        or its body was refused, and no other request came after it."""
        return (self.half_closed or self.refused) and self._request_count == self.answered + 1

    def _body_in_progress(self):
        if self.newest is None:
            return None
        body = self.newest[1]
        if body is streams.EMPTY_PAYLOAD or body.is_eof() or body.exception() is not None:
            return None
        return body

    def _refuse(self, body, error):
        body.set_exception(BodyRefused(error))
        body.feed_eof()  # nothing more is read into it, nor lingered over
        self.refused = True

    def handle_error(self, request, status=500, exc=None, message=None):
        if request.writer.output_size > 0:
            raise ConnectionError("the answer was already being sent")
        lines = (line.strip() for line in (message or HTTPStatus(status).phrase).splitlines())
        text = " ".join(line for line in lines if line.strip("^ "))  # without the caret line
        log.info("REST client %s refused: %s %s", request.remote, status, text)
        answer = error_response(status, text)
        answer.force_close()
        return answer


def error_response(status, message):
    """TF Serving's error answer: ``{"error": message}`` with the HTTP status."""
    return web.Response(status=status, headers={"Content-Type": "application/json"},
                        body=json.dumps({"error": message}, ensure_ascii=False).encode("utf-8"))


class Server(web.Server):
    """aiohttp's low-level server for :class:`~glomo_tf.serving.rest.RestServer`: its
    :class:`Connection` handlers, counted for the connection cap."""

    def __init__(self, rest, **settings):
        super().__init__(rest.handle, request_factory=self._request, handler_cancellation=True,
                         loop=rest.loop, **settings)
        self.rest = rest
        self.limit = rest.limits.max_request_bytes

    def __call__(self):
        return Connection(self, loop=self.rest.loop, **self._kwargs)

    def _request(self, message, payload, protocol, writer, task):
        return web.BaseRequest(message, payload, protocol, writer, task, self.rest.loop,
                               client_max_size=self.limit)

    def connection_made(self, handler, transport):
        rest = self.rest
        (rest.open if len(rest.open) < rest.max_connections else rest.over).add(handler)
        super().connection_made(handler, transport)

    def connection_lost(self, handler, exc=None):
        self.rest.open.discard(handler)
        self.rest.over.discard(handler)
        exchange = self.rest.waiting.pop(handler, None)
        if exchange is not None:  # its request is still being served: take it off the queue
            exchange.code = "CANCELLED"
            if exchange.cancel is not None:
                exchange.cancel()
            peer = handler.transport.get_extra_info("peername") if handler.transport else None
            peer = peer[:2] if isinstance(peer, tuple) else (peer, "")
            log.info("REST client %s:%s went away: %s", *peer,
                     type(exc).__name__ if exc else "closed")
        super().connection_lost(handler, exc)


async def read_body(request, limit, timeout):
    """The body of ``request``: refused over ``limit`` bytes (413, before any byte is read when
    its Content-Length says so), cut short (400), malformed (400), or not arrived within
    ``timeout`` seconds (408), each as a :class:`~glomo_tf.serving.errors.ServingError`."""
    if request.content_length is not None and request.content_length > limit:
        raise too_large(too_large_message(limit, request.content_length))
    if request.version >= (1, 1) and request.headers.get("Expect", "").lower() == \
            "100-continue":  # as aiohttp's router does for its routes
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0
    try:
        return await within(request.read(), timeout)
    except asyncio.TimeoutError:
        raise ServingError("DEADLINE_EXCEEDED", "the request body did not arrive within "
                           f"{timeout:g} s", 408) from None
    except web.HTTPRequestEntityTooLarge:
        raise too_large(too_large_message(limit)) from None
    except BodyRefused as refused:
        raise refused.error from None
    except web_protocol.RequestPayloadError as error:  # a malformed chunked body
        raise invalid(f"malformed request body: {error}") from None


async def within(awaitable, seconds):
    """``await awaitable``, raising ``asyncio.TimeoutError`` after ``seconds`` (None: never);
    on Python 3.11 and later without the task ``asyncio.wait_for`` wraps a coroutine in."""
    if not hasattr(asyncio, "timeout"):
        return await asyncio.wait_for(awaitable, seconds)
    async with asyncio.timeout(seconds):
        return await awaitable
