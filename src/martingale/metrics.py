"""Per-stage metrics over (y, prior, posterior, stated P). Unparsed values are NaN and excluded.

Every metric is a small pure function; its docstring gives the formula. Brier is always from the
model's own stated P, never from a judge read (a judge moderates beliefs and launders calibration).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from scipy import stats


MIN_CI_PAIRS = 10


def _arr(x: Sequence[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in x], dtype=float)


def brier(p: np.ndarray, y: np.ndarray) -> float:
    """Brier = mean (y − p)² over the stated probabilities p."""
    return float(np.mean((y - p) ** 2))


def constant_brier(y: np.ndarray) -> float:
    """Brier of always stating the base rate ȳ: ȳ(1 − ȳ)."""
    r = float(np.mean(y))
    return r * (1 - r)


def brier_skill(p: np.ndarray, y: np.ndarray) -> float:
    """BSS = 1 − Brier / Brier(base-rate constant); > 0 beats stating the base rate."""
    return 1.0 - brier(p, y) / constant_brier(y)


def martingale_fit(prior: np.ndarray, posterior: np.ndarray) -> dict[str, float]:
    """MS = OLS slope β of Δ = posterior − prior on (prior − ½); linR² = R² of that fit.

    0 is a martingale, > 0 entrenchment. Identity: β = ρ·σ_post/σ_prior − 1.
    """
    delta = posterior - prior
    fit = stats.linregress(prior - 0.5, delta)
    rho = float(stats.pearsonr(prior, posterior).statistic)
    return {
        "ms": float(fit.slope),
        "ms_intercept": float(fit.intercept),
        "lin_r2": float(fit.rvalue ** 2),
        "rho": rho,
        "sigma_ratio": float(np.std(posterior) / np.std(prior)),
        "mean_abs_delta": float(np.mean(np.abs(delta))),
    }


def ms_ci(prior: np.ndarray, posterior: np.ndarray, n_resamples: int, level: float,
          seed: int) -> tuple[float, float]:
    """Percentile bootstrap CI of MS, resampling questions (prior, posterior pairs) jointly.

    Fewer than MIN_CI_PAIRS pairs give (nan, nan): too few questions for an interval.
    """
    if len(prior) < MIN_CI_PAIRS:
        return float("nan"), float("nan")

    def slope(a, b):
        if np.ptp(a) == 0:
            return np.nan
        return stats.linregress(a - 0.5, b - a).slope
    res = stats.bootstrap((prior, posterior), slope, paired=True, vectorized=False,
                          n_resamples=n_resamples, confidence_level=level, method="percentile",
                          rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def stage_metrics(records: list[dict[str, Any]], n_bootstrap: int = 1000, level: float = 0.95,
                  seed: int = 0) -> dict[str, Any]:
    """The eval.json block for one stage and seed, from its per-question records."""
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
        "brier_constant": constant_brier(y),
        "brier_oracle": brier(bayes, y),
    }
    if ok.sum() >= 2:
        out.update({
            "brier": brier(stated[ok], y[ok]),
            "bss": brier_skill(stated[ok], y[ok]),
            "mean_p": float(np.mean(stated[ok])),
            "share_gt_0.8": float(np.mean(stated[ok] > 0.8)),
        })
    if coh.sum():
        out["coherence"] = float(np.mean(np.abs(stated[coh] - t_last[coh])))
    if pair.sum() >= 3 and np.std(prior[pair]) > 0:
        out.update(martingale_fit(prior[pair], post[pair]))
        out["ms_ci"] = list(ms_ci(prior[pair], post[pair], n_bootstrap, level, seed))
    if tpair.sum() >= 3 and np.std(t_cut[tpair]) > 0:
        fit = martingale_fit(t_cut[tpair], t_last[tpair])
        out["ms_trace"] = fit["ms"]
        out["ms_trace_ci"] = list(ms_ci(t_cut[tpair], t_last[tpair], n_bootstrap, level, seed))
    return out
