"""A finding over seeds × questions, crossed: every seed of a run reads the same held-out questions,
so the seeds share their question-sampling error, and their spread cannot show it.

A seed's estimate θ_i is a statistic of its n questions; k seeds give θ_i = θ + u_i + q̄_i, u_i the
training's noise (variance σ²_seed), q̄_i the question error, whose covariance C across seeds the
records give: resample the questions jointly for every seed (``joint_cov``: the same resampled
questions for every seed and, for a paired effect, for child and parent). Its off-diagonal mean is
the question noise the seeds share (σ²_shared), the rest of its diagonal each seed's own
(σ²_residual: a question × seed interaction, sampling noise). The estimate is the seeds' mean
θ̂ = Σθ_i / k, and

    Var(θ̂) = σ²_seed / k + σ²_shared + σ²_residual / k,

the two-way crossed random-effects variance of a grand mean (Searle, Casella & McCulloch 1992,
"Variance Components", §4; Cameron, Gelbach & Miller 2011, "Robust inference with multiway
clustering"). The seeds' sample variance s² estimates σ²_seed + σ²_residual, so σ̂²_seed =
max(0, s² − σ̂²_residual) and Var = s²/k + σ̂²_shared, never below the question noise of θ̂ itself
(1ᵀC1 / k²). The interval is Banerjee's for a sum of two variance parts each on its own df, s²/k on
k − 1 and σ²_shared on n − 1: θ̂ ± √(t²_{k−1} s²/k + t²_{n−1} σ²_shared), never below its level
whatever their ratio (Banerjee 1960), where a Welch–Satterthwaite df from the estimated parts is
not.

Where a metric has no per-question records (``shared_bound``), C is bounded by the seeds' own
question CIs as if their errors were wholly shared (correlation 1, the most the questions can
share): never narrower than the truth, wider where the seeds' errors are partly their own.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Callable, Optional, Sequence

import numpy as np

from ..core.lazy import module
from .replicates import Combined, _quantile

optimize = module("scipy.optimize")   # imported on first use (martingale.core.lazy)

QUESTION_STREAM = 17   # the rng stream of the joint resampling: default_rng([QUESTION_STREAM, *seeds])


# ------------------------------------------------------------------------------- weighted statistics
# The joint bootstrap as weights: row b of W counts how often resample b drew each question, so
# every seed's statistic on resample b is a weighted statistic of its own columns (NaN: a question
# the seed did not parse, weight 0). W = 1 is the statistic itself.

def weighted_mean(w: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Σ w·v / Σ w over the questions where v is a number, for each row of weights w (B × n)."""
    has = np.isfinite(v)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (w @ np.where(has, v, 0.0)) / (w @ has.astype(float))


def weighted_moments(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, ...]:
    """(Σw, x̄, ȳ, Sxx, Sxy) per row of w over the questions where x and y are both numbers: the
    weighted (population) moments an OLS slope and a variance are made of."""
    has = np.isfinite(x) & np.isfinite(y)
    x0, y0, m = np.where(has, x, 0.0), np.where(has, y, 0.0), has.astype(float)
    sw = w @ m
    with np.errstate(invalid="ignore", divide="ignore"):
        mx, my = (w @ x0) / sw, (w @ y0) / sw
        sxx = (w @ (x0 * x0)) / sw - mx * mx
        sxy = (w @ (x0 * y0)) / sw - mx * my
    return sw, mx, my, sxx, sxy


def weighted_slope(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """OLS slope of y on x, cov_w(x, y) / var_w(x), per row of w; NaN for a constant x."""
    _, _, _, sxx, sxy = weighted_moments(w, x, y)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sxx > 0, sxy / np.where(sxx > 0, sxx, 1.0), np.nan)


def resample_weights(n: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """B × n counts: resample b draws n questions with replacement, the same draw for every seed."""
    idx = rng.integers(0, n, size=(n_resamples, n)) + n * np.arange(n_resamples)[:, None]
    return np.bincount(idx.ravel(), minlength=n_resamples * n).reshape(n_resamples, n).astype(float)


TAILS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.0125, 0.025, 0.05)   # the seeds' mean's resampled quantiles kept


def joint_draws(statistic: Callable[[np.ndarray], np.ndarray], weights: np.ndarray) -> Optional[np.ndarray]:
    """B × k: each seed's statistic under each of the questions' joint resamples (``weights``:
    ``resample_weights``). None when it is undefined (NaN) in more than 1% of the resamples; those
    that are are dropped."""
    draws = np.asarray(statistic(weights), dtype=float)
    ok = np.isfinite(draws).all(axis=1)
    if ok.sum() < 0.99 * len(draws) or ok.sum() < 3:
        return None
    return draws[ok]


def joint_cov(statistic: Callable[[np.ndarray], np.ndarray], weights: np.ndarray) -> Optional[np.ndarray]:
    """The k × k covariance of the seeds' estimates under questions resampled jointly across seeds."""
    draws = joint_draws(statistic, weights)
    return None if draws is None else np.atleast_2d(np.cov(draws, rowvar=False, ddof=1))


def mean_tails(draws: np.ndarray) -> list[list[float]]:
    """[[p, q_p, q_{1−p}] for p in TAILS]: the quantiles of the seeds' mean under the joint
    resamples, the percentile interval of what the questions alone allow at every level 1 − 2p."""
    means = draws.mean(axis=1)
    return [[p, float(np.quantile(means, p)), float(np.quantile(means, 1 - p))] for p in TAILS]


def percentile_se(tails: Optional[Sequence[Sequence[float]]], mu: float, level: float) -> float:
    """The se a symmetric interval at ``level`` needs to hold the percentile interval of the seeds'
    mean (``mean_tails``, interpolated at (1 − level)/2): max(hi − θ̂, θ̂ − lo) / z; 0 without tails."""
    if not tails:
        return 0.0
    p = (1 - level) / 2
    rows = sorted((float(a), float(b), float(c)) for a, b, c in tails)
    ps = [r[0] for r in rows]
    p = min(max(p, ps[0]), ps[-1])
    lo, hi = float(np.interp(p, ps, [r[1] for r in rows])), float(np.interp(p, ps, [r[2] for r in rows]))
    return max(hi - mu, mu - lo, 0.0) / _quantile(1 - p, None)


def pooled_tails(means: Sequence[float], tails: Sequence[Sequence[Sequence[float]]],
                 weights: Sequence[float]) -> list[list[float]]:
    """The tails (``mean_tails``) of Σ w_d θ̂_d over independent held-out draws d, each with its seeds'
    mean θ̂_d and its tails: at each p, each side's distance from θ̂_d combined in quadrature,
    Σ w_d θ̂_d ∓ √(Σ w_d² δ_d²) (exact for normal draws; a skewed draw's long side stays long)."""
    mu = sum(w * m for w, m in zip(weights, means))
    rows = [{float(r[0]): (float(r[1]), float(r[2])) for r in t} for t in tails]
    out = []
    for p in sorted(set.intersection(*(set(r) for r in rows))):
        lo = math.sqrt(sum((w * max(m - r[p][0], 0.0)) ** 2 for w, m, r in zip(weights, means, rows)))
        hi = math.sqrt(sum((w * max(r[p][1] - m, 0.0)) ** 2 for w, m, r in zip(weights, means, rows)))
        out.append([p, mu - lo, mu + hi])
    return out


def shared_bound(ses: Sequence[float]) -> np.ndarray:
    """The question covariance of seeds whose errors are wholly shared, C_ij = se_i·se_j: the
    largest their own question CIs allow (Cauchy–Schwarz)."""
    s = np.asarray([float(v) for v in ses])
    return np.outer(s, s)


# ------------------------------------------------------------------------------- the interval
def components(estimates: Sequence[float], cov: np.ndarray) -> tuple[float, float, float]:
    """(σ²_seed, σ²_shared, σ²_residual) from the seeds' estimates and their question covariance:
    σ²_shared = the mean off-diagonal of C, σ²_residual = the mean diagonal − σ²_shared (each
    seed's own question noise), σ²_seed = max(0, s² − σ²_residual) (the training's, per seed)."""
    c = np.asarray(cov, dtype=float)
    k = len(estimates)
    diag = float(np.mean(np.diag(c)))
    shared = float((c.sum() - np.trace(c)) / (k * (k - 1))) if k > 1 else diag
    residual = max(0.0, diag - shared) if k > 1 else 0.0
    spread = float(np.var(np.asarray(estimates, dtype=float), ddof=1)) if k > 1 else 0.0
    return max(0.0, spread - residual), shared, residual


def half_width(var_seed: float, var_shared: float, var_residual: float, k: int,
               n_questions: Optional[int], level: float = 0.95, scale: float = 1.0) -> float:
    """The crossed interval's half-width (``interval``) with k seeds and ``scale`` × the questions (the
    shared and residual question variances shrink as 1/scale), the seeds' spread s² at its
    expectation σ²_seed + σ²_residual/scale."""
    n = None if n_questions is None else int(round(n_questions * scale))
    return _widest(var_seed + var_residual / scale, var_shared / scale, var_residual / scale, k, n, level)[0]


def _widest(spread: float, var_shared: float, var_residual: float, k: int, n_questions: Optional[int],
            level: float = 0.95, questions_se: float = 0.0) -> tuple[float, float, Optional[float]]:
    """(half-width, se, df of the questions' part) of the wider of two intervals.

    Both noises, Banerjee's: √(t²_{k−1} s²/k + t²_{n−1} σ²_shared), s² the seeds' spread on k − 1
    df, σ²_shared on n − 1 (None: normal). Its coverage is at least its level whatever the ratio of
    the two parts (Banerjee 1960, Sankhyā 22: 357–358), where a Welch–Satterthwaite df computed from
    the estimated parts runs liberal: three seeds that happen to agree read as many df.
    The questions' noise alone, t_{n−1} √(σ²_shared + σ²_residual/k), at least ``questions_se`` (what
    the percentile interval of the seeds' resampled mean needs: its tails may be longer than a
    normal's, a slope on 200 questions): σ²_residual is the bootstrap's, known where s² is not."""
    q_df = None if n_questions is None else n_questions - 1
    z = (1 + level) / 2
    t_q = _t(z, q_df)
    se_q = max(math.sqrt(max(var_shared + var_residual / k, 0.0)), questions_se)
    questions = (t_q * se_q, se_q, q_df)
    if k < 2:
        return questions
    seeds_part, shared = max(spread, 0.0) / k, max(var_shared, 0.0)
    both = math.sqrt(_t(z, k - 1) ** 2 * seeds_part + t_q ** 2 * shared)
    return max(questions, (both, math.sqrt(seeds_part + shared), q_df), key=lambda h: h[0])


@lru_cache(maxsize=4096)
def _t(q: float, df: Optional[float]) -> float:
    """``_quantile``, remembered: the projections ask for the same few (level, df) thousands of times."""
    return _quantile(q, df)


def _df_at(ratio: float, level: float, lo: float, hi: Optional[float]) -> Optional[float]:
    """The df in [lo, hi] whose t quantile at ``level`` is ``ratio`` (half-width / se), so that a
    p on it agrees with the interval at its level; hi (None: normal) where the ratio is the normal's."""
    z = (1 + level) / 2
    top = 1e9 if hi is None else hi
    if ratio <= _quantile(z, top) + 1e-12:
        return hi
    if ratio >= _quantile(z, lo):
        return lo
    return float(optimize.brentq(lambda df: _quantile(z, df) - ratio, lo, top, xtol=1e-6))


def interval(estimates: Sequence[float], cov: np.ndarray, n_questions: Optional[int],
             level: float = 0.95, tails: Optional[Sequence[Sequence[float]]] = None) -> Combined:
    """The crossed estimate of θ from k ≥ 2 seeds' ``estimates`` and their question covariance
    ``cov`` (``joint_cov``, or ``shared_bound`` without records): θ̂ the seeds' mean, the CI the
    wider of Banerjee's on both noises and the question noise of θ̂ alone (``_widest``), this one at
    least the percentile interval of the seeds' resampled mean where its ``tails`` are given. Its se
    and df are the chosen interval's (df: the t whose quantile at the level is half-width / se)."""
    y = [float(v) for v in estimates]
    k = len(y)
    if k < 2 or np.shape(cov) != (k, k):
        raise ValueError(f"crossed interval: {k} estimates and a {np.shape(cov)} covariance (needs k ≥ 2, k × k)")
    var_seed, var_shared, var_residual = components(y, cov)
    mu = sum(y) / k
    spread = float(np.var(y, ddof=1))
    h, se, q_df = _widest(spread, var_shared, var_residual, k, n_questions, level, percentile_se(tails, mu, level))
    df = _df_at(h / se, level, k - 1, q_df) if se > 0 else q_df
    return Combined(mu, (mu - h, mu + h), se, df, math.sqrt(var_seed), k, level,
                    var_seed=var_seed, var_shared=var_shared, var_residual=var_residual, n_questions=n_questions)


MAX_SCALE = 100          # questions_to_decide looks up to 100 × today's questions


def seeds_to_decide(c: Combined, target: float, least: int = 2, most: int = 100) -> Optional[int]:
    """The fewest seeds, from ``least``, (at today's questions) whose crossed half-width would be
    under ``target``, at the estimate's variance components; None: more than ``most``, or never (the
    questions' shared noise alone is wider: more questions, not seeds, narrow it)."""
    if target <= 0 or not c.crossed:
        return None
    for k in range(max(2, least), most + 1):
        if half_width(*c.parts(), k, c.n_questions, c.level) < target:
            return k
    return None


def questions_to_decide(c: Combined, target: float) -> Optional[int]:
    """The fewest held-out questions (with today's k seeds) whose crossed half-width would be under
    ``target``; None: more than MAX_SCALE × today's, never (the seeds' spread alone is wider: more
    seeds, not questions, narrow it), or the question count unknown (an interval bounded from CIs)."""
    if target <= 0 or not c.crossed or c.n_questions is None:
        return None

    def fits(scale: float) -> bool:
        return half_width(*c.parts(), c.k, c.n_questions, c.level, scale) < target

    if not fits(MAX_SCALE):
        return None
    lo, hi = 1 / c.n_questions, float(MAX_SCALE)    # scale: questions as a multiple of today's
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return max(2, math.ceil(hi * c.n_questions))


__all__ = ["QUESTION_STREAM", "TAILS", "components", "joint_draws", "mean_tails", "percentile_se", "half_width", "interval", "joint_cov",
           "pooled_tails", "questions_to_decide",
           "resample_weights", "seeds_to_decide", "shared_bound", "weighted_mean", "weighted_moments",
           "weighted_slope"]
