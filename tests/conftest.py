import ctypes
import ctypes.util
import gc
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _seed_and_policy():
    """Each test starts from a fixed seed and the float32 policy."""
    keras.utils.set_random_seed(1234)
    keras.mixed_precision.set_global_policy("float32")
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


_LIBC = ctypes.CDLL(ctypes.util.find_library("c")) if ctypes.util.find_library("c") else None
# GLOMO_TEST_MEMORY_LOG=FILE: one line per test module, its resident memory after it ran.
_MEMORY_LOG = os.environ.get("GLOMO_TEST_MEMORY_LOG")


def _resident_mib():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


@pytest.fixture(autouse=True, scope="module")
def _memory_back_after_each_module(request):
    """After a test module (and its fixtures) ends, what it freed goes back to the system:
    the modules' models and datasets are collected and the C heap trimmed, so that the suite's
    resident memory is that of its largest module, not the sum of every module's leftovers."""
    yield
    gc.collect()
    if _LIBC is not None and hasattr(_LIBC, "malloc_trim"):
        _LIBC.malloc_trim(0)
    if _MEMORY_LOG and os.path.exists("/proc/self/statm"):
        with open(_MEMORY_LOG, "a") as log:
            log.write(f"{_resident_mib():.0f} MiB after {request.node.nodeid}\n")
