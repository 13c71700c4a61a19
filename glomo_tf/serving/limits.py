"""What one request may ask of the server, and how many requests it serves at once.

:class:`RequestLimits` is checked on the request as it arrives, before any array is built: the
body's bytes (REST) or message's bytes (gRPC), the dimensions of a tensor, the elements of a
request, and the bytes of one string. A request over a limit is a client error: REST answers
413 with TF Serving's ``{"error": ...}`` body (400 for too many dimensions), gRPC
RESOURCE_EXHAUSTED (INVALID_ARGUMENT for dimensions).

:class:`Admission` bounds the work in flight: at most ``workers`` requests are read and decoded
at once (the part whose memory a client controls), at most ``max_queued`` more wait for a turn,
and any further request is refused with UNAVAILABLE (HTTP 503) at once, as TF Serving's batching
queue refuses a task when it is full. Memory then grows with ``workers``, not with the number of
clients. A decoded request runs without holding a turn, so that the batcher (which bounds its
own queue) can merge more requests than there are workers.
"""

import asyncio
import collections
import contextlib
import dataclasses
import threading
import time

from glomo_tf.serving.errors import ServingError, invalid


def _limit(default, help):
    """A :class:`RequestLimits` field; ``glomo serve`` makes it the flag ``--<field name>`` with
    this default and help (the error messages name that flag)."""
    return dataclasses.field(default=default, metadata={"help": help})


@dataclasses.dataclass(frozen=True)
class RequestLimits:
    """Per-request limits; the defaults suit a 2-core machine with a few GiB for the server.

    Args:
        max_request_bytes: largest REST body / gRPC message.
        max_request_elements: most tensor elements in one request, over all its inputs (a
            JSON number takes about 30 bytes once parsed, an array element 1-8).
        max_request_rank: most dimensions of one tensor (how deep JSON lists may nest).
        max_text_bytes: largest string element (UTF-8 bytes), e.g. one text to tokenise.
    """

    max_request_bytes: int = _limit(64 << 20, "largest REST body / gRPC message accepted")
    max_request_elements: int = _limit(
        1 << 22, "most tensor elements in one request, over all its inputs")
    max_request_rank: int = _limit(32, "most dimensions of a request tensor (JSON list nesting)")
    max_text_bytes: int = _limit(1 << 20, "largest string element of a request, in UTF-8 bytes")

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"--{field.name} must be a positive integer, got {value!r}")
        if self.max_request_rank > 64:
            raise ValueError(f"--max_request_rank must be at most 64 (NumPy's limit), got "
                             f"{self.max_request_rank}")

    def check_rank(self, rank, what="the value"):
        """INVALID_ARGUMENT when a tensor has more than ``max_request_rank`` dimensions."""
        if rank > self.max_request_rank:
            raise invalid(f"{what} has {rank} dimensions (lists nested {rank} deep); at most "
                          f"{self.max_request_rank} are accepted (--max_request_rank)")

    def check_elements(self, elements, what="the request"):
        """RESOURCE_EXHAUSTED (HTTP 413) when ``elements`` exceeds ``max_request_elements``."""
        if elements > self.max_request_elements:
            raise too_large(f"{what} holds {elements} elements, more than the "
                            f"{self.max_request_elements} this server accepts per request "
                            "(--max_request_elements)")

    def check_text(self, size, what="a string"):
        """RESOURCE_EXHAUSTED (HTTP 413) when a string element is over ``max_text_bytes``."""
        if size > self.max_text_bytes:
            raise too_large(f"{what} of {size} bytes exceeds the limit of "
                            f"{self.max_text_bytes} bytes per string (--max_text_bytes)")


def too_large(message):
    return ServingError("RESOURCE_EXHAUSTED", message, http_status=413)


class Admission:
    """At most ``workers`` requests at once, at most ``max_queued`` waiting; the rest refused.

    Args:
        workers: requests served at once.
        max_queued: requests that may wait for a turn; one more is refused with UNAVAILABLE.
        name: how errors name this front end (``"REST"``, ``"gRPC"``).
        flag: the flag that sets ``workers``, named in the refusal.
    """

    def __init__(self, workers, max_queued, name="", flag=""):
        if workers < 1 or max_queued < 0:
            raise ValueError("workers must be at least 1 and max_queued at least 0")
        self.workers = workers
        self.max_queued = max_queued
        self.name = name
        self.flag = flag
        self._cv = threading.Condition()
        self.running = 0
        self.waiting = 0
        self.refused = 0

    def busy(self):
        """The refusal of a request when every turn is taken and the queue is full."""
        return ServingError("UNAVAILABLE", f"the server is busy: {self.running} {self.name} "
                            f"requests running and {self.waiting} waiting (the most it queues); "
                            f"retry later, or start it with a larger "
                            f"{self.flag or 'worker count'}")

    def late(self, timeout):
        """The refusal of a request that waited ``timeout`` seconds for a turn."""
        return ServingError("DEADLINE_EXCEEDED", f"the request waited {timeout:.3f} s for a "
                            "turn and was not served")

    def _take(self):
        """Under the lock: True with a turn taken; False with the caller counted as waiting.

        Raises:
            ServingError: UNAVAILABLE (:meth:`busy`) when the queue is full.
        """
        if self.running < self.workers:
            self.running += 1
            return True
        if self.waiting >= self.max_queued:
            self.refused += 1
            raise self.busy()
        self.waiting += 1
        return False

    def take(self):
        """A turn without waiting, for a caller that keeps its own queue (an event loop): True
        when one was free (held until :meth:`give_back`); False when every turn is taken, the
        caller then counted as waiting until it calls :meth:`leave_queue`.

        Raises:
            ServingError: UNAVAILABLE (:meth:`busy`) when the queue is full.
        """
        with self._cv:
            return self._take()

    def leave_queue(self):
        """A caller :meth:`take` counted as waiting no longer waits."""
        with self._cv:
            self.waiting -= 1

    def give_back(self):
        """Give a turn back."""
        with self._cv:
            self.running -= 1
            self._cv.notify()

    @contextlib.contextmanager
    def slot(self, timeout=None):
        """Holds one of the ``workers`` turns for the ``with`` block.

        Raises:
            ServingError: UNAVAILABLE when every turn is taken and the queue is full;
                DEADLINE_EXCEEDED when no turn came within ``timeout`` seconds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            if not self._take():
                try:
                    while self.running >= self.workers:
                        remaining = None if deadline is None else deadline - time.monotonic()
                        if remaining is not None and remaining <= 0:
                            raise self.late(timeout)
                        self._cv.wait(remaining)
                finally:
                    self.waiting -= 1
                self.running += 1
        try:
            yield
        finally:
            self.give_back()


class LoopTurns:
    """An :class:`Admission`'s turns for coroutines on one event loop: a request waits for its
    turn on a future, in the order it came, without a thread."""

    def __init__(self, admission):
        self.admission = admission
        self._waiters = collections.deque()

    @contextlib.asynccontextmanager
    async def turn(self, timeout=None):
        """Holds one turn for the ``async with`` block.

        Raises:
            ServingError: UNAVAILABLE when every turn is taken and the queue is full;
                DEADLINE_EXCEEDED when no turn came within ``timeout`` seconds.
        """
        if not self.admission.take():
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(asyncio.shield(waiter), timeout)
            except (asyncio.TimeoutError, asyncio.CancelledError) as stopped:
                if waiter.done():  # the turn came as the wait ended: hand it on
                    self._give_back()
                else:
                    waiter.cancel()
                    self._waiters.remove(waiter)
                    self.admission.leave_queue()
                if isinstance(stopped, asyncio.CancelledError):
                    raise
                raise self.admission.late(timeout) from None
        try:
            yield
        finally:
            self._give_back()

    def _give_back(self):
        self.admission.give_back()
        while self._waiters and self.admission.running < self.admission.workers:
            waiter = self._waiters.popleft()
            self.admission.leave_queue()
            self.admission.take()  # a turn is free: held from here by the waiter
            waiter.set_result(None)
