"""The label-free martingale rewards: A and A_slope, against the in-batch OLS fit of the update on
the prior (fit.batch_line)."""
from __future__ import annotations

import numpy as np

from . import reward
from .fit import batch_line


# A reads stated P only to be masked with it: an answer that states no P scores nothing.
@reward("A", needs=("prior", "posterior", "stated"), params=("info_coef", "info_eps"))
def martingale_A(prior, posterior, *, info_coef: float, info_eps: float, **_) -> np.ndarray:
    """A (label-free): −Δ·Δ̂(prior) − info_coef·relu(info_eps − |Δ|), Δ = posterior − prior.

    Δ̂ is the in-batch OLS regressor of the update on the prior: the reward penalises the part of
    the update the prior predicts (driving MS → 0); the info term penalises not updating at all.
    """
    delta = posterior - prior
    a, b = batch_line(prior, delta)
    predicted = a + b * prior
    info = info_coef * np.maximum(0.0, info_eps - np.abs(delta))
    return -delta * predicted - info


@reward("A_slope", needs=("prior", "posterior", "stated"), params=("info_coef", "info_eps"))
def martingale_A_slope(prior, posterior, *, info_coef: float, info_eps: float, **_) -> np.ndarray:
    """A_slope: −Δ·b·(prior − p̄) − info_coef·relu(info_eps − |Δ|), b the in-batch OLS slope of Δ
    on the prior, p̄ the batch's mean prior: A without its mean-update term. A's Δ̂ = a + b·prior is
    mean(Δ) + b·(prior − p̄); this keeps only the part the prior predicts beyond the batch's mean
    update, the control that says how much of A's effect is its mean term (scripts/reward_trace.py).
    """
    delta = posterior - prior
    b = batch_line(prior, delta)[1]
    ok = np.isfinite(prior)
    centred = prior - (prior[ok].mean() if ok.any() else 0.0)
    info = info_coef * np.maximum(0.0, info_eps - np.abs(delta))
    return -delta * b * centred - info
