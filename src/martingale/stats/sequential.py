"""Deciding in looks: a finding may be tested again after seeds or held-out questions are added, so
each look is tested at a nominal level that keeps the error over all of its looks at α (optional
stopping at the same 5% at every look would not). The plan — how many looks at most, the boundary —
is declared before the first look (conf/decide.yaml).

- ``pocock``: the same nominal level at every look, 2·(1 − Φ(c)) with c the Pocock constant for L
  looks at equal steps of information (Pocock 1977, Biometrika 64; Jennison & Turnbull 2000,
  *Group Sequential Methods*, Table 2.1: c = 2.289 for 3 looks, 0.0221 a look), computed here by
  the recursive integration of Armitage, McPherson & Rowe (1969);
- ``bonferroni``: α / L at every look, valid whatever a look adds.

A directional verdict at a look needs its CI at level 1 − α' to exclude 0, a null's to lie inside
its margin (equivalence), with α' the nominal level; its p is reported adjusted, min(1, p·α/α'),
so Benjamini–Hochberg across the table reads every finding on the same scale.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

import numpy as np

from .crossed import half_width
from .replicates import stats

BOUNDARIES = ("pocock", "bonferroni")


def _pdf(x: np.ndarray) -> np.ndarray:
    """The standard normal density (numpy's, without scipy's per-call overhead)."""
    return np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


@lru_cache(maxsize=None)
def crossing_probability(c: float, looks: int, grid: int = 401) -> float:
    """P(max_j |Z_j| ≥ c) over ``looks`` looks at equal steps of information, Z_j = S_j/√j the
    standardised sums of independent N(0, 1) steps: 1 − the mass the recursion keeps inside ±c√j."""
    step = 2 * c * math.sqrt(looks) / (grid - 1)
    x: Optional[np.ndarray] = None         # the previous look's grid, its weights and the paths' density there
    w: Optional[np.ndarray] = None
    density: Optional[np.ndarray] = None
    inside = 1.0
    for j in range(1, looks + 1):
        bound = c * math.sqrt(j)
        nxt = np.linspace(-bound, bound, max(3, int(2 * bound / step) | 1))
        dens = _pdf(nxt) if x is None or w is None or density is None else _pdf(nxt[:, None] - x[None, :]) @ (density * w)
        w = np.full(len(nxt), nxt[1] - nxt[0])
        w[0] = w[-1] = (nxt[1] - nxt[0]) / 2        # trapezoid
        x, density = nxt, dens
        inside = float(density @ w)
    return 1.0 - inside


@lru_cache(maxsize=None)
def pocock_constant(looks: int, alpha: float = 0.05) -> float:
    """The c with P(max_j |Z_j| ≥ c) = α over ``looks`` equally spaced looks (bisection)."""
    lo, hi = float(stats.norm.ppf(1 - alpha / 2)), float(stats.norm.ppf(1 - alpha / (2 * looks)))
    for _ in range(32):                                   # to ~1e-9
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if crossing_probability(mid, looks) > alpha else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class Boundary:
    """How a finding is tested at each of at most ``looks`` looks, with ``alpha`` over them all."""
    looks: int = 1
    alpha: float = 0.05
    rule: str = "pocock"

    def nominal(self) -> float:
        """The two-sided level α' each look is tested at (α itself for a single look)."""
        if self.looks == 1:
            return self.alpha
        if self.rule == "bonferroni":
            return self.alpha / self.looks
        return 2 * (1 - float(stats.norm.cdf(pocock_constant(self.looks, self.alpha))))

    def level(self) -> float:
        """The confidence level of a look's CI: 1 − α'."""
        return 1 - self.nominal()

    def adjusted(self, p: float) -> float:
        """A look's p on the scale of α: min(1, p·α/α')."""
        return min(1.0, p * self.alpha / self.nominal())





def reachable_half_width(c, max_seeds: int, max_scale: float) -> float:
    """The narrowest crossed half-width a finding could reach within the plan, at its current
    variance components and its look's level: up to ``max_seeds`` seeds and ``max_scale`` × its
    look's held-out questions (the draws the plan has left to pool: its draws / the look's; 1 where
    the look pools them all or the questions cannot be redrawn)."""
    scales = sorted({1.0, float(max_scale)})
    return min(half_width(c.var_seed, c.var_shared, c.var_residual, k, c.n_questions, c.level, scale)
               for k in range(c.k, max(c.k, max_seeds) + 1) for scale in scales)


def futility(c, target: float, max_seeds: int, max_scale: float = 1.0) -> str | None:
    """Why a finding cannot be decided within the plan at its current estimate, or None: even its
    narrowest reachable half-width is not under ``target`` (|θ̂| for a direction, |m − |θ̂|| for a null)."""
    if not c.crossed:
        return None
    best = reachable_half_width(c, max_seeds, max_scale)
    if best < target:
        return None
    more = f" and {max_scale:g}× the questions" if max_scale > 1 else ""
    return f"undecidable within {max_seeds} seeds{more}: |θ̂| {abs(c.estimate):.3g} against a half-width of {best:.2g}"
__all__ = ["BOUNDARIES", "Boundary", "crossing_probability", "futility", "pocock_constant", "reachable_half_width"]
