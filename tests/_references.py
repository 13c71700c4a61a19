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


def np_entmax(row, alpha):
    """alpha-entmax of one row, its threshold found by Brent's root finder (scipy), in float64.

    ``p_i = max((alpha - 1) x_i - tau, 0)^(1 / (alpha - 1))`` with ``sum p = 1``; entries of
    ``-inf`` get 0.
    """
    from scipy.optimize import brentq

    z = (alpha - 1.0) * np.asarray(row, np.float64)
    ok = np.isfinite(z)

    def weights(tau):
        return np.where(ok, np.maximum(np.where(ok, z, 0.0) - tau, 0.0), 0.0) ** (1 / (alpha - 1))

    top = z[ok].max()
    tau = brentq(lambda t: weights(t).sum() - 1.0, top - 1.0, top, xtol=1e-14, rtol=1e-14)
    return weights(tau)
