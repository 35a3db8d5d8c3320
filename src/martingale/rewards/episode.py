"""The instructor's episode rewards (stages/body/instructor.py): the human's beliefs across an
episode's turns. x_t = P_{t−1} − ½ (where the human stood), δ_t = P_t − P_{t−1} (how it moved at turn t)."""
from __future__ import annotations

import numpy as np

from . import reward
from .fit import batch_line


def _x_delta(trajectory: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return trajectory[:, :-1] - 0.5, trajectory[:, 1:] - trajectory[:, :-1]


@reward("episode_ms", needs=("prior", "posterior"), params=("lam_ms", "meta_size"))
def episode_ms(prior, posterior, *, lam_ms: float, meta_size: int, **_) -> np.ndarray:
    """episode_ms: −λ·|MS_ep| for every episode of a meta-episode (consecutive ``meta_size``
    episodes), MS_ep = the OLS slope of (last − first) on (first − ½) over the meta-episode's
    episodes (an undefined slope, fewer than 2 distinct first beliefs, scores 0)."""
    out = np.zeros_like(prior, dtype=float)
    for start in range(0, len(prior), int(meta_size)):
        chunk = slice(start, start + int(meta_size))
        slope = batch_line(prior[chunk] - 0.5, posterior[chunk] - prior[chunk])[1]
        out[chunk] = -lam_ms * abs(slope)
    return out


@reward("product", needs=("prior", "posterior"), params=("lam_ms",))
def product(prior, posterior, *, lam_ms: float, **_) -> np.ndarray:
    """product: −λ·Δ·predicted_bias(prior), Δ = last − first P, predicted_bias = the in-batch OLS
    fit of Δ on the first P (A's martingale term over an episode)."""
    delta = posterior - prior
    a, b = batch_line(prior, delta)
    return -lam_ms * delta * (a + b * prior)


@reward("symabs", needs=("trajectory",), params=("lam_ms",))
def symabs(trajectory, *, lam_ms: float, **_) -> np.ndarray:
    """symabs: −λ·Σ_t |x_t·δ_t| — any move the human's position predicts, either way, costs."""
    x, d = _x_delta(trajectory)
    return -lam_ms * np.abs(x * d).sum(axis=1)


@reward("hinge", needs=("trajectory", "y"), params=("lam_ms", "lam_brier"))
def hinge(trajectory, y, *, lam_ms: float, lam_brier: float, **_) -> np.ndarray:
    """hinge: −λ·Σ_t max(0, x_t·δ_t) − λ_B·(y − P_T)² — only moves further the way the human
    leans cost (entrenchment), plus the Brier of its last P (the research log's loss, as a reward)."""
    x, d = _x_delta(trajectory)
    return -lam_ms * np.maximum(0.0, x * d).sum(axis=1) - lam_brier * (y - trajectory[:, -1]) ** 2
