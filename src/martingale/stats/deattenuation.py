"""De-attenuated Martingale Score: a prior read with noise biases MS, repeated draws undo it.

Errors-in-variables (log §6): a prior read is prior_obs = belief + e, with e independent of the
belief and of the posterior, variance σ²_meas. The OLS slope of the posterior on prior_obs is then
attenuated, β_obs = λ·β with λ = Var(belief)/Var(prior_obs) = 1 − σ²_meas/Var(prior_obs), so even a
true martingale (β = 1, MS = 0) reads MS_raw = λ − 1 < 0. Two corrections from K repeated prior
draws per question (the eval's ``snap_draws``):

- ratio, the research log's MS_adj (2026-06-09 validation): σ²_meas = the mean over questions of the
  within-question variance of the draws (the observed prior and its K re-draws, ddof 1);
  reliability = 1 − σ²_meas / Var_q(prior_obs); MS_adj = β_obs / reliability − 1.
- instrument: a re-draw z of the same prior has noise independent of prior_obs's, so it is an
  instrument for it: β_IV = Cov(z, posterior) / Cov(z, prior_obs); MS_iv = β_IV − 1. z is the
  mean of the K re-draws (with K = 1, one draw instruments the other).

Degenerate when Var_q(prior) ≈ σ²_meas: the reliability nears 0 and MS_adj explodes (the research log's
recal_base, reliability 0.34: "applies cleanly only when Var_q(prior) >> σ²_meas"). Below
``min_reliability`` the numbers are still reported and ``deatt_degenerate`` is true, with the
reason in ``deatt_note``; at reliability ≤ 0 MS_adj is NaN with the reason under ``undefined``.

``tests/oracle_check.py`` validates both against the embedded world's exact Bayes beliefs
(a true martingale) with known noise added to the prior.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from . import Block, MetricError, bootstrap_ci, ols, too_few_for_ci

MIN_RELIABILITY = 0.5   # below this Var(prior) < 2·σ²_meas: the correction is noise-dominated

DEATT_KEYS = ("n_draws", "n_deatt", "sigma2_meas", "var_prior", "reliability", "ms_adj", "ms_adj_ci",
              "ms_iv", "ms_iv_ci", "deatt_degenerate", "deatt_note")


def measurement_variance(draws: np.ndarray) -> float:
    """σ²_meas = mean over questions of the sample variance (ddof 1) of that question's prior draws
    (rows: questions, columns: draws; NaN = unparsed, skipped). Needs a question with ≥ 2 draws."""
    draws = np.asarray(draws, dtype=float)
    if draws.ndim != 2:
        raise MetricError(f"measurement_variance: draws must be questions × draws, got shape {draws.shape}")
    enough = (~np.isnan(draws)).sum(axis=1) >= 2
    if not enough.any():
        raise MetricError("measurement_variance: no question has two parsed prior draws")
    return float(np.mean(np.nanvar(draws[enough], axis=1, ddof=1)))


def reliability(var_prior: float, sigma2_meas: float) -> float:
    """reliability = 1 − σ²_meas / Var_q(prior): the share of the prior's variance that is belief."""
    if not var_prior > 0:
        raise MetricError("reliability: the prior does not vary across questions (Var_q(prior) = 0)")
    return 1.0 - sigma2_meas / var_prior


def beta_obs(prior: np.ndarray, posterior: np.ndarray) -> float:
    """β_obs = OLS slope of the posterior on the prior (= 1 + MS_raw; fitted as posterior on prior,
    not as 1 + MS, so the numbers stay those the research log reports)."""
    return float(ols(prior, posterior).slope)


def ms_adjusted(prior: np.ndarray, posterior: np.ndarray, sigma2_meas: float) -> float:
    """MS_adj = β_obs / reliability − 1; NaN (MetricError) when reliability ≤ 0."""
    rel = reliability(float(np.var(prior, ddof=1)), sigma2_meas)
    if rel <= 0:
        raise MetricError(f"ms_adj: reliability {rel:.3f} ≤ 0: σ²_meas ≥ Var_q(prior), the prior is all noise")
    return beta_obs(prior, posterior) / rel - 1.0


def ms_instrumented(prior: np.ndarray, posterior: np.ndarray, instrument: np.ndarray) -> float:
    """MS_iv = Cov(z, posterior) / Cov(z, prior) − 1, z an independent re-draw of the prior."""
    c = np.cov(np.vstack([instrument, prior, posterior]))
    if abs(c[0, 1]) < 1e-12:
        raise MetricError("ms_iv: the instrument does not covary with the prior (weak instrument)")
    return float(c[0, 2] / c[0, 1] - 1.0)


def _adj_and_iv(prior: np.ndarray, posterior: np.ndarray, extra: np.ndarray) -> tuple[float, float]:
    """(MS_adj, MS_iv) on one (re)sample, NaN where undefined: the bootstrap's statistic."""
    allk = np.column_stack([prior, extra])
    try:
        adj = ms_adjusted(prior, posterior, measurement_variance(allk))
    except MetricError:
        adj = np.nan
    cnt = (~np.isnan(extra)).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(cnt > 0, np.nansum(extra, axis=1) / cnt, np.nan)   # mean of the parsed re-draws
    okz = ~np.isnan(z)
    try:
        iv = ms_instrumented(prior[okz], posterior[okz], z[okz]) if okz.sum() >= 3 else np.nan
    except MetricError:
        iv = np.nan
    return adj, iv


def deattenuate(prior: ArrayLike, posterior: ArrayLike, draws: ArrayLike, n_bootstrap: int = 1000, level: float = 0.95,
                seed: int = 0, min_reliability: float = MIN_RELIABILITY) -> Block:
    """The de-attenuation block for one stage: σ²_meas, Var_q(prior), reliability, MS_adj and
    MS_iv with paired percentile-bootstrap CIs (questions resampled with all their draws).

    prior, posterior: per question (NaN = unparsed); draws: questions × K re-draws of the prior,
    independent of ``prior`` (NaN = unparsed). Questions without a parsed prior and posterior are
    dropped. Raises MetricError when nothing can be estimated (fewer than 3 pairs, no draws).
    """
    return _deattenuate(np.asarray(prior, dtype=float), np.asarray(posterior, dtype=float),
                        np.asarray(draws, dtype=float), n_bootstrap, level, seed, min_reliability)


def _deattenuate(prior: np.ndarray, posterior: np.ndarray, draws: np.ndarray, n_bootstrap: int, level: float,
                 seed: int, min_reliability: float) -> Block:
    if draws.ndim != 2 or draws.shape[0] != len(prior) or draws.shape[1] < 1:
        raise MetricError(f"deattenuate: draws must be {len(prior)} questions × K ≥ 1, got {draws.shape}")
    keep = ~np.isnan(prior) & ~np.isnan(posterior)
    prior, posterior, draws = prior[keep], posterior[keep], draws[keep]
    if len(prior) < 3:
        raise MetricError(f"deattenuate: needs at least 3 prior/posterior pairs, got {len(prior)}")
    if np.ptp(prior) == 0:
        raise MetricError("deattenuate: constant prior (σ_prior = 0): the slope on the prior is undefined")
    s2 = measurement_variance(np.column_stack([prior, draws]))
    var_prior = float(np.var(prior, ddof=1))
    rel = reliability(var_prior, s2)
    undefined: dict[str, str] = {}
    adj, iv = _adj_and_iv(prior, posterior, draws)
    if np.isnan(adj):
        undefined["ms_adj"] = f"ms_adj: reliability {rel:.3f} ≤ 0: σ²_meas ≥ Var_q(prior), the prior is all noise"
    if np.isnan(iv):
        undefined["ms_iv"] = "ms_iv: no usable instrument (re-draws unparsed or not covarying with the prior)"
    note = None
    if rel < min_reliability:
        note = (f"noise-dominated prior: reliability {rel:.3f} < {min_reliability} (σ²_meas {s2:.4f} vs "
                f"Var_q(prior) {var_prior:.4f}); the correction divides by a small, noisy number")
    out: Block = {
        "n_draws": int(draws.shape[1]), "n_deatt": int(len(prior)),
        "sigma2_meas": s2, "var_prior": var_prior, "reliability": rel,
        "ms_adj": float(adj), "ms_iv": float(iv),
        "deatt_degenerate": note is not None, "deatt_note": note,
    }
    nan2 = [float("nan"), float("nan")]
    if (why := too_few_for_ci(len(prior))):
        out["ms_adj_ci"] = out["ms_iv_ci"] = nan2
        undefined["ms_adj_ci"] = undefined["ms_iv_ci"] = why
    else:
        cols = tuple(draws[:, j] for j in range(draws.shape[1]))

        def statistic(a, b, *extra):
            return np.array(_adj_and_iv(a, b, np.column_stack(extra)))

        lo, hi = bootstrap_ci((prior, posterior, *cols), statistic, n_bootstrap, level, seed)
        for i, key in enumerate(("ms_adj_ci", "ms_iv_ci")):
            out[key] = [float(lo[i]), float(hi[i])]
            if np.isnan(lo[i]) or np.isnan(hi[i]):
                undefined[key] = f"{key}: undefined in some resamples (reliability ≤ 0 or a weak instrument)"
    out["undefined"] = undefined
    return out

