"""The statistics core shared by metrics, effects and de-attenuation: the MS slope, the percentile
bootstrap, the too-few-for-an-interval guard and None → NaN. Imports nothing from the package but the
lazy loader, so every statistics module can import it without a cycle.
"""
from __future__ import annotations

from typing import Callable, Protocol, Sequence, TypeAlias

import numpy as np
from numpy.typing import NDArray

from ..core.jsonvalue import JsonObject
from ..core.lazy import module

stats = module("scipy.stats")   # imported on first use (martingale.core.lazy)

Record: TypeAlias = JsonObject   # one question's row as records.jsonl holds it (the eval writes, metrics read)
Block: TypeAlias = dict[str, object]   # a block of results that metrics.json or eval.json writes

MIN_CI_PAIRS = 10     # fewer questions than this: no bootstrap interval (NaN, with the reason)


class MetricError(ValueError):
    """A metric is undefined on this input; the message names the metric and says why."""


# ------------------------------------------------------------------------------- None → NaN
def nan_array(values: Sequence[float | None]) -> np.ndarray:
    """values as a 1-D float array, None (unparsed) as NaN."""
    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)


def nan_matrix(rows: Sequence[Sequence[float | None] | None]) -> np.ndarray:
    """Ragged rows (None = no row) as a rows × longest float array, None and missing cells NaN."""
    k = max((len(r or []) for r in rows), default=0)
    return np.array([[*nan_array(r or []), *[np.nan] * (k - len(r or []))] for r in rows], dtype=float)


# ------------------------------------------------------------------------------- the MS slope
class Fit(Protocol):
    """What the callers read of ``scipy.stats.linregress``'s result."""
    slope: float
    intercept: float
    rvalue: float
    pvalue: float
    stderr: float


def ols(x: np.ndarray, y: np.ndarray) -> Fit:
    """The OLS fit of y on x (``scipy.stats.linregress``: slope, intercept, rvalue, …)."""
    fit: Fit = stats.linregress(x, y)
    return fit


def ms_regression(prior: np.ndarray, posterior: np.ndarray) -> Fit:
    """The MS regression: OLS of Δ = posterior − prior on (prior − ½); MS is its slope."""
    return ols(prior - 0.5, posterior - prior)


def ms_slope(prior: np.ndarray, posterior: np.ndarray) -> float:
    """MS = OLS slope of Δ = posterior − prior on (prior − ½) = cov(x, Δ) / var(x); NaN for a
    constant prior (a bootstrap resample may draw one). The slope ``linregress`` computes, by its
    own arithmetic (``np.cov(x, y, bias=1)``, then ssxy / ssx): the same bits, without the ~1 ms
    of argument handling per call that a bootstrap pays thousands of times."""
    if np.ptp(prior) == 0:
        return np.nan
    ssx, ssxy, _, _ = np.cov(prior - 0.5, posterior - prior, bias=True).flat
    return float(ssxy / ssx)


# ------------------------------------------------------------------------------- the bootstrap
def too_few_for_ci(n: int, unit: str = "questions") -> str | None:
    """The reason there is no bootstrap interval on n questions (n < MIN_CI_PAIRS), else None."""
    if n < MIN_CI_PAIRS:
        return f"{n} {unit} < {MIN_CI_PAIRS}: too few for a bootstrap interval"
    return None


def bootstrap_ci(data: tuple[np.ndarray, ...], statistic: Callable[..., object], n_resamples: int,
                 level: float, seed: int, paired: bool = True,
                 vectorized: bool | None = False) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Percentile bootstrap (low, high) of statistic(*data), resampling questions (jointly across
    the arrays when paired) with ``default_rng(seed)``; arrays for a vector statistic."""
    res = stats.bootstrap(data, statistic, paired=paired, vectorized=vectorized, n_resamples=n_resamples,
                          confidence_level=level, method="percentile", rng=np.random.default_rng(seed))
    low, high = np.asarray(res.confidence_interval.low), np.asarray(res.confidence_interval.high)
    return low, high
