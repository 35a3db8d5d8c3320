"""The supervised Brier rewards: B on the stated P, BP on the prior and the stated P."""
from __future__ import annotations

import numpy as np

from . import reward


@reward("B", needs=("stated", "y"))
def brier_B(stated, y, **_) -> np.ndarray:
    """B (supervised): −(y − stated P)²."""
    return -((y - stated) ** 2)


# BP reads the posterior only to be masked with it, as A reads stated P.
@reward("BP", needs=("prior", "posterior", "stated", "y"))
def brier_prior_posterior_BP(prior, stated, y, **_) -> np.ndarray:
    """BP: −(y − prior)² − (y − stated P)² — calibrates both the early and the final belief."""
    return -((y - prior) ** 2) - (y - stated) ** 2
