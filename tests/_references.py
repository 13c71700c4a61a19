"""NumPy references shared by several test modules, written from the papers' equations."""

import numpy as np


def np_entmax15(row, iterations=200):
    """1.5-entmax of one row by bisection on tau (not the sort the library uses).

    ``p_i = max(x_i / 2 - tau, 0)^2`` with ``sum p = 1``; the sum falls as ``tau`` grows and is at
    least 1 at ``tau = max/2 - 1`` and 0 at ``tau = max/2``. Entries of ``-inf`` get 0.
    """
    half = np.asarray(row, np.float64) / 2.0
    low, high = half.max() - 1.0, half.max()
    for _ in range(iterations):
        tau = (low + high) / 2.0
        if (np.maximum(half - tau, 0.0) ** 2).sum() >= 1.0:
            low = tau
        else:
            high = tau
    return np.maximum(half - low, 0.0) ** 2
