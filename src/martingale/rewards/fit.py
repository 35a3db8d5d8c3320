"""The rewards' in-batch line fit."""
from __future__ import annotations

import numpy as np


def batch_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(intercept, slope) of the OLS line of y on x over the finite pairs, (0, 0) for fewer than two
    or a constant x: the rewards' in-batch fit (A's Δ̂, episode MS). ``np.polyfit``, not
    ``stats.ols``: the two round differently in the last bits, and every trained stage's bytes
    follow this one."""
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 2 or np.ptp(x[ok]) == 0:
        return 0.0, 0.0
    b, a = np.polyfit(x[ok], y[ok], 1)
    return float(a), float(b)
