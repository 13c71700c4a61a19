"""TF Serving's REST API for one served model, over aiohttp's HTTP client:
:class:`~glomo_tf.serving.client.ServingClient`'s REST side.

aiohttp keeps connections alive and pools them, turns Nagle's algorithm off, writes a request's
headers and body in one write and reads answers with its C parser (llhttp, the parser under
``glomo serve``'s aiohttp server too). It is asynchronous and the client is not: every
transport's session runs on one event loop, in a daemon thread of the process's own, and a call
hands its request to that loop and waits for the answer. One loop for every calling thread
measured faster at 8 concurrent callers than a loop per calling thread (which each call would
run itself), and it works the same from a thread whose own event loop is running (a notebook's).
"""

import asyncio
import json
import os
import threading
import urllib.parse
import weakref
from http.client import responses

import aiohttp
import yarl
from aiohttp.http_exceptions import ContentLengthError

from glomo_tf.serving.errors import ServingError, from_http_status
from glomo_tf.serving.tensors import array_to_json, json_to_numpy, loads, read_outputs

JSON_HEADERS = {"Content-Type": "application/json"}


class _LoopThread:
    """The process's event loop for the REST sessions, run by a daemon thread (started on first
    use, and again in a forked child, which has no copy of the thread)."""

    _lock = threading.Lock()
    _loop, _pid = None, None

    @classmethod
    def loop(cls):
        loop = cls._loop
        if loop is None or cls._pid != os.getpid():
            with cls._lock:
                if cls._loop is None or cls._pid != os.getpid():
                    cls._loop = asyncio.new_event_loop()
                    threading.Thread(target=cls._loop.run_forever, daemon=True,
                                     name="ServingClient REST event loop").start()
                    cls._pid = os.getpid()
                loop = cls._loop
        return loop

    @classmethod
    def run(cls, coroutine):
        """``coroutine``'s result, run on the loop (from any thread but the loop's own)."""
        return asyncio.run_coroutine_threadsafe(coroutine, cls.loop()).result()


async def _open_session(timeout):
    """An aiohttp session (made on the loop it runs on): ``timeout`` seconds for connecting and
    for each read (None: no limit), no cookies, no compressed answers asked for."""
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout),
        cookie_jar=aiohttp.DummyCookieJar(), skip_auto_headers=("Accept-Encoding",))


async def _exchange(session, method, url, body):
    """``(status, payload)`` of one request (``body``: JSON bytes or None)."""
    async with session.request(method, url, data=body,
                               headers=None if body is None else JSON_HEADERS) as response:
        return response.status, await response.read()


async def _close_session(session):
    await session.close()
    await asyncio.sleep(0)  # the transports' connection_lost callbacks run: their sockets close


def _close_on_loop(session, loop):
    """Close ``session`` on ``loop`` (waiting for it, unless called on the loop's thread)."""
    if loop.is_closed():
        return
    future = asyncio.run_coroutine_threadsafe(_close_session(session), loop)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        future.result(30)


class _Session:
    """A transport's aiohttp session on the loop thread: opened on first use, closed by
    :meth:`close` or when the transport is collected."""

    def __init__(self, timeout):
        self._timeout = timeout
        self._lock = threading.Lock()
        self._session, self._finalizer = None, None

    def get(self):
        session = self._session
        if session is None:
            with self._lock:
                if self._session is None:
                    self._session = _LoopThread.run(_open_session(self._timeout))
                    self._finalizer = weakref.finalize(self, _close_on_loop, self._session,
                                                       _LoopThread.loop())
                session = self._session
        return session

    def close(self):
        with self._lock:
            finalizer, self._session = self._finalizer, None
        if finalizer is not None:
            finalizer()


def _restore_empty_dims(array, shape):
    """JSON cannot show the dimensions after an empty one (``[[]]`` for a ``[1, 0, 5]`` tensor):
    put them back from the signature's rank (static dims as declared, unknown ones as 0)."""
    if array.size or shape is None or array.ndim >= len(shape):
        return array
    tail = [d if d >= 0 else 0 for d in shape[array.ndim:]]
    return array.reshape(array.shape + tuple(tail))


class RestTransport:
    """Status, metadata and predict requests of one model over TF Serving's REST API.

    Args:
        target: ``host:port`` or ``http(s)://host:port``.
        model_name / version / version_label: the model (and a version or label, or neither
            for the latest) named in the requests' paths.
        timeout: seconds for connecting and for each read of an answer (None: no limit).
    """

    def __init__(self, target, model_name, version=None, version_label=None, timeout=30.0):
        parsed = urllib.parse.urlsplit(target if "://" in target else "http://" + target)
        # (a port that is not a number raises ValueError too)
        if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.port == 0:
            raise ValueError(f"cannot read a REST address from {target!r}")
        self.target = f"{parsed.scheme}://{parsed.netloc}"
        self.timeout = timeout
        prefix = f"/v1/models/{urllib.parse.quote(model_name, safe='')}"
        if version is not None:
            prefix += f"/versions/{int(version)}"
        elif version_label is not None:
            prefix += f"/labels/{urllib.parse.quote(version_label, safe='')}"
        self._prefix = prefix
        self._urls = {}
        self._session = _Session(timeout)
        self.answered = 0  # answers read: a POST failing on a kept-alive connection is resent

    def status(self):
        """The model's ``model_version_status`` entries (TF Serving's REST form)."""
        return self._document(self._prefix).get("model_version_status", [])

    def metadata(self):
        """The model's metadata in TF Serving's REST form (``model_spec`` + ``signature_def``)."""
        return self._document(self._prefix + "/metadata")

    def predict(self, arrays, signature_name, output_filter, output_types, output_shapes):
        """``{alias: ndarray}`` of a signature run on ``{alias: ndarray}`` in the columnar
        format: ``output_filter`` the aliases to keep (all when None), ``output_types``
        (``{alias: dtype}``) and ``output_shapes`` (``{alias: dims}``) the signature's."""
        body = ('{"signature_name": ' + json.dumps(signature_name) + ', "inputs": {' + ", ".join(
            json.dumps(alias) + ": " + array_to_json(array) for alias, array in arrays.items())
            + "}}")
        payload = self.request("POST", self._prefix + ":predict", body)
        outputs = read_outputs(payload, output_types)
        if outputs is None:
            outputs = self._read_outputs(payload, output_types, output_shapes)
        if output_filter is not None:
            outputs = {alias: outputs[alias] for alias in output_filter}
        return outputs

    def request(self, method, path, body=None):
        """The payload of a request's 200 answer (``body``: JSON text or None); any other
        answer raised as the :class:`ServingError` its status and ``{"error": ...}`` name."""
        status, payload = self._send(method, path, None if body is None else body.encode())
        if status == 200:
            return payload
        try:
            message = loads(payload).get("error")
        except (ValueError, AttributeError):
            message = None
        if not isinstance(message, str):  # not TF Serving's {"error": ...}
            message = payload[:500].decode("utf-8", "replace") or responses.get(
                status, f"HTTP status {status}")
        raise ServingError(from_http_status(status), message, status)

    def close(self):
        """Close the connections (a later request opens a fresh session)."""
        self._session.close()

    def _url(self, path):
        url = self._urls.get(path)
        if url is None:
            url = self._urls[path] = yarl.URL(self.target + path, encoded=True)
        return url

    def _send(self, method, path, body):
        """``(status, payload)``; a request that got no answer raised as a
        :class:`ServingError` (UNAVAILABLE, or DEADLINE_EXCEEDED after ``timeout``). A POST
        that fails on a connection kept alive from an earlier answer (which the server may have
        closed meanwhile) is sent once more; aiohttp does so itself for GET."""
        session, where = self._session.get(), f"{method} {self.target}{path}"
        resend = method == "POST" and self.answered > 0
        while True:
            try:
                answer = _LoopThread.run(_exchange(session, method, self._url(path), body))
                self.answered += 1
                return answer
            except asyncio.TimeoutError:
                raise ServingError("DEADLINE_EXCEEDED", f"{where}: no response within "
                                   f"{self.timeout} s") from None
            except (aiohttp.ClientConnectorError, aiohttp.ClientPayloadError,
                    aiohttp.ClientResponseError) as error:
                message = _failure(error)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError,
                    aiohttp.ClientConnectionResetError) as error:
                if resend:
                    resend = False
                    continue
                message = _failure(error)
            except aiohttp.ClientError as error:
                message = f"{type(error).__name__}: {error}"
            raise ServingError("UNAVAILABLE", f"{where}: {message}") from None

    def _document(self, path):
        """The JSON object a GET answers."""
        try:
            doc = loads(self.request("GET", path))
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise ServingError("INTERNAL", f"GET {self.target}{path}: the response is not a "
                               "JSON object")
        return doc

    @staticmethod
    def _read_outputs(payload, output_types, output_shapes):
        """The general reading of a predict answer (what the simdjson reader declines)."""
        try:
            outputs = loads(payload)["outputs"]
        except (ValueError, TypeError, KeyError):
            raise ServingError("INTERNAL", "the response has no 'outputs'") from None
        if len(output_types) == 1:
            outputs = {next(iter(output_types)): outputs}
        elif not isinstance(outputs, dict):
            raise ServingError("INTERNAL", "expected an object of outputs in the response")
        return {alias: _restore_empty_dims(json_to_numpy(value, output_types.get(alias, "")),
                                           output_shapes.get(alias))
                for alias, value in outputs.items()}


def _failure(error):
    """What went wrong with a request that got no (whole) answer, in words."""
    if isinstance(error, aiohttp.ServerDisconnectedError):
        return "the server closed the connection before answering"
    if isinstance(error, aiohttp.ClientPayloadError) and isinstance(
            error.__cause__, ContentLengthError):
        return "the server closed the connection before the answer's end"
    if isinstance(error, aiohttp.ClientResponseError):
        return f"a malformed HTTP answer: {error.message}"
    if isinstance(error, aiohttp.ClientPayloadError):
        return f"a malformed HTTP answer: {error}"
    return f"{type(error).__name__}: {error}"
