"""Calibration: Brier from the stated P and its parts (BSS, the reliability bins, ECE, Murphy's
decomposition), over-confidence, the extremes, parse rates and counts; every function gives its
formula, every stage metric is registered here."""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ..core.lazy import module
from ..stats import MetricError, bootstrap_ci, too_few_for_ci
from .core import StageColumns, _py, check_labels, check_probs, ci_note, share, stage_metric

stats = module("scipy.stats")   # imported on first use (martingale.core.lazy)

N_BINS = 10           # equal-width probability bins of the reliability diagram, ECE and Murphy


def squared_errors(p: ArrayLike, y: ArrayLike) -> np.ndarray:
    """Per-question Brier loss (y − p)²: the paired unit of the robustness battery."""
    p, y = _py("squared_errors", p, y)
    return (y - p) ** 2


def brier(p: ArrayLike, y: ArrayLike) -> float:
    """Brier = mean (y − p)² over the stated probabilities p."""
    p, y = _py("brier", p, y)
    return float(np.mean((y - p) ** 2))


def constant_brier(y: ArrayLike) -> float:
    """Brier of always stating the base rate ȳ (the base-rate constant): ȳ(1 − ȳ)."""
    y = np.asarray(y, dtype=float)
    if y.size == 0:
        raise MetricError("constant_brier: no labels")
    y = check_labels("constant_brier", y, len(y))
    r = float(np.mean(y))
    return r * (1 - r)


def brier_skill(p: ArrayLike, y: ArrayLike) -> float:
    """BSS = 1 − Brier / Brier(base-rate constant); > 0 beats stating the base rate.

    Undefined with one class only: the base-rate constant then has Brier 0.
    """
    p, y = _py("brier_skill", p, y)
    ref = constant_brier(y)
    if ref == 0:
        raise MetricError("brier_skill: one class only: the base-rate constant has Brier 0, so BSS is undefined")
    return 1.0 - brier(p, y) / ref


def bin_index(p: np.ndarray, n_bins: int = N_BINS) -> np.ndarray:
    """Bin of each p among n_bins equal-width bins of [0, 1]; an edge value goes to the lower bin
    (sklearn's calibration_curve convention: ``searchsorted(inner_edges, p)``)."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    return np.searchsorted(edges[1:-1], p)


def calibration_bins(p: ArrayLike, y: ArrayLike, n_bins: int = N_BINS) -> dict[str, np.ndarray]:
    """The reliability diagram: per equal-width bin k, its count n_k, mean stated p̄_k and observed
    frequency ȳ_k (NaN for an empty bin)."""
    p, y = _py("calibration_bins", p, y)
    b = bin_index(p, n_bins)
    count = np.bincount(b, minlength=n_bins).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.bincount(b, weights=p, minlength=n_bins) / count
        freq = np.bincount(b, weights=y, minlength=n_bins) / count
    return {"count": count, "mean_p": mean_p, "freq": freq}


def ece(p: ArrayLike, y: ArrayLike, n_bins: int = N_BINS) -> float:
    """ECE = Σ_k (n_k / n)·|ȳ_k − p̄_k| over n_bins equal-width bins (empty bins weigh 0)."""
    t = calibration_bins(p, y, n_bins)
    ok = t["count"] > 0
    return float(np.sum(t["count"][ok] * np.abs(t["freq"][ok] - t["mean_p"][ok])) / t["count"].sum())


def murphy_decomposition(p: ArrayLike, y: ArrayLike, n_bins: int = N_BINS) -> dict[str, float]:
    """Brier = REL − RES + UNC + WBV − WBC, exactly (Murphy 1973 with Stephenson et al. 2008's
    within-bin terms, which vanish when p is constant within each bin), over bins k of size n_k:

    - reliability REL = (1/n) Σ_k n_k (p̄_k − ȳ_k)²   (lower is better calibrated)
    - resolution  RES = (1/n) Σ_k n_k (ȳ_k − ȳ)²      (higher separates outcomes better)
    - uncertainty UNC = ȳ (1 − ȳ)                      (the base-rate constant's Brier)
    - within-bin variance    WBV = (1/n) Σ_i (p_i − p̄_k(i))²
    - within-bin covariance  WBC = (2/n) Σ_i (p_i − p̄_k(i))(y_i − ȳ_k(i))
    """
    p, y = _py("murphy_decomposition", p, y)
    n = len(p)
    b = bin_index(p, n_bins)
    count = np.bincount(b, minlength=n_bins).astype(float)
    safe = np.maximum(count, 1)
    mean_p = np.bincount(b, weights=p, minlength=n_bins) / safe
    freq = np.bincount(b, weights=y, minlength=n_bins) / safe
    ybar = float(np.mean(y))
    dp, dy = p - mean_p[b], y - freq[b]
    return {
        "brier_reliability": float(np.sum(count * (mean_p - freq) ** 2) / n),
        "brier_resolution": float(np.sum(count * (freq - ybar) ** 2) / n),
        "brier_uncertainty": ybar * (1 - ybar),
        "brier_wbv": float(np.sum(dp ** 2) / n),
        "brier_wbc": float(2 * np.sum(dp * dy) / n),
    }


def mean_p(p: ArrayLike) -> float:
    """meanP = mean stated probability (compare with the base rate ȳ: over-confidence in yes)."""
    return float(np.mean(check_probs("mean_p", p)))


def overconfidence(p: ArrayLike, y: ArrayLike) -> float:
    """Over-confidence in yes = meanP − ȳ (the research log's "mean belief − base rate": D ≈ +0.3)."""
    p, y = _py("overconfidence", p, y)
    return float(np.mean(p) - np.mean(y))


def overconfidence_ci(p: ArrayLike, y: ArrayLike, n_resamples: int, level: float, seed: int) -> tuple[float, float]:
    """Percentile bootstrap CI of meanP − ȳ, resampling questions (p and y together)."""
    p, y = _py("overconfidence_ci", p, y)
    if too_few_for_ci(len(p)):
        return float("nan"), float("nan")
    low, high = bootstrap_ci((p - y,), np.mean, n_resamples, level, seed, paired=False, vectorized=None)
    return float(low), float(high)


def extremes(p: ArrayLike) -> dict[str, float]:
    """Shares of stated probabilities at the extremes: p ≤ .05, p ≥ .95, either (the research log's
    "extreme %"), and p > .8."""
    p = check_probs("extremes", p)
    return {
        "share_le_0.05": float(np.mean(p <= 0.05)),
        "share_ge_0.95": float(np.mean(p >= 0.95)),
        "share_extreme": float(np.mean((p <= 0.05) | (p >= 0.95))),
        "share_gt_0.8": float(np.mean(p > 0.8)),
    }


def brier_ci(p: ArrayLike, y: ArrayLike, n_resamples: int, level: float, seed: int) -> tuple[float, float]:
    """Percentile bootstrap CI of Brier, resampling questions. Fewer than MIN_CI_PAIRS questions
    give (nan, nan): too few questions for an interval."""
    se = squared_errors(p, y)
    if too_few_for_ci(len(se)):
        return float("nan"), float("nan")
    low, high = bootstrap_ci((se,), np.mean, n_resamples, level, seed, paired=False, vectorized=None)
    return float(low), float(high)


MURPHY_KEYS = ("brier_reliability", "brier_resolution", "brier_uncertainty", "brier_wbv", "brier_wbc")
EXTREME_KEYS = ("share_le_0.05", "share_ge_0.95", "share_extreme", "share_gt_0.8")


@stage_metric("n", reads=("y",))
def _n(s: StageColumns) -> int:
    """n = questions in the stage."""
    return len(s.y)


@stage_metric("n_stated", reads=("stated",))
def _n_stated(s: StageColumns) -> int:
    """n_stated = questions with a parsed stated P."""
    return int(s.ok.sum())


@stage_metric("parse_rate", reads=("stated",))
def _parse_rate(s: StageColumns) -> float:
    """parse_rate = n_stated / n."""
    return share(s.ok)


@stage_metric("brier_constant", reads=("y",))
def _brier_constant(s: StageColumns) -> float:
    """Brier of the base-rate constant, ȳ(1 − ȳ), over every question."""
    return constant_brier(s.y)


@stage_metric("brier_oracle", reads=("bayes", "y"))
def _brier_oracle(s: StageColumns) -> float:
    """Brier of the exact Bayes belief at the end: mean (y − bayes_end)²."""
    has = ~np.isnan(s.bayes)
    return brier(s.bayes[has], s.y[has])


@stage_metric("brier", reads=("stated", "y"))
def _brier(s: StageColumns) -> float:
    """Brier = mean (y − stated P)² over questions with a parsed stated P."""
    return brier(s.stated[s.ok], s.y[s.ok])


@stage_metric("bss", reads=("stated", "y"))
def _bss(s: StageColumns) -> float:
    """BSS = 1 − Brier / ȳ(1 − ȳ), over questions with a parsed stated P."""
    return brier_skill(s.stated[s.ok], s.y[s.ok])


@stage_metric("mean_p", reads=("stated",))
def _mean_p(s: StageColumns) -> float:
    """meanP = mean stated P."""
    return mean_p(s.stated[s.ok])


@stage_metric("overconfidence", reads=("stated", "y"))
def _overconfidence(s: StageColumns) -> float:
    """Over-confidence = meanP − ȳ over questions with a parsed stated P."""
    return overconfidence(s.stated[s.ok], s.y[s.ok])


@stage_metric("overconfidence_ci", reads=("stated", "y"))
def _overconfidence_ci(s: StageColumns) -> list[float]:
    """Percentile bootstrap CI of meanP − ȳ."""
    ci = overconfidence_ci(s.stated[s.ok], s.y[s.ok], s.n_bootstrap, s.level, s.seed)
    if (why := ci_note(ci, int(s.ok.sum()))):
        raise MetricError(f"overconfidence_ci: {why}")
    return list(ci)


@stage_metric(*EXTREME_KEYS, reads=("stated",))
def _extremes(s: StageColumns) -> dict[str, float]:
    """Shares of stated P ≤ .05, ≥ .95, either, and > .8."""
    return extremes(s.stated[s.ok])


@stage_metric("ece", reads=("stated", "y"))
def _ece(s: StageColumns) -> float:
    """ECE = Σ_k (n_k / n)·|ȳ_k − p̄_k| of the stated P."""
    return ece(s.stated[s.ok], s.y[s.ok])


@stage_metric(*MURPHY_KEYS, reads=("stated", "y"))
def _murphy(s: StageColumns) -> dict[str, float]:
    """Brier = REL − RES + UNC + WBV − WBC of the stated P."""
    return murphy_decomposition(s.stated[s.ok], s.y[s.ok])


@stage_metric("brier_ci", reads=("stated", "y"))
def _brier_ci(s: StageColumns) -> list[float]:
    """Percentile bootstrap CI of Brier over questions with a parsed stated P."""
    ps, ys = s.stated[s.ok], s.y[s.ok]
    ci = brier_ci(ps, ys, s.n_bootstrap, s.level, s.seed)
    if (why := ci_note(ci, len(ps))):
        raise MetricError(f"brier_ci: {why}")
    return list(ci)
