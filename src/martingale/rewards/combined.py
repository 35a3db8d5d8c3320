"""C: the martingale reward A and the Brier reward B mixed, each standardised within the batch."""
from __future__ import annotations

import numpy as np

from . import reward
from .brier import brier_B
from .martingale import martingale_A


def _z(r: np.ndarray) -> np.ndarray:
    """r standardised within the batch (NaN ignored); zeros when r has no spread."""
    sd = np.nanstd(r)
    return (r - np.nanmean(r)) / sd if sd > 0 else np.zeros_like(r)


@reward("C", needs=("prior", "posterior", "stated", "y"), params=("lam", "info_coef", "info_eps"))
def combined_C(prior, posterior, stated, y, *, lam: float, info_coef: float, info_eps: float) -> np.ndarray:
    """C: λ·z(A) + (1 − λ)·z(B), λ = lam, z = standardised within the batch."""
    a = martingale_A(prior, posterior, info_coef=info_coef, info_eps=info_eps)
    return lam * _z(a) + (1 - lam) * _z(brier_B(stated, y))
