"""The REST API on uvicorn (httptools' parser), the second candidate the serving benchmarks
measure beside the product's aiohttp front end (``--rest-frontend uvicorn``).

:class:`UvicornRestServer` is :class:`glomo_tf.serving.rest.RestServer` with its transport
swapped: the same admission turns, decoding pool, batcher hand-off and answers, reached through
an ASGI application served by uvicorn instead of aiohttp's server. It needs ``pip install
uvicorn[standard]``; the package does not depend on it. The connection cap is not mounted
(uvicorn's ``limit_concurrency`` answers its own plain-text 503), nor the JSON answers to
malformed HTTP: the comparison is of speed and memory.
"""

import asyncio
import socket
import threading
import urllib.parse

from glomo_tf.serving.rest import RestServer


class _Url:
    def __init__(self, raw_path):
        self.raw_path = raw_path


class _Request:
    """What :meth:`RestServer.handle` reads of an aiohttp request, from an ASGI scope."""

    def __init__(self, scope, receive):
        self.method = scope["method"]
        self.protocol = tuple(scope.get("client") or ("", 0))  # one key per connection
        raw = scope.get("raw_path") or scope["path"].encode()
        self.rel_url = _Url(urllib.parse.urlsplit(raw.decode("latin-1")).path)
        self.path_qs = raw.decode("latin-1")
        self.remote = self.protocol[0]
        self.version = (1, 0)  # uvicorn answers "Expect: 100-continue" itself
        self.headers = {k.decode("latin-1").title(): v.decode("latin-1")
                        for k, v in scope["headers"]}
        length = self.headers.get("Content-Length")
        self.content_length = int(length) if length and length.isdigit() else None
        self._receive = receive
        self.can_read_body = self.method in ("POST", "PUT", "PATCH")

    async def read(self):
        parts = []
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                raise ConnectionResetError("the client went away")
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                self.can_read_body = False
                return b"".join(parts)


def _protocol():
    """httptools' protocol with Nagle's algorithm off, as aiohttp sets it: uvicorn writes an
    answer's head and body apart, and the body would otherwise wait for the client's delayed
    acknowledgement of the head (40 ms)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class NoDelay(HttpToolsProtocol):
        def connection_made(self, transport):
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            super().connection_made(transport)
    return NoDelay


class UvicornRestServer(RestServer):
    """:class:`RestServer`'s API and arguments, served by uvicorn with httptools."""

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        answer = await self.handle(_Request(scope, receive))
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers.items()]
        if not any(k.lower() == b"content-length" for k, _ in headers):
            headers.append((b"content-length", str(len(answer.body or b"")).encode()))
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": answer.body or b""})

    def start(self):
        import uvicorn
        ready = threading.Event()
        config = uvicorn.Config(self, loop="asyncio", http=_protocol(), lifespan="off",
                                access_log=False, log_level="warning", timeout_keep_alive=120,
                                h11_max_incomplete_event_size=65536)
        self._uvicorn = uvicorn.Server(config)

        def run():
            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(ready.set)
            self.loop.run_until_complete(self._uvicorn.serve(sockets=[self.socket]))
            self.loop.close()

        self._thread = threading.Thread(target=run, name="glomo-serve-uvicorn", daemon=True)
        self._thread.start()
        ready.wait(30)

    def stop(self):
        self._uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.pool.shutdown(wait=False, cancel_futures=True)
