"""Belief dynamics: MS (the OLS slope of Δ on the prior) with its fit, the identity, inertia, ΔBrier
of reasoning, the trace's MS and the de-attenuated MS; every stage metric is registered here."""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ..core.lazy import module
from ..stats import Block, MetricError, bootstrap_ci, ms_regression, ms_slope, too_few_for_ci
from ..stats.deattenuation import DEATT_KEYS, deattenuate
from .calibration import brier, squared_errors
from .core import StageColumns, _pair, check_probs, ci_note, column, share, stage_metric

stats = module("scipy.stats")   # imported on first use (martingale.core.lazy)

INERTIA_EPS = 0.02    # |Δ| at or below this counts as "did not move" (the reward's info_eps)


def martingale_fit(prior: ArrayLike, posterior: ArrayLike) -> dict[str, float]:
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


def inertia(prior: ArrayLike, posterior: ArrayLike, eps: float = INERTIA_EPS) -> float:
    """Inertia = share of questions whose belief did not move: |posterior − prior| ≤ eps.

    (The log reports inertia beside mean |Δ| without a formula; this is ours, with eps = the
    reward's info_eps, the movement below which the info term calls a belief stuck.)
    """
    prior = check_probs("inertia (prior)", prior)
    posterior = check_probs("inertia (posterior)", posterior)
    if prior.shape != posterior.shape:
        raise MetricError(f"inertia: {len(prior)} priors but {len(posterior)} posteriors")
    return float(np.mean(np.abs(posterior - prior) <= eps + 1e-12))   # 1e-12: float rounding of p ± eps


def ms_ci(prior: ArrayLike, posterior: ArrayLike, n_resamples: int, level: float,
          seed: int) -> tuple[float, float]:
    """Percentile bootstrap CI of MS, resampling questions (prior, posterior pairs) jointly.

    Fewer than MIN_CI_PAIRS pairs give (nan, nan): too few questions for an interval.
    """
    prior, posterior = np.asarray(prior, dtype=float), np.asarray(posterior, dtype=float)
    if too_few_for_ci(len(prior)):
        return float("nan"), float("nan")
    low, high = bootstrap_ci((prior, posterior), ms_slope, n_resamples, level, seed)
    return float(low), float(high)


def delta_brier_ci(first: ArrayLike, last: ArrayLike, y: ArrayLike, n_resamples: int, level: float,
                   seed: int) -> tuple[float, float]:
    """Percentile bootstrap CI of ΔBrier = mean (y − last)² − (y − first)², resampling episodes."""
    d = squared_errors(last, y) - squared_errors(first, y)
    if too_few_for_ci(len(d)):
        return float("nan"), float("nan")
    low, high = bootstrap_ci((d,), np.mean, n_resamples, level, seed, paired=False, vectorized=None)
    return float(low), float(high)


MS_FIT_KEYS = ("ms", "ms_intercept", "lin_r2", "rho", "sigma_ratio", "mean_abs_delta")


@stage_metric("n_pairs", reads=("prior", "post"))
def _n_pairs(s: StageColumns) -> int:
    """n_pairs = questions with a parsed prior and posterior."""
    return int(s.pair.sum())


@stage_metric("prior_parse_rate", reads=("prior",))
def _prior_parse_rate(s: StageColumns) -> float:
    """prior_parse_rate = (questions with a parsed prior) / n."""
    return share(~np.isnan(s.prior))


@stage_metric("posterior_parse_rate", reads=("post",))
def _posterior_parse_rate(s: StageColumns) -> float:
    """posterior_parse_rate = (questions with a parsed posterior) / n."""
    return share(~np.isnan(s.post))


@stage_metric(*MS_FIT_KEYS, reads=("prior", "post"))
def _fit(s: StageColumns) -> Block:
    """MS = OLS slope of Δ = posterior − prior on (prior − ½), with linR², ρ, σ_post/σ_prior and
    mean |Δ|; ρ is undefined (NaN, with the reason) for a constant posterior."""
    fit = martingale_fit(s.prior[s.pair], s.post[s.pair])
    out: Block = {**fit}
    if np.isnan(fit["rho"]):
        out["undefined"] = {"rho": "martingale_fit: constant posterior (σ_post = 0): ρ is undefined"}
    return out


@stage_metric("ms_identity_gap", "ms_identity_gap_ci", reads=("prior", "post"))
def _identity_gap(s: StageColumns) -> dict[str, float | list[float]]:
    """The log's identity checked on the stage's own pairs: gap = MS − (ρ·σ_post/σ_prior − 1), to
    1e-9 (exact for an OLS slope; a gap means the MS was not the slope of these pairs). An identity
    has no sampling error: its interval is [gap, gap]."""
    fit = martingale_fit(s.prior[s.pair], s.post[s.pair])
    if np.isnan(fit["rho"]):
        raise MetricError("ms_identity_gap: constant posterior (σ_post = 0): ρ is undefined")
    gap = round(fit["ms"] - (fit["rho"] * fit["sigma_ratio"] - 1.0), 9) + 0.0
    return {"ms_identity_gap": gap, "ms_identity_gap_ci": [gap, gap]}


@stage_metric("signed_lin_r2", reads=("prior", "post"))
def _signed_lin_r2(s: StageColumns) -> float:
    """Signed linR² = sign(MS) · linR²: how much of the update the prior predicts, with the
    direction (> 0 entrenchment, < 0 regression); the research log's "signed linR²"."""
    fit = martingale_fit(s.prior[s.pair], s.post[s.pair])
    return float(np.sign(fit["ms"]) * fit["lin_r2"])


@stage_metric("inertia", reads=("prior", "post"))
def _inertia(s: StageColumns) -> float:
    """Inertia = share of questions with |posterior − prior| ≤ INERTIA_EPS."""
    return inertia(s.prior[s.pair], s.post[s.pair])


def _ms_interval(name: str, prior: np.ndarray, posterior: np.ndarray, s: StageColumns) -> list[float]:
    """A paired percentile bootstrap CI of the MS of these pairs, or MetricError with why not."""
    _pair(name, prior, posterior)
    ci = ms_ci(prior, posterior, s.n_bootstrap, s.level, s.seed)
    if (why := ci_note(ci, len(prior))):
        raise MetricError(f"{name}: {why}")
    return list(ci)


@stage_metric("ms_ci", reads=("prior", "post"))
def _ms_ci(s: StageColumns) -> list[float]:
    """Paired percentile bootstrap CI of MS over (prior, posterior) pairs."""
    return _ms_interval("ms_ci", s.prior[s.pair], s.post[s.pair], s)


@stage_metric("brier_prior", reads=("prior", "post", "y"))
def _brier_prior(s: StageColumns) -> float:
    """Brier(prior) = mean (y − prior)² over questions with a parsed prior and posterior."""
    return brier(s.prior[s.pair], s.y[s.pair])


@stage_metric("delta_brier", reads=("prior", "post", "y"))
def _delta_brier(s: StageColumns) -> float:
    """ΔBrier = Brier(posterior) − Brier(prior) on the same questions: < 0, reasoning helped."""
    return brier(s.post[s.pair], s.y[s.pair]) - brier(s.prior[s.pair], s.y[s.pair])


@stage_metric("delta_brier_ci", reads=("prior", "post", "y"))
def _delta_brier_ci(s: StageColumns) -> list[float]:
    """Percentile bootstrap CI of ΔBrier, resampling questions."""
    _pair("delta_brier_ci", s.prior[s.pair], s.post[s.pair])
    ci = delta_brier_ci(s.prior[s.pair], s.post[s.pair], s.y[s.pair], s.n_bootstrap, s.level, s.seed)
    if (why := ci_note(ci, int(s.pair.sum()))):
        raise MetricError(f"delta_brier_ci: {why}")
    return list(ci)


@stage_metric("ms_trace", reads=("trace_cut", "trace_last"))
def _ms_trace(s: StageColumns) -> float:
    """MS of the trace: OLS slope of (trace_last − trace_cut) on (trace_cut − ½)."""
    return martingale_fit(s.trace_cut[s.trace_pair], s.trace_last[s.trace_pair])["ms"]


@stage_metric("ms_trace_ci", reads=("trace_cut", "trace_last"))
def _ms_trace_ci(s: StageColumns) -> list[float]:
    """Paired percentile bootstrap CI of the trace's MS."""
    return _ms_interval("ms_trace_ci", s.trace_cut[s.trace_pair], s.trace_last[s.trace_pair], s)


@stage_metric(*DEATT_KEYS, reads=("prior", "post", "draws"))
def _deattenuated(s: StageColumns) -> Block:
    """De-attenuated MS from the snap prior re-draws: MS_adj = β_obs / reliability − 1 and
    MS_iv = Cov(z, posterior) / Cov(z, prior) − 1 (see ``deattenuation``)."""
    return deattenuate(s.prior, s.post, column(s.draws, "draws"), s.n_bootstrap, s.level, s.seed)
