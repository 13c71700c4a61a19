"""The C allocator's side of bounded memory (glibc; a no-op elsewhere).

Python frees a large request's objects, but glibc keeps the freed pages in the arena of the
thread that used them, and requests decoded in several threads spread those pages over many
arenas (glibc allows 8 per core). :func:`limit_arenas` caps the arenas, as ``MALLOC_ARENA_MAX``
would for a server started without it: over a stream of large requests resident memory then
swings in one band; of two runs without the cap, one kept climbing
(``benchmarks/outputs/serving_memory/``).
"""

import ctypes
import ctypes.util

M_ARENA_MAX = -8  # mallopt parameter (malloc.h)


def limit_arenas(count):
    """At most ``count`` malloc arenas from now on; True where the allocator took it."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        return libc.mallopt(M_ARENA_MAX, int(count)) == 1
    except (OSError, AttributeError):  # not glibc: nothing to tune
        return False
