"""Per-stage metrics over (y, prior, posterior, stated P). Unparsed values are NaN and excluded.

Every metric is a small pure function; its docstring gives the formula. Brier is always from the
model's own stated P, never from a judge read (a judge moderates beliefs and launders calibration).

Bad input is never turned into a silent number. The pure functions take clean arrays (unparsed
values already dropped) and raise :class:`MetricError` — naming the metric and the reason — when a
metric is undefined on them: too few values, NaN, probabilities outside [0, 1], labels other than
0/1, one class only where the metric needs both, a constant prior under a slope. ``stage_metrics``
runs the table ``STAGE_METRICS`` over a stage's columns (unparsed values dropped) and where a
metric is undefined writes NaN (null in JSON) under its keys and the reason under ``undefined[key]``.

A new metric is one file in this package: ``@stage_metric(key, reads=..., column=Column(...))`` on its
function registers it; it is then in every stage's eval.json and, with a ``column``, in runs.json,
RUNS.md and runs.html (docs/extending.md).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..core.lazy import module
from ..core.registry import Registry
from ..stats import MetricError, bootstrap_ci, ms_regression, ms_slope, nan_array, nan_matrix, too_few_for_ci
from ..stats.deattenuation import DEATT_KEYS, deattenuate

stats = module("scipy.stats")   # imported on first use (martingale.core.lazy)

N_BINS = 10           # equal-width probability bins of the reliability diagram, ECE and Murphy
INERTIA_EPS = 0.02    # |Δ| at or below this counts as "did not move" (the reward's info_eps)


# ------------------------------------------------------------------------------- input checks
def check_probs(name: str, p: Any, min_n: int = 1) -> np.ndarray:
    """p as a 1-D float array of at least ``min_n`` finite probabilities in [0, 1], or MetricError."""
    p = np.asarray(p, dtype=float)
    if p.ndim != 1:
        raise MetricError(f"{name}: expected a 1-D array of probabilities, got shape {p.shape}")
    if len(p) and np.isnan(p).all():
        raise MetricError(f"{name}: every value is NaN (nothing parsed)")
    if np.isnan(p).any():
        raise MetricError(f"{name}: {int(np.isnan(p).sum())} NaN values: drop unparsed values first")
    if len(p) < min_n:
        raise MetricError(f"{name}: needs at least {min_n} values, got {len(p)}")
    if not np.isfinite(p).all() or (p < 0).any() or (p > 1).any():
        raise MetricError(f"{name}: probabilities must lie in [0, 1]")
    return p


def check_labels(name: str, y: Any, n: int) -> np.ndarray:
    """y as a float array of n labels, each 0 or 1, or MetricError."""
    y = np.asarray(y, dtype=float)
    if y.shape != (n,):
        raise MetricError(f"{name}: {y.shape[0] if y.ndim == 1 else y.shape} labels for {n} probabilities")
    if not np.isin(y, (0.0, 1.0)).all():
        raise MetricError(f"{name}: labels must be 0 or 1")
    return y


def _py(name: str, p: Any, y: Any, min_n: int = 1) -> tuple[np.ndarray, np.ndarray]:
    p = check_probs(name, p, min_n)
    return p, check_labels(name, y, len(p))


def _pair(name: str, prior: Any, posterior: Any, min_n: int = 3) -> tuple[np.ndarray, np.ndarray]:
    prior = check_probs(f"{name} (prior)", prior, min_n)
    posterior = check_probs(f"{name} (posterior)", posterior, min_n)
    if prior.shape != posterior.shape:
        raise MetricError(f"{name}: {len(prior)} priors but {len(posterior)} posteriors")
    if np.ptp(prior) == 0:
        raise MetricError(f"{name}: constant prior (σ_prior = 0): the slope on the prior is undefined")
    return prior, posterior


# ------------------------------------------------------------------------------- calibration
def squared_errors(p: Any, y: Any) -> np.ndarray:
    """Per-question Brier loss (y − p)²: the paired unit of the robustness battery."""
    p, y = _py("squared_errors", p, y)
    return (y - p) ** 2


def brier(p: Any, y: Any) -> float:
    """Brier = mean (y − p)² over the stated probabilities p."""
    p, y = _py("brier", p, y)
    return float(np.mean((y - p) ** 2))


def constant_brier(y: Any) -> float:
    """Brier of always stating the base rate ȳ (the base-rate constant): ȳ(1 − ȳ)."""
    y = np.asarray(y, dtype=float)
    if y.size == 0:
        raise MetricError("constant_brier: no labels")
    y = check_labels("constant_brier", y, len(y))
    r = float(np.mean(y))
    return r * (1 - r)


def brier_skill(p: Any, y: Any) -> float:
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


def calibration_bins(p: Any, y: Any, n_bins: int = N_BINS) -> dict[str, np.ndarray]:
    """The reliability diagram: per equal-width bin k, its count n_k, mean stated p̄_k and observed
    frequency ȳ_k (NaN for an empty bin)."""
    p, y = _py("calibration_bins", p, y)
    b = bin_index(p, n_bins)
    count = np.bincount(b, minlength=n_bins).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.bincount(b, weights=p, minlength=n_bins) / count
        freq = np.bincount(b, weights=y, minlength=n_bins) / count
    return {"count": count, "mean_p": mean_p, "freq": freq}


def ece(p: Any, y: Any, n_bins: int = N_BINS) -> float:
    """ECE = Σ_k (n_k / n)·|ȳ_k − p̄_k| over n_bins equal-width bins (empty bins weigh 0)."""
    t = calibration_bins(p, y, n_bins)
    ok = t["count"] > 0
    return float(np.sum(t["count"][ok] * np.abs(t["freq"][ok] - t["mean_p"][ok])) / t["count"].sum())


def murphy_decomposition(p: Any, y: Any, n_bins: int = N_BINS) -> dict[str, float]:
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


def mean_p(p: Any) -> float:
    """meanP = mean stated probability (compare with the base rate ȳ: over-confidence in yes)."""
    return float(np.mean(check_probs("mean_p", p)))


def overconfidence(p: Any, y: Any) -> float:
    """Over-confidence in yes = meanP − ȳ (the research log's "mean belief − base rate": D ≈ +0.3)."""
    p, y = _py("overconfidence", p, y)
    return float(np.mean(p) - np.mean(y))


def overconfidence_ci(p: Any, y: Any, n_resamples: int, level: float, seed: int) -> tuple[float, float]:
    """Percentile bootstrap CI of meanP − ȳ, resampling questions (p and y together)."""
    p, y = _py("overconfidence_ci", p, y)
    if too_few_for_ci(len(p)):
        return float("nan"), float("nan")
    low, high = bootstrap_ci((p - y,), np.mean, n_resamples, level, seed, paired=False, vectorized=None)
    return float(low), float(high)


def extremes(p: Any) -> dict[str, float]:
    """Shares of stated probabilities at the extremes: p ≤ .05, p ≥ .95, either (the research log's
    "extreme %"), and p > .8."""
    p = check_probs("extremes", p)
    return {
        "share_le_0.05": float(np.mean(p <= 0.05)),
        "share_ge_0.95": float(np.mean(p >= 0.95)),
        "share_extreme": float(np.mean((p <= 0.05) | (p >= 0.95))),
        "share_gt_0.8": float(np.mean(p > 0.8)),
    }


def brier_ci(p: Any, y: Any, n_resamples: int, level: float, seed: int) -> tuple[float, float]:
    """Percentile bootstrap CI of Brier, resampling questions. Fewer than MIN_CI_PAIRS questions
    give (nan, nan): too few questions for an interval."""
    se = squared_errors(p, y)
    if too_few_for_ci(len(se)):
        return float("nan"), float("nan")
    low, high = bootstrap_ci((se,), np.mean, n_resamples, level, seed, paired=False, vectorized=None)
    return float(low), float(high)


# ------------------------------------------------------------------------------- belief dynamics
def martingale_fit(prior: Any, posterior: Any) -> dict[str, float]:
    """MS = OLS slope β of Δ = posterior − prior on (prior − ½); linR² = R² of that fit.

    0 is a martingale, > 0 entrenchment. Identity: β = ρ·σ_post/σ_prior − 1, with ρ the Pearson
    correlation of prior and posterior and σ their (population) standard deviations. Also the
    mean |Δ|. Needs ≥ 3 pairs and a non-constant prior; ρ is NaN for a constant posterior
    (the correlation is undefined; the identity then reads β = −1 for any ρ).
    """
    prior, posterior = _pair("martingale_fit", prior, posterior)
    delta = posterior - prior
    fit = ms_regression(prior, posterior)
    sd_post = float(np.std(posterior))
    rho = float(stats.pearsonr(prior, posterior).statistic) if sd_post > 0 else float("nan")
    return {
        "ms": float(fit.slope),
        "ms_intercept": float(fit.intercept),
        "lin_r2": float(fit.rvalue ** 2),
        "rho": rho,
        "sigma_ratio": sd_post / float(np.std(prior)),
        "mean_abs_delta": float(np.mean(np.abs(delta))),
    }


def inertia(prior: Any, posterior: Any, eps: float = INERTIA_EPS) -> float:
    """Inertia = share of questions whose belief did not move: |posterior − prior| ≤ eps.

    (The log reports inertia beside mean |Δ| without a formula; this is ours, with eps = the
    reward's info_eps, the movement below which the info term calls a belief stuck.)
    """
    prior = check_probs("inertia (prior)", prior)
    posterior = check_probs("inertia (posterior)", posterior)
    if prior.shape != posterior.shape:
        raise MetricError(f"inertia: {len(prior)} priors but {len(posterior)} posteriors")
    return float(np.mean(np.abs(posterior - prior) <= eps + 1e-12))   # 1e-12: float rounding of p ± eps


def ms_ci(prior: Any, posterior: Any, n_resamples: int, level: float,
          seed: int) -> tuple[float, float]:
    """Percentile bootstrap CI of MS, resampling questions (prior, posterior pairs) jointly.

    Fewer than MIN_CI_PAIRS pairs give (nan, nan): too few questions for an interval.
    """
    prior, posterior = np.asarray(prior, dtype=float), np.asarray(posterior, dtype=float)
    if too_few_for_ci(len(prior)):
        return float("nan"), float("nan")
    low, high = bootstrap_ci((prior, posterior), ms_slope, n_resamples, level, seed)
    return float(low), float(high)


# ------------------------------------------------------------------------------- coherence
def trace_coherence(stated: Any, trace_last: Any) -> float:
    """Coherence of a trace with its answer: mean |stated P − last belief the trace writes|."""
    stated = check_probs("trace_coherence (stated)", stated)
    last = check_probs("trace_coherence (trace_last)", trace_last)
    if stated.shape != last.shape:
        raise MetricError("trace_coherence: stated and trace_last differ in length")
    return float(np.mean(np.abs(stated - last)))


def negation_coherence(p: Any, p_neg: Any) -> float:
    """Coherence on negation pairs: mean |P(A) + P(¬A) − 1| (0 = the two answers are consistent)."""
    p = check_probs("negation_coherence (P(A))", p)
    q = check_probs("negation_coherence (P(not A))", p_neg)
    if p.shape != q.shape:
        raise MetricError("negation_coherence: P(A) and P(not A) differ in length")
    return float(np.mean(np.abs(p + q - 1)))


# ------------------------------------------------------------------------------- a stage's block
REQUIRED_COLUMNS = ("y", "stated", "prior", "posterior", "bayes_end")   # the trace columns are optional (simulate has none)

@dataclass(frozen=True)
class StageColumns:
    """One stage's per-question columns (NaN = unparsed) and bootstrap settings: what each metric
    of ``STAGE_METRICS`` reads."""
    y: np.ndarray
    stated: np.ndarray
    prior: np.ndarray
    post: np.ndarray
    trace_cut: np.ndarray
    trace_last: np.ndarray
    bayes: np.ndarray
    neg: np.ndarray | None      # stated P(not A), when the eval asked negations (eval.negations)
    draws: np.ndarray | None    # questions × K re-draws of the prior, in snap mode (eval.prior_draws > 0)
    crowd: np.ndarray | None    # a forecast from elsewhere per question (crowd_p), where the questions carry one
    n_bootstrap: int
    level: float
    seed: int

    @classmethod
    def from_records(cls, records: list[dict[str, Any]], n_bootstrap: int, level: float,
                     seed: int) -> StageColumns:
        """The columns of a stage's eval records (unparsed None → NaN, ragged snap draws padded)."""
        cols = [nan_array([r[k] if k in REQUIRED_COLUMNS else r.get(k) for r in records])
                for k in ("y", "stated", "prior", "posterior", "trace_cut", "trace_last", "bayes_end")]
        neg = nan_array([r.get("stated_neg") for r in records]) if any("stated_neg" in r for r in records) else None
        draws = (nan_matrix([r.get("snap_draws") for r in records])
                 if any(r.get("snap_draws") for r in records) else None)
        crowd = nan_array([r.get("crowd_p") for r in records]) if any("crowd_p" in r for r in records) else None
        return cls(*cols, neg, draws, crowd, n_bootstrap, level, seed)

    @property
    def ok(self) -> np.ndarray:
        """Questions with a parsed stated P."""
        return ~np.isnan(self.stated)

    @property
    def pair(self) -> np.ndarray:
        """Questions with a parsed prior and posterior."""
        return ~np.isnan(self.prior) & ~np.isnan(self.post)

    @property
    def trace_pair(self) -> np.ndarray:
        """Questions whose trace gives a belief at the cut and a last belief."""
        return ~np.isnan(self.trace_cut) & ~np.isnan(self.trace_last)


COLUMNS = ("y", "stated", "prior", "post", "trace_cut", "trace_last", "bayes", "neg", "draws", "crowd")
MASKS = {"ok": ("stated",), "pair": ("prior", "post"), "trace_pair": ("trace_cut", "trace_last")}
SETTINGS = ("n_bootstrap", "level", "seed")


@dataclass(frozen=True)
class Metric:
    """One entry of the stage table: the keys it writes, the function computing them (a value, or
    a dict of the keys; MetricError when undefined) and the columns it reads (``reads``, of
    COLUMNS), as a reward declares its inputs. It applies where the stage has every one of them (a
    negation column only where the eval asked negations); its function sees only those (Reads)."""
    keys: tuple[str, ...]
    fn: Callable[[StageColumns], Any]
    reads: tuple[str, ...]

    def __post_init__(self) -> None:
        unknown = [c for c in self.reads if c not in COLUMNS]
        if not self.reads or unknown:
            raise ValueError(f"metric {self.keys[0]}: reads must be some of {', '.join(COLUMNS)}, got {self.reads}")

    def applies(self, s: StageColumns) -> bool:
        return all(getattr(s, c) is not None for c in self.reads)

    def compute(self, s: StageColumns) -> Any:
        return self.fn(Reads(s, self.reads))   # type: ignore[arg-type]


class Reads:
    """A stage's columns as one metric sees them: those it declares, the masks made of them
    (``ok``: stated; ``pair``: prior, post; ``trace_pair``) and the bootstrap settings. Any other
    column is an error naming it: a declaration the function does not keep fails its first test."""

    def __init__(self, s: StageColumns, reads: tuple[str, ...]):
        self._s, self._reads = s, reads

    def __getattr__(self, name: str) -> Any:
        need = () if name in SETTINGS else MASKS.get(name, (name,))
        missing = [c for c in need if c not in self._reads]
        if missing:
            raise AttributeError(f"a metric reading {', '.join(self._reads)} used {name} "
                                 f"({', '.join(missing)} undeclared)")
        return getattr(self._s, name)


def _share(mask: np.ndarray) -> float:
    return float(mask.mean()) if len(mask) else float("nan")


def _n(s: StageColumns) -> int:
    """n = questions in the stage."""
    return len(s.y)


def _n_stated(s: StageColumns) -> int:
    """n_stated = questions with a parsed stated P."""
    return int(s.ok.sum())


def _n_pairs(s: StageColumns) -> int:
    """n_pairs = questions with a parsed prior and posterior."""
    return int(s.pair.sum())


def _parse_rate(s: StageColumns) -> float:
    """parse_rate = n_stated / n."""
    return _share(s.ok)


def _prior_parse_rate(s: StageColumns) -> float:
    """prior_parse_rate = (questions with a parsed prior) / n."""
    return _share(~np.isnan(s.prior))


def _posterior_parse_rate(s: StageColumns) -> float:
    """posterior_parse_rate = (questions with a parsed posterior) / n."""
    return _share(~np.isnan(s.post))


def _brier_constant(s: StageColumns) -> float:
    """Brier of the base-rate constant, ȳ(1 − ȳ), over every question."""
    return constant_brier(s.y)


def _brier_oracle(s: StageColumns) -> float:
    """Brier of the exact Bayes belief at the end: mean (y − bayes_end)²."""
    has = ~np.isnan(s.bayes)
    return brier(s.bayes[has], s.y[has])


def _brier(s: StageColumns) -> float:
    """Brier = mean (y − stated P)² over questions with a parsed stated P."""
    return brier(s.stated[s.ok], s.y[s.ok])


def _bss(s: StageColumns) -> float:
    """BSS = 1 − Brier / ȳ(1 − ȳ), over questions with a parsed stated P."""
    return brier_skill(s.stated[s.ok], s.y[s.ok])


def _mean_p(s: StageColumns) -> float:
    """meanP = mean stated P."""
    return mean_p(s.stated[s.ok])


def _overconfidence(s: StageColumns) -> float:
    """Over-confidence = meanP − ȳ over questions with a parsed stated P."""
    return overconfidence(s.stated[s.ok], s.y[s.ok])


def _overconfidence_ci(s: StageColumns) -> list[float]:
    """Percentile bootstrap CI of meanP − ȳ."""
    ci = overconfidence_ci(s.stated[s.ok], s.y[s.ok], s.n_bootstrap, s.level, s.seed)
    if (why := _ci_note(ci, int(s.ok.sum()))):
        raise MetricError(f"overconfidence_ci: {why}")
    return list(ci)


def _extremes(s: StageColumns) -> dict[str, float]:
    """Shares of stated P ≤ .05, ≥ .95, either, and > .8."""
    return extremes(s.stated[s.ok])


def _ece(s: StageColumns) -> float:
    """ECE = Σ_k (n_k / n)·|ȳ_k − p̄_k| of the stated P."""
    return ece(s.stated[s.ok], s.y[s.ok])


def _murphy(s: StageColumns) -> dict[str, float]:
    """Brier = REL − RES + UNC + WBV − WBC of the stated P."""
    return murphy_decomposition(s.stated[s.ok], s.y[s.ok])


def _ci_note(ci: tuple[float, float], n: int) -> str | None:
    """Why an interval on n questions is NaN (too few, or degenerate resamples), else None."""
    if (why := too_few_for_ci(n)):
        return why
    if any(np.isnan(ci)):
        return "bootstrap interval undefined (degenerate resamples)"
    return None


def _brier_ci(s: StageColumns) -> list[float]:
    """Percentile bootstrap CI of Brier over questions with a parsed stated P."""
    ps, ys = s.stated[s.ok], s.y[s.ok]
    ci = brier_ci(ps, ys, s.n_bootstrap, s.level, s.seed)
    if (why := _ci_note(ci, len(ps))):
        raise MetricError(f"brier_ci: {why}")
    return list(ci)


def _coherence(s: StageColumns) -> float:
    """Trace coherence = mean |stated P − trace_last|."""
    both = s.ok & ~np.isnan(s.trace_last)
    return trace_coherence(s.stated[both], s.trace_last[both])


def _fit(s: StageColumns) -> dict[str, Any]:
    """MS = OLS slope of Δ = posterior − prior on (prior − ½), with linR², ρ, σ_post/σ_prior and
    mean |Δ|; ρ is undefined (NaN, with the reason) for a constant posterior."""
    fit: dict[str, Any] = martingale_fit(s.prior[s.pair], s.post[s.pair])
    if np.isnan(fit["rho"]):
        fit["undefined"] = {"rho": "martingale_fit: constant posterior (σ_post = 0): ρ is undefined"}
    return fit


def _identity_gap(s: StageColumns) -> dict[str, Any]:
    """The log's identity checked on the stage's own pairs: gap = MS − (ρ·σ_post/σ_prior − 1), to
    1e-9 (exact for an OLS slope; a gap means the MS was not the slope of these pairs). An identity
    has no sampling error: its interval is [gap, gap]."""
    fit = martingale_fit(s.prior[s.pair], s.post[s.pair])
    if np.isnan(fit["rho"]):
        raise MetricError("ms_identity_gap: constant posterior (σ_post = 0): ρ is undefined")
    gap = round(fit["ms"] - (fit["rho"] * fit["sigma_ratio"] - 1.0), 9) + 0.0
    return {"ms_identity_gap": gap, "ms_identity_gap_ci": [gap, gap]}


def _signed_lin_r2(s: StageColumns) -> float:
    """Signed linR² = sign(MS) · linR²: how much of the update the prior predicts, with the
    direction (> 0 entrenchment, < 0 regression); the research log's "signed linR²"."""
    fit = martingale_fit(s.prior[s.pair], s.post[s.pair])
    return float(np.sign(fit["ms"]) * fit["lin_r2"])


def _brier_prior(s: StageColumns) -> float:
    """Brier(prior) = mean (y − prior)² over questions with a parsed prior and posterior."""
    return brier(s.prior[s.pair], s.y[s.pair])


def _delta_brier(s: StageColumns) -> float:
    """ΔBrier = Brier(posterior) − Brier(prior) on the same questions: < 0, reasoning helped."""
    return brier(s.post[s.pair], s.y[s.pair]) - brier(s.prior[s.pair], s.y[s.pair])


def _delta_brier_ci(s: StageColumns) -> list[float]:
    """Percentile bootstrap CI of ΔBrier, resampling questions."""
    _pair("delta_brier_ci", s.prior[s.pair], s.post[s.pair])
    ci = delta_brier_ci(s.prior[s.pair], s.post[s.pair], s.y[s.pair], s.n_bootstrap, s.level, s.seed)
    if (why := _ci_note(ci, int(s.pair.sum()))):
        raise MetricError(f"delta_brier_ci: {why}")
    return list(ci)


def _inertia(s: StageColumns) -> float:
    """Inertia = share of questions with |posterior − prior| ≤ INERTIA_EPS."""
    return inertia(s.prior[s.pair], s.post[s.pair])


def _ms_interval(name: str, prior: np.ndarray, posterior: np.ndarray, s: StageColumns) -> list[float]:
    _pair(name, prior, posterior)
    ci = ms_ci(prior, posterior, s.n_bootstrap, s.level, s.seed)
    if (why := _ci_note(ci, len(prior))):
        raise MetricError(f"{name}: {why}")
    return list(ci)


def _ms_ci(s: StageColumns) -> list[float]:
    """Paired percentile bootstrap CI of MS over (prior, posterior) pairs."""
    return _ms_interval("ms_ci", s.prior[s.pair], s.post[s.pair], s)


def _ms_trace(s: StageColumns) -> float:
    """MS of the trace: OLS slope of (trace_last − trace_cut) on (trace_cut − ½)."""
    return martingale_fit(s.trace_cut[s.trace_pair], s.trace_last[s.trace_pair])["ms"]


def _ms_trace_ci(s: StageColumns) -> list[float]:
    """Paired percentile bootstrap CI of the trace's MS."""
    return _ms_interval("ms_trace_ci", s.trace_cut[s.trace_pair], s.trace_last[s.trace_pair], s)


def _negation_pairs(s: StageColumns) -> np.ndarray:
    return s.ok & ~np.isnan(s.neg)


def _n_negation_pairs(s: StageColumns) -> int:
    """n_negation_pairs = questions with a parsed P(A) and P(¬A)."""
    return int(_negation_pairs(s).sum())


def _negation_coherence(s: StageColumns) -> float:
    """Negation coherence = mean |P(A) + P(¬A) − 1|."""
    both = _negation_pairs(s)
    return negation_coherence(s.stated[both], s.neg[both])


def _deattenuated(s: StageColumns) -> dict[str, Any]:
    """De-attenuated MS from the snap prior re-draws: MS_adj = β_obs / reliability − 1 and
    MS_iv = Cov(z, posterior) / Cov(z, prior) − 1 (see ``deattenuation``)."""
    return deattenuate(s.prior, s.post, s.draws, s.n_bootstrap, s.level, s.seed)




MS_FIT_KEYS = ("ms", "ms_intercept", "lin_r2", "rho", "sigma_ratio", "mean_abs_delta")
MURPHY_KEYS = ("brier_reliability", "brier_resolution", "brier_uncertainty", "brier_wbv", "brier_wbc")
EXTREME_KEYS = ("share_le_0.05", "share_ge_0.95", "share_extreme", "share_gt_0.8")

# The eval.json block of a stage, in this order: (keys, function, the columns it reads).
STAGE_METRICS: tuple[Metric, ...] = (
    Metric(("n",), _n, ("y",)), Metric(("n_stated",), _n_stated, ("stated",)),
    Metric(("n_pairs",), _n_pairs, ("prior", "post")),
    Metric(("parse_rate",), _parse_rate, ("stated",)), Metric(("prior_parse_rate",), _prior_parse_rate, ("prior",)),
    Metric(("posterior_parse_rate",), _posterior_parse_rate, ("post",)),
    Metric(("brier_constant",), _brier_constant, ("y",)), Metric(("brier_oracle",), _brier_oracle, ("bayes", "y")),
    Metric(("brier",), _brier, ("stated", "y")), Metric(("bss",), _bss, ("stated", "y")),
    Metric(("mean_p",), _mean_p, ("stated",)),
    Metric(("overconfidence",), _overconfidence, ("stated", "y")),
    Metric(("overconfidence_ci",), _overconfidence_ci, ("stated", "y")),
    Metric(EXTREME_KEYS, _extremes, ("stated",)), Metric(("ece",), _ece, ("stated", "y")),
    Metric(MURPHY_KEYS, _murphy, ("stated", "y")),
    Metric(("brier_ci",), _brier_ci, ("stated", "y")), Metric(("coherence",), _coherence, ("stated", "trace_last")),
    Metric(MS_FIT_KEYS, _fit, ("prior", "post")),
    Metric(("ms_identity_gap", "ms_identity_gap_ci"), _identity_gap, ("prior", "post")),
    Metric(("signed_lin_r2",), _signed_lin_r2, ("prior", "post")), Metric(("inertia",), _inertia, ("prior", "post")),
    Metric(("ms_ci",), _ms_ci, ("prior", "post")), Metric(("brier_prior",), _brier_prior, ("prior", "post", "y")),
    Metric(("delta_brier",), _delta_brier, ("prior", "post", "y")),
    Metric(("delta_brier_ci",), _delta_brier_ci, ("prior", "post", "y")),
    Metric(("ms_trace",), _ms_trace, ("trace_cut", "trace_last")),
    Metric(("ms_trace_ci",), _ms_trace_ci, ("trace_cut", "trace_last")),
    Metric(("n_negation_pairs",), _n_negation_pairs, ("stated", "neg")),
    Metric(("negation_coherence",), _negation_coherence, ("stated", "neg")),
    Metric(DEATT_KEYS, _deattenuated, ("prior", "post", "draws")),
)


@dataclass(frozen=True)
class Column:
    """How a metric shows in the runs table (runs.json's ``metrics``, RUNS.md, runs.html): its
    label and digits; its CI ``<key>_ci`` beside it where the stage has one."""
    label: str
    digits: int = 4
    signed: bool = False


@dataclass(frozen=True)
class Declared:
    """A metric declared in a file of this package: the stage-table entry and its table column."""
    metric: Metric
    column: Column | None = None


DECLARED: Registry = Registry("metric")
HELPERS = ("resampled",)   # every module of this package but __init__ and resampled declares metrics


def stage_metric(*keys: str, reads: tuple[str, ...], column: Column | None = None) -> Callable:
    """Register the decorated function of the stage's columns (``Reads``) as the metric writing
    ``keys`` (a value, or a dict of them), computed for every stage that has the columns it
    ``reads``; with a ``column`` the runs table shows its first key."""
    def register(fn: Callable[[StageColumns], Any]) -> Callable[[StageColumns], Any]:
        DECLARED.add(keys[0], Declared(Metric(tuple(keys), fn, tuple(reads)), column))
        return fn
    return register


def declared_metrics() -> dict[str, Declared]:
    """The metrics declared in files of this package (each imported once)."""
    return DECLARED.discover(__name__, __path__, HELPERS)


def table_columns() -> dict[str, Column]:
    """Key → column of every declared metric the runs table shows."""
    return {key: d.column for key, d in declared_metrics().items() if d.column is not None}


def _put(metric: Metric, s: StageColumns, out: dict[str, Any], undefined: dict[str, str]) -> None:
    """Store the metric's value (a dict is merged, its ``undefined`` too) or, where it is undefined,
    NaN under each of its keys ([NaN, NaN] for an interval) with the reason."""
    try:
        value = metric.compute(s)
    except MetricError as e:
        for k in metric.keys:
            out[k] = [float("nan")] * 2 if k.endswith("_ci") else float("nan")
            undefined[k] = str(e)
        return
    if isinstance(value, dict):
        undefined.update(value.pop("undefined", {}))
        out.update(value)
    else:
        out[metric.keys[0]] = value


def stage_metrics(records: list[dict[str, Any]], n_bootstrap: int = 1000, level: float = 0.95,
                  seed: int = 0) -> dict[str, Any]:
    """The eval.json block for one stage and seed, from its per-question records.

    Every metric of ``STAGE_METRICS`` that applies is present; one that is undefined on this
    stage's data is NaN (null in JSON) with its reason under ``undefined``. Records with
    ``snap_draws`` (eval.prior_draws > 0, snap mode) add the de-attenuated MS; records with
    ``stated_neg`` (eval.negations) add the negation coherence.
    """
    s = StageColumns.from_records(records, n_bootstrap, level, seed)
    out: dict[str, Any] = {}
    undefined: dict[str, str] = {}
    for metric in STAGE_METRICS + tuple(d.metric for d in declared_metrics().values()):
        if metric.applies(s):
            _put(metric, s, out, undefined)
    if records and "stated_forced" in records[0]:
        out.update(read_metrics(records, n_bootstrap, level, seed, undefined))
    out["undefined"] = undefined
    return out


READ_KEYS = ("parse_rate", "n_pairs", "brier", "brier_ci", "mean_p", "ms", "ms_ci", "rho", "sigma_ratio")


def _mean_of(values: list[Any]) -> float:
    arr = nan_array(values)
    return float(np.nanmean(arr)) if np.isfinite(arr).any() else float("nan")


def read_metrics(records: list[dict[str, Any]], n_bootstrap: int, level: float, seed: int,
                 undefined: dict[str, str] | None = None) -> dict[str, Any]:
    """Both reads side by side (beliefs/forced.py), for a stage whose records carry them: per read
    ``verbal_<k>`` / ``forced_<k>`` for k in READ_KEYS (parse_rate of the forced read = the share
    of answers whose valid tokens held at least prompts.forced_min_mass); ``forced_mass`` = mean
    share of the next-token mass on valid answer tokens (stated P), ``forced_prior_mass`` the
    same for the prior; ``read_coherence`` = mean |verbal stated P − forced stated P| over the
    answers both reads parsed, ``n_read_pairs`` of them."""
    out: dict[str, Any] = {}
    for read in ("verbal", "forced"):
        cols = [{**r, "prior": r[f"prior_{read}"], "posterior": r[f"posterior_{read}"],
                 "stated": r[f"stated_{read}"]} for r in records]
        s = StageColumns.from_records(cols, n_bootstrap, level, seed)
        block: dict[str, Any] = {}
        why: dict[str, str] = {}
        for metric in STAGE_METRICS:
            if metric.applies(s) and set(metric.keys) & set(READ_KEYS):
                _put(metric, s, block, why)
        out.update({f"{read}_{k}": block[k] for k in READ_KEYS if k in block})
        if undefined is not None:
            undefined.update({f"{read}_{k}": why[k] for k in READ_KEYS if k in why})
    out["forced_mass"] = _mean_of([r.get("stated_forced_mass") for r in records])
    out["forced_prior_mass"] = _mean_of([r.get("prior_forced_mass") for r in records])
    verbal = nan_array([r["stated_verbal"] for r in records])
    forced = nan_array([r["stated_forced"] for r in records])
    both = np.isfinite(verbal) & np.isfinite(forced)
    out["n_read_pairs"] = int(both.sum())
    out["read_coherence"] = float(np.abs(verbal[both] - forced[both]).mean()) if both.any() else float("nan")
    if undefined is not None and not both.any():
        undefined["read_coherence"] = "no answer parsed under both reads"
    return out


# ------------------------------------------------------------------------------- two-agent episodes
def entrenched(first: Any, last: Any) -> np.ndarray:
    """Per episode: did the human move further to the side of ½ it started on, (last − first)·
    sign(first − ½) > 0 (the research log's "30/48 entrenched")."""
    first, last = np.asarray(first, dtype=float), np.asarray(last, dtype=float)
    return (last - first) * np.sign(first - 0.5) > 0


def delta_brier_ci(first: Any, last: Any, y: Any, n_resamples: int, level: float,
                   seed: int) -> tuple[float, float]:
    """Percentile bootstrap CI of ΔBrier = mean (y − last)² − (y − first)², resampling episodes."""
    d = squared_errors(last, y) - squared_errors(first, y)
    if too_few_for_ci(len(d)):
        return float("nan"), float("nan")
    low, high = bootstrap_ci((d,), np.mean, n_resamples, level, seed, paired=False, vectorized=None)
    return float(low), float(high)


def _ms_bayes(records: list[dict[str, Any]]) -> float:
    """The Bayes human's MS first → last; a real question (a chat episode) has no oracle."""
    if any(r.get("bayes_turns") is None for r in records):
        raise MetricError("ms_bayes: real questions have no Bayes oracle (a chat episode)")
    return martingale_fit([r["bayes_turns"][0] for r in records], [r["bayes_turns"][-1] for r in records])["ms"]


def episode_metrics(records: list[dict[str, Any]], n_bootstrap: int = 1000, level: float = 0.95,
                    seed: int = 0) -> dict[str, Any]:
    """A simulate stage's episode block, over episodes whose first and last P both parsed:
    entrenched share (k of n), Brier of the first P, ΔBrier = Brier(last) − Brier(first) with its
    CI, the Bayes human's MS (the exact belief of the evidence the human held, first → last: what a
    Bayesian hearing the same utterances would show), and the mean stated P per turn by lean."""
    first = nan_array([r["prior"] for r in records])
    last = nan_array([r["posterior"] for r in records])
    y = np.array([r["y"] for r in records], dtype=float)
    ok = np.isfinite(first) & np.isfinite(last)
    out: dict[str, Any] = {"n_episodes": len(records), "n_entrenched": int(entrenched(first[ok], last[ok]).sum())}
    undefined: dict[str, str] = {}
    def entrenched_share() -> float:
        if not ok.any():
            raise MetricError("entrenched_share: no episode with a parsed first and last P")
        return float(entrenched(first[ok], last[ok]).mean())

    steps = [
        ("entrenched_share", entrenched_share),
        ("brier_first", lambda: brier(first[ok], y[ok])),
        ("delta_brier", lambda: brier(last[ok], y[ok]) - brier(first[ok], y[ok])),
        ("delta_brier_ci", lambda: list(delta_brier_ci(first[ok], last[ok], y[ok], n_bootstrap, level, seed))),
        ("ms_bayes", lambda: _ms_bayes(records)),
    ]
    for key, fn in steps:
        try:
            out[key] = fn()
        except MetricError as e:
            out[key] = [float("nan")] * 2 if key.endswith("_ci") else float("nan")
            undefined[key] = str(e)
    traj = nan_matrix([r["trajectory"] for r in records])
    lean = np.array([r["lean"] for r in records])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # a turn where no human's P parsed: NaN
        out["p_by_turn"] = {side: [None if np.isnan(v) else round(float(v), 6)
                                   for v in np.nanmean(traj[lean == sign], axis=0)]
                            for side, sign in (("lean_yes", 1), ("lean_no", -1)) if (lean == sign).any()}
    if undefined:
        out["undefined_episode"] = undefined
    return out

