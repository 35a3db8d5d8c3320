"""Per-stage metrics over (y, prior, posterior, stated P). Unparsed values are NaN and excluded.

Every metric is a small pure function; its docstring gives the formula. Brier is always from the
model's own stated P, never from a judge read (a judge moderates beliefs and launders calibration).

Bad input is never turned into a silent number. The pure functions take clean arrays (unparsed
values already dropped) and raise :class:`MetricError` — naming the metric and the reason — when a
metric is undefined on them: too few values, NaN, probabilities outside [0, 1], labels other than
0/1, one class only where the metric needs both, a constant prior under a slope. ``stage_metrics``
drops unparsed values, calls them, and where one is undefined writes NaN (null in JSON) under the
key and the reason under ``undefined[key]``.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
from scipy import stats


MIN_CI_PAIRS = 10     # fewer questions than this: no bootstrap interval (NaN, with the reason)
N_BINS = 10           # equal-width probability bins of the reliability diagram, ECE and Murphy
INERTIA_EPS = 0.02    # |Δ| at or below this counts as "did not move" (the reward's info_eps)


class MetricError(ValueError):
    """A metric is undefined on this input; the message names the metric and says why."""


def _arr(x: Sequence[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in x], dtype=float)


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


def extremes(p: Any) -> dict[str, float]:
    """Shares of stated probabilities at the extremes: p ≤ .05, p ≥ .95, either (the log's
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
    if len(se) < MIN_CI_PAIRS:
        return float("nan"), float("nan")
    res = stats.bootstrap((se,), np.mean, n_resamples=n_resamples, confidence_level=level,
                          method="percentile", rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


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
    fit = stats.linregress(prior - 0.5, delta)
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


def _slope_or_nan(prior: np.ndarray, posterior: np.ndarray) -> float:
    if np.ptp(prior) == 0:
        return np.nan
    return stats.linregress(prior - 0.5, posterior - prior).slope


def ms_ci(prior: Any, posterior: Any, n_resamples: int, level: float,
          seed: int) -> tuple[float, float]:
    """Percentile bootstrap CI of MS, resampling questions (prior, posterior pairs) jointly.

    Fewer than MIN_CI_PAIRS pairs give (nan, nan): too few questions for an interval.
    """
    prior, posterior = np.asarray(prior, dtype=float), np.asarray(posterior, dtype=float)
    if len(prior) < MIN_CI_PAIRS:
        return float("nan"), float("nan")
    res = stats.bootstrap((prior, posterior), _slope_or_nan, paired=True, vectorized=False,
                          n_resamples=n_resamples, confidence_level=level, method="percentile",
                          rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


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
def _ci_note(ci: tuple[float, float], n: int) -> str | None:
    if n < MIN_CI_PAIRS:
        return f"{n} questions < {MIN_CI_PAIRS}: too few for a bootstrap interval"
    if any(np.isnan(ci)):
        return "bootstrap interval undefined (degenerate resamples)"
    return None


def stage_metrics(records: list[dict[str, Any]], n_bootstrap: int = 1000, level: float = 0.95,
                  seed: int = 0) -> dict[str, Any]:
    """The eval.json block for one stage and seed, from its per-question records.

    Every metric of the set is present; one that is undefined on this stage's data is NaN (null
    in JSON) with its reason under ``undefined``. Records with ``snap_draws`` (eval.prior_draws > 0,
    snap mode) add the de-attenuated MS; records with ``stated_neg`` (eval.negations) add the
    negation coherence.
    """
    y = _arr([r["y"] for r in records])
    stated = _arr([r["stated"] for r in records])
    prior = _arr([r["prior"] for r in records])
    post = _arr([r["posterior"] for r in records])
    t_cut = _arr([r["trace_cut"] for r in records])
    t_last = _arr([r["trace_last"] for r in records])
    bayes = _arr([r["bayes_end"] for r in records])
    n = len(records)
    ok = ~np.isnan(stated)
    pair = ~np.isnan(prior) & ~np.isnan(post)
    tpair = ~np.isnan(t_cut) & ~np.isnan(t_last)
    coh = ok & ~np.isnan(t_last)
    out: dict[str, Any] = {
        "n": n,
        "n_stated": int(ok.sum()),
        "n_pairs": int(pair.sum()),
        "parse_rate": float(ok.mean()) if n else float("nan"),
        "prior_parse_rate": float((~np.isnan(prior)).mean()) if n else float("nan"),
        "posterior_parse_rate": float((~np.isnan(post)).mean()) if n else float("nan"),
    }
    undefined: dict[str, str] = {}

    def put(keys: tuple[str, ...], fn: Callable[[], Any]) -> None:
        """Store fn()'s value (a dict is merged) or NaN for every key with the reason."""
        try:
            value = fn()
        except MetricError as e:
            for k in keys:
                out[k] = [float("nan")] * 2 if k.endswith("_ci") else float("nan")
                undefined[k] = str(e)
            return
        if isinstance(value, dict):
            undefined.update(value.pop("undefined", {}))
            out.update(value)
        else:
            out[keys[0]] = value

    yy, bb = y[~np.isnan(bayes)], bayes[~np.isnan(bayes)]
    put(("brier_constant",), lambda: constant_brier(y))
    put(("brier_oracle",), lambda: brier(bb, yy))
    ps, ys = stated[ok], y[ok]
    put(("brier",), lambda: brier(ps, ys))
    put(("bss",), lambda: brier_skill(ps, ys))
    put(("mean_p",), lambda: mean_p(ps))
    put(("share_le_0.05", "share_ge_0.95", "share_extreme", "share_gt_0.8"), lambda: extremes(ps))
    put(("ece",), lambda: ece(ps, ys))
    put(("brier_reliability", "brier_resolution", "brier_uncertainty", "brier_wbv", "brier_wbc"),
        lambda: murphy_decomposition(ps, ys))

    def _brier_ci():
        ci = brier_ci(ps, ys, n_bootstrap, level, seed)
        if (why := _ci_note(ci, len(ps))):
            raise MetricError(f"brier_ci: {why}")
        return list(ci)
    put(("brier_ci",), _brier_ci)

    put(("coherence",), lambda: trace_coherence(stated[coh], t_last[coh]))

    fit_keys = ("ms", "ms_intercept", "lin_r2", "rho", "sigma_ratio", "mean_abs_delta")
    pp, qq = prior[pair], post[pair]
    put(fit_keys, lambda: martingale_fit(pp, qq))
    if "ms" not in undefined and np.isnan(out["rho"]):
        undefined["rho"] = "martingale_fit: constant posterior (σ_post = 0): ρ is undefined"
    put(("inertia",), lambda: inertia(pp, qq))

    def _ms_ci(a, b, name):
        def fn():
            _pair(name, a, b)
            ci = ms_ci(a, b, n_bootstrap, level, seed)
            if (why := _ci_note(ci, len(a))):
                raise MetricError(f"{name}: {why}")
            return list(ci)
        return fn
    put(("ms_ci",), _ms_ci(pp, qq, "ms_ci"))

    tc, tl = t_cut[tpair], t_last[tpair]
    put(("ms_trace",), lambda: martingale_fit(tc, tl)["ms"])
    put(("ms_trace_ci",), _ms_ci(tc, tl, "ms_trace_ci"))

    if any("stated_neg" in r for r in records):
        neg = _arr([r.get("stated_neg") for r in records])
        both = ok & ~np.isnan(neg)
        out["n_negation_pairs"] = int(both.sum())
        put(("negation_coherence",), lambda: negation_coherence(stated[both], neg[both]))

    if any(r.get("snap_draws") for r in records):
        from .deattenuation import DEATT_KEYS, deattenuate
        k = max(len(r.get("snap_draws") or []) for r in records)
        draws = np.array([[np.nan if v is None else float(v) for v in (r.get("snap_draws") or [])]
                          + [np.nan] * (k - len(r.get("snap_draws") or [])) for r in records], dtype=float)
        put(DEATT_KEYS, lambda: deattenuate(prior, post, draws, n_bootstrap, level, seed))
    out["undefined"] = undefined
    return out
