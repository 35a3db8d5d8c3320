"""A finding decided over seeds: each seed's estimate with its question-bootstrap CI, combined with
the between-seed variance inside the combined CI, the p of its test, Benjamini–Hochberg q across
many findings, and how many seeds a finding would need to decide.

One training run is one draw: its CI resamples the held-out questions, not the training. k seeds
are k draws θ_i = θ + u_i + e_i, u_i ~ N(0, τ²) the training's noise, e_i ~ N(0, s_i²) the
questions'. ``combine`` is the random-effects estimate of θ (DerSimonian–Laird τ²) with the
Hartung–Knapp–Sidik–Jonkman interval: a t interval with k − 1 degrees of freedom on the weighted
spread of the seeds' estimates. With 3 seeds a normal (Wald) interval on the DL variance covers far
less than its level; HKSJ holds it (tests/test_replicates.py simulates both).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from ..core.lazy import module

stats = module("scipy.stats")   # imported on first use (martingale.core.lazy)
special = module("scipy.special")


MIN_SEEDS = 3           # fewer seeds: a trained finding is provisional
MAX_SEEDS_SHOWN = 100   # seeds_needed says "more" beyond this


@dataclass(frozen=True)
class Combined:
    """The seeds' combined estimate: ``estimate`` and its ``ci`` at ``level``, ``se`` and ``df`` (None:
    a normal interval), τ (the between-seed sd), k seeds, the two-sided p of θ = 0. A crossed
    estimate (stats/crossed.py) also holds its variance components, per seed: the training's
    (σ²_seed), the question noise every seed shares (σ²_shared) and each seed's own (σ²_residual),
    on ``n_questions`` questions (None: bounded from the seeds' own CIs)."""
    estimate: float
    ci: tuple[float, float]
    se: float
    df: Optional[float]
    tau: float
    k: int
    level: float
    var_seed: Optional[float] = None
    var_shared: Optional[float] = None
    var_residual: Optional[float] = None
    n_questions: Optional[int] = None

    def parts(self) -> tuple[float, float, float]:
        """(σ²_seed, σ²_shared, σ²_residual) of a crossed estimate; ValueError for one that is not."""
        if self.var_seed is None or self.var_shared is None or self.var_residual is None:
            raise ValueError("not a crossed estimate: it has no variance components")
        return self.var_seed, self.var_shared, self.var_residual

    @property
    def crossed(self) -> bool:
        """Whether the interval holds the questions' noise the seeds share (stats/crossed.py)."""
        return self.var_shared is not None

    def p_zero(self) -> float:
        """Two-sided p of θ = 0."""
        return _p_two_sided(self.estimate / self.se, self.df) if self.se > 0 else (0.0 if self.estimate else 1.0)

    def p_equivalent(self, margin: float) -> float:
        """Two one-sided tests of |θ| ≥ margin: the larger of the two p (small: θ is inside ±margin)."""
        if self.se <= 0:
            return 0.0 if abs(self.estimate) < margin else 1.0
        lower = 1 - _cdf((self.estimate + margin) / self.se, self.df)    # H0: θ ≤ −margin
        upper = _cdf((self.estimate - margin) / self.se, self.df)        # H0: θ ≥ +margin
        return max(lower, upper)


def _cdf(x: float, df: Optional[float]) -> float:
    return float(stats.norm.cdf(x) if df is None else stats.t.cdf(x, df))


def _quantile(q: float, df: Optional[float]) -> float:
    """The normal (df None) or t quantile: scipy.stats' ppf's own functions, without its per-call
    argument checks (~40 µs: the crossed interval's projections call it thousands of times)."""
    return float(special.ndtri(q) if df is None else special.stdtrit(df, q))


def _p_two_sided(z: float, df: Optional[float]) -> float:
    return float(2 * (stats.norm.sf(abs(z)) if df is None else stats.t.sf(abs(z), df)))


def se_from_ci(ci: Sequence[float], level: float = 0.95) -> float:
    """The standard error a (roughly normal) CI at ``level`` implies: its width / (2 z)."""
    return (float(ci[1]) - float(ci[0])) / (2 * _quantile((1 + level) / 2, None))


def combine(estimates: Sequence[float], ses: Sequence[float], level: float = 0.95) -> Combined:
    """Random-effects combination of per-seed estimates with standard errors ``ses``.

    τ² = max(0, (Q − (k − 1)) / (Σw − Σw²/Σw)), w_i = 1/s_i², Q = Σ w_i (θ_i − θ̄_w)²  (DerSimonian–Laird);
    θ̂ = Σ w*_i θ_i / Σ w*_i, w*_i = 1/(s_i² + τ²);
    se² = Σ w*_i (θ_i − θ̂)² / ((k − 1) Σ w*_i), CI = θ̂ ± t_{k−1} se  (Hartung–Knapp–Sidik–Jonkman).
    One seed: its estimate with the normal interval of its own se (τ unknown: 0).
    """
    k = len(estimates)
    if k == 0 or k != len(ses):
        raise ValueError(f"combine: {k} estimates and {len(ses)} standard errors")
    y = [float(v) for v in estimates]
    v = [max(float(s), 1e-12) ** 2 for s in ses]
    z = _quantile((1 + level) / 2, None)
    if k == 1:
        return Combined(y[0], (y[0] - z * math.sqrt(v[0]), y[0] + z * math.sqrt(v[0])), math.sqrt(v[0]), None,
                        0.0, 1, level)
    w = [1 / vi for vi in v]
    sw = sum(w)
    fixed = sum(wi * yi for wi, yi in zip(w, y)) / sw
    q = sum(wi * (yi - fixed) ** 2 for wi, yi in zip(w, y))
    # Σw − Σw²/Σw as Σ w_i·(Σ_{j≠i} w_j)/Σw: the same number, without the cancellation that made
    # it 0.0 (a ZeroDivisionError) when one seed's se is near 0 and its weight dwarfs the others'
    spread = sum(wi * sum(wj for j, wj in enumerate(w) if j != i) for i, wi in enumerate(w)) / sw
    tau2 = max(0.0, (q - (k - 1)) / spread)
    ws = [1 / (vi + tau2) for vi in v]
    sws = sum(ws)
    mu = sum(wi * yi for wi, yi in zip(ws, y)) / sws
    se = math.sqrt(sum(wi * (yi - mu) ** 2 for wi, yi in zip(ws, y)) / ((k - 1) * sws))
    t = _quantile((1 + level) / 2, k - 1)
    return Combined(mu, (mu - t * se, mu + t * se), se, k - 1, math.sqrt(tau2), k, level)


def bh_q(pvalues: Sequence[Optional[float]]) -> list[Optional[float]]:
    """Benjamini–Hochberg q of each p among those given (None: not tested, no q):
    q_(i) = min over j ≥ i of p_(j) · m / j, capped at 1."""
    tested = sorted((p, i) for i, p in enumerate(pvalues) if p is not None and math.isfinite(p))
    m = len(tested)
    out: list[Optional[float]] = [None] * len(pvalues)
    running = 1.0
    for rank in range(m, 0, -1):
        p, i = tested[rank - 1]
        running = min(running, p * m / rank)
        out[i] = running
    return out


def seeds_needed(estimates: Sequence[float], ses: Sequence[float], target: float,
                 level: float = 0.95) -> Optional[int]:
    """The fewest seeds whose combined CI half-width, t_{k−1} · σ/√k, would be under ``target``
    (|θ̂| to decide a direction; |margin − |θ̂|| for a null, inside or outside its margin), σ² the
    spread one seed's estimate has: the larger of the seeds' sample variance and their mean squared
    se. None: more than MAX_SEEDS_SHOWN, or no target left (a null whose estimate is at its margin)."""
    if target <= 0:
        return None
    y = [float(e) for e in estimates]
    within = sum(float(s) ** 2 for s in ses) / len(ses)
    spread = sum((v - sum(y) / len(y)) ** 2 for v in y) / (len(y) - 1) if len(y) > 1 else 0.0
    sigma = math.sqrt(max(spread, within))
    for k in range(2, MAX_SEEDS_SHOWN + 1):
        if _quantile((1 + level) / 2, k - 1) * sigma / math.sqrt(k) < target:
            return k
    return None


__all__ = ["Combined", "MIN_SEEDS", "bh_q", "combine", "se_from_ci", "seeds_needed"]
