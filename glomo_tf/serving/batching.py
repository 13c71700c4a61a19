"""Server-side batching: concurrent requests for the same signature run as one batch.

The counterpart of TF Serving's ``--enable_batching`` with a ``--batching_parameters_file``
(``max_batch_size``, ``batch_timeout_micros``, ``num_batch_threads``, ``max_enqueued_batches``).
A request joins a queue keyed by its signature and by the dtypes and shapes of its inputs apart
from dimension 0; a batch thread takes the oldest queue, waits until it holds ``max_batch_size``
rows or its first request is ``batch_timeout_micros`` old, concatenates the inputs along
dimension 0, runs the signature once and splits every output back by rows.

Merging is only done where it cannot change a result's shape (see
:attr:`glomo_tf.serving.servables.Signature.mergeable`), or where the result can be cut back to the
shape it would have had alone (a GLoMo text signature, whose outputs are padded to the longest
text: :attr:`~glomo_tf.serving.servables.Signature.pads_to_longest`); other requests run alone, in
the thread that received them. If a merged run fails, or an output does not have one row per
input row, each request of that batch is run again on its own, so one bad request cannot fail its
neighbours.
"""

import threading
import time

import numpy as np

from glomo_tf.serving.errors import ServingError


def batch_rows(signature, inputs):
    """Rows of a mergeable request (all inputs agree on dimension 0), else None. A GLoMo text
    signature's requests merge too: their outputs are cut back to their own length."""
    if not (signature.mergeable or signature.pads_to_longest):
        return None
    sizes = {value.shape[0] for value in inputs.values()}
    return sizes.pop() if len(sizes) == 1 else None


class _Task:
    __slots__ = ("inputs", "rows", "event", "done", "finished", "result", "error", "cancelled",
                 "enqueued")

    def __init__(self, inputs, rows, done=None):
        self.inputs = inputs
        self.rows = rows
        self.event = None if done is not None else threading.Event()
        self.done = done  # called with (result, error) instead of setting the event
        self.finished = False
        self.result = None
        self.error = None
        self.cancelled = False
        self.enqueued = time.monotonic()

    def finish(self):
        self.finished = True
        if self.done is not None:
            done, self.done = self.done, None  # its caller's objects are not kept by the task
            done(self.result, self.error)
        else:
            self.event.set()


class _Queues:
    """The tasks waiting to be batched, one queue per signature and input layout (oldest
    first), and the lock and condition the batch threads wait on."""

    def __init__(self, max_batch_size, timeout, max_enqueued_batches):
        self.max_batch_size = max_batch_size
        self.timeout = timeout
        self.max_enqueued_batches = max_enqueued_batches
        self.queues = {}  # key -> [task, ...]
        self.cv = threading.Condition()
        self.stopped = False

    def put(self, signature, task):
        """Queues ``task`` (UNAVAILABLE when its queue is full or the batcher stopped)."""
        key = (signature, tuple(sorted((name, value.dtype.str, value.shape[1:])
                                       for name, value in task.inputs.items())))
        with self.cv:
            if self.stopped:
                raise ServingError("UNAVAILABLE", "the server is shutting down")
            queue = self.queues.setdefault(key, [])
            queued_rows = sum(t.rows for t in queue) + task.rows
            if -(-queued_rows // self.max_batch_size) > self.max_enqueued_batches:
                raise ServingError("UNAVAILABLE", "The batch scheduling queue to which this task "
                                   "was submitted is full; retry later")
            queue.append(task)
            if self.timeout:  # a batch thread may be waiting for its own batch to fill
                self.cv.notify_all()
            else:  # every waiter is an idle batch thread: one is enough
                self.cv.notify()

    def count(self):
        with self.cv:
            return sum(len(queue) for queue in self.queues.values())

    def stop(self):
        with self.cv:
            self.stopped = True
            self.cv.notify_all()

    def take(self):
        """Block until a batch is due; returns (signature, tasks) or None when stopped."""
        with self.cv:
            while True:
                while not self.stopped and not self.queues:
                    self.cv.wait()
                if not self.queues:
                    return None
                key = min(self.queues, key=lambda k: self.queues[k][0].enqueued)
                self._wait_until_due(key)
                queue = self.queues.get(key)
                if not queue:
                    continue  # another batch thread took it
                tasks = _first_tasks(queue, self.max_batch_size)
                if not queue:
                    del self.queues[key]
                if tasks:
                    return key[0], tasks

    def _wait_until_due(self, key):
        """Under the lock: until the queue holds a full batch or its first task has waited
        ``timeout`` seconds (or the queue was taken, or the batcher stopped)."""
        deadline = self.queues[key][0].enqueued + self.timeout
        while not self.stopped:
            queue = self.queues.get(key)
            remaining = deadline - time.monotonic()
            if not queue or remaining <= 0 or sum(t.rows for t in queue) >= self.max_batch_size:
                return
            self.cv.wait(remaining)


class Batcher:
    """Merges concurrent requests; :meth:`run` is a drop-in for ``signature.run(inputs)``.

    Args:
        max_batch_size: most rows in one merged batch (a larger request runs alone).
        batch_timeout_micros: how long the first request of a batch may wait for others.
        num_batch_threads: threads running batches.
        max_enqueued_batches: batches' worth of rows that may wait per queue before requests
            are refused with UNAVAILABLE.
        metrics: a :class:`~glomo_tf.serving.monitoring.Metrics` given each batch's rows.
    """

    def __init__(self, max_batch_size=32, batch_timeout_micros=0, num_batch_threads=2,
                 max_enqueued_batches=100, metrics=None):
        if max_batch_size < 1 or num_batch_threads < 1 or max_enqueued_batches < 1:
            raise ValueError("max_batch_size, num_batch_threads and max_enqueued_batches must "
                             "be at least 1")
        if batch_timeout_micros < 0:
            raise ValueError("batch_timeout_micros must be at least 0")
        self.max_batch_size = max_batch_size
        self.metrics = metrics
        self.stats = {"batches": 0, "merged_batches": 0, "requests": 0, "largest_batch": 0}
        self._queues = _Queues(max_batch_size, batch_timeout_micros / 1e6, max_enqueued_batches)
        self._threads = [threading.Thread(target=self._work, name=f"glomo-serve-batch-{i}",
                                          daemon=True) for i in range(num_batch_threads)]
        for thread in self._threads:
            thread.start()

    def run(self, signature, inputs, timeout=None):
        """Run ``signature`` on ``inputs``, merged with concurrent requests where that is safe.

        Raises:
            ServingError: the signature's own errors; DEADLINE_EXCEEDED after ``timeout`` seconds;
                UNAVAILABLE when the queue is full or the batcher is stopped.
        """
        task = self.submit(signature, inputs)
        if task is None:
            return signature.run(inputs)
        if not task.event.wait(timeout):
            task.cancelled = True
            raise ServingError("DEADLINE_EXCEEDED", f"the request was not served within "
                               f"{timeout:.3f} s")
        if task.error is not None:
            raise task.error
        return task.result

    def submit(self, signature, inputs, done=None):
        """Queue ``signature`` on ``inputs`` without waiting: a batch thread calls ``done(result,
        error)`` when its batch is done (``error`` a :class:`ServingError`, else None).

        Returns the queued task (setting its ``cancelled`` keeps it from being run if it is
        still queued), or None for a request that cannot be merged: :meth:`run` runs those in
        the caller's thread, and so must the caller.

        Raises:
            ServingError: UNAVAILABLE when the queue is full or the batcher is stopped.
        """
        rows = batch_rows(signature, inputs)
        if rows is None or rows >= self.max_batch_size:
            return None
        task = _Task(inputs, rows, done)
        self._queues.put(signature, task)
        return task

    def queued_requests(self):
        """Requests waiting in every queue now."""
        return self._queues.count()

    def stop(self):
        self._queues.stop()
        for thread in self._threads:
            thread.join(timeout=30)

    # -- batch threads
    def _work(self):
        while True:
            taken = self._queues.take()
            if taken is None:
                return
            signature, tasks = taken
            try:
                self._execute(signature, tasks)
            except BaseException as error:  # never leave a caller waiting
                for task in tasks:
                    if not task.finished:
                        task.error = ServingError("INTERNAL", f"batch failed: {error!r}")
                        task.finish()

    def _execute(self, signature, tasks):
        rows = sum(task.rows for task in tasks)
        with self._queues.cv:
            self.stats["batches"] += 1
            self.stats["requests"] += len(tasks)
            self.stats["merged_batches"] += len(tasks) > 1
            self.stats["largest_batch"] = max(self.stats["largest_batch"], rows)
        if self.metrics is not None:
            self.metrics.record_batch(rows)
        if len(tasks) > 1 and _run_merged(signature, tasks, rows):
            return
        for task in tasks:  # alone, or the merged run could not be split back
            try:
                task.result = signature.run(task.inputs)
            except ServingError as error:
                task.error = error
            task.finish()


def _first_tasks(queue, max_rows):
    """Takes the oldest tasks of ``queue`` (the cancelled ones dropped) holding at most
    ``max_rows`` rows, or the first task alone."""
    tasks, rows = [], 0
    while queue and (not tasks or rows + queue[0].rows <= max_rows):
        task = queue.pop(0)
        if not task.cancelled:
            tasks.append(task)
            rows += task.rows
    return tasks


def _run_merged(signature, tasks, rows):
    """Runs ``tasks`` as one batch of ``rows`` rows and finishes each with its own rows of the
    outputs; False (nothing finished) when the run fails or an output has not one row per
    input row."""
    merged = {name: np.concatenate([task.inputs[name] for task in tasks])
              for name in tasks[0].inputs}
    try:
        outputs = signature.run(merged)
    except ServingError:
        return False
    if not all(np.ndim(v) >= 1 and v.shape[0] == rows for v in outputs.values()):
        return False
    start = 0
    for task in tasks:
        stop = start + task.rows
        result = {name: value[start:stop] for name, value in outputs.items()}
        task.result = signature.cut_to_own_length(result) if signature.pads_to_longest \
            else result
        start = stop
        task.finish()
    return True
