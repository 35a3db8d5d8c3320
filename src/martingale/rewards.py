"""Rewards as plain functions over a batch (TRL's shape): arrays in, one float per sample out.

Inputs are the elicited prior and posterior, the stated P and the label y; NaN marks a sample
whose number did not parse — its reward is NaN and the trainer gives it the worst advantage.
Add a reward: write a function with this signature and register it in REWARDS.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

Reward = Callable[..., np.ndarray]


def _ols(x: np.ndarray, d: np.ndarray) -> tuple[float, float]:
    """Intercept and slope of the in-batch OLS fit d ≈ a + b·x over the finite pairs."""
    ok = np.isfinite(x) & np.isfinite(d)
    if ok.sum() < 2 or np.ptp(x[ok]) == 0:
        return 0.0, 0.0
    b, a = np.polyfit(x[ok], d[ok], 1)
    return float(a), float(b)


def martingale_A(prior, posterior, stated, y, cfg: dict[str, Any]) -> np.ndarray:
    """A (label-free): −Δ·Δ̂(prior) − INFO_COEF·relu(INFO_EPS − |Δ|), Δ = posterior − prior.

    Δ̂ is the in-batch OLS regressor of the update on the prior: the reward penalises the part of
    the update the prior predicts (driving MS → 0); the info term penalises not updating at all.
    """
    delta = posterior - prior
    a, b = _ols(prior, delta)
    predicted = a + b * prior
    info = cfg["info_coef"] * np.maximum(0.0, cfg["info_eps"] - np.abs(delta))
    return -delta * predicted - info


def brier_B(prior, posterior, stated, y, cfg: dict[str, Any]) -> np.ndarray:
    """B (supervised): −(y − stated P)²."""
    return -((y - stated) ** 2)


def _z(r: np.ndarray) -> np.ndarray:
    sd = np.nanstd(r)
    return (r - np.nanmean(r)) / sd if sd > 0 else np.zeros_like(r)


def combined_C(prior, posterior, stated, y, cfg: dict[str, Any]) -> np.ndarray:
    """C: λ·z(A) + (1 − λ)·z(B), z = standardised within the batch."""
    lam = cfg["lam"]
    return lam * _z(martingale_A(prior, posterior, stated, y, cfg)) + (1 - lam) * _z(
        brier_B(prior, posterior, stated, y, cfg))


def brier_prior_posterior_BP(prior, posterior, stated, y, cfg: dict[str, Any]) -> np.ndarray:
    """BP: −(y − prior)² − (y − stated P)² — calibrates both the early and the final belief."""
    return -((y - prior) ** 2) - (y - stated) ** 2


REWARDS: dict[str, Reward] = {
    "A": martingale_A,
    "B": brier_B,
    "C": combined_C,
    "BP": brier_prior_posterior_BP,
}


def compute(name: str, prior, posterior, stated, y, cfg: dict[str, Any]) -> np.ndarray:
    """The named reward; NaN wherever an input it depends on is NaN."""
    args = [np.asarray(v, dtype=float) for v in (prior, posterior, stated, y)]
    with np.errstate(invalid="ignore"):
        r = REWARDS[name](*args, cfg)
    bad = np.isnan(args[2])
    if name != "B":
        bad |= np.isnan(args[0]) | np.isnan(args[1])
    return np.where(bad, np.nan, r)
