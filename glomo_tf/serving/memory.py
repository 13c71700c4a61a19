"""The C allocator's side of bounded memory (glibc; a no-op elsewhere).

Python frees a large request's objects, but glibc keeps the freed pages in the arena of the
thread that used them, and a server that reads each connection in a new thread spreads large
requests over many arenas: resident memory then grows with every large request although nothing
is kept (about 5 MB per million-id request here). :func:`limit_arenas` caps the arenas (as
``MALLOC_ARENA_MAX`` would, for a server started without it) and :func:`release_free_memory`
returns free pages to the system after a large request.
"""

import ctypes
import ctypes.util
import logging
import threading

log = logging.getLogger("glomo_tf.serving")
M_ARENA_MAX = -8  # mallopt parameter (malloc.h)
_LIBC = {"handle": None, "loaded": False}
_TRIM_LOCK = threading.Lock()


def _libc():
    if not _LIBC["loaded"]:
        _LIBC["loaded"] = True
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
            libc.malloc_trim.argtypes = [ctypes.c_size_t]
            _LIBC["handle"] = libc
        except (OSError, AttributeError):  # not glibc: nothing to tune
            _LIBC["handle"] = None
    return _LIBC["handle"]


def limit_arenas(count):
    """At most ``count`` malloc arenas from now on; True where the allocator took it."""
    libc = _libc()
    return bool(libc is not None and libc.mallopt(M_ARENA_MAX, int(count)) == 1)


def release_free_memory():
    """Give free heap pages back to the system (one caller at a time); True if any were."""
    libc = _libc()
    if libc is None:
        return False
    with _TRIM_LOCK:
        return bool(libc.malloc_trim(0))
