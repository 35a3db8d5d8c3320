"""Stage metrics as statistics of weighted questions, for the crossed interval (stats/crossed.py):
questions resampled jointly across seeds are rows of weights, and each function here gives its
metric under every row at once. Under unit weights each equals the stage metric of the same name.
A metric a finding reads over several seeds gets its crossed interval from its entry here; one
without an entry is bounded from its seeds' own CIs (``crossed.shared_bound``).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from ..stats.crossed import weighted_mean, weighted_moments, weighted_slope
from . import StageColumns
from .core import column

Statistic = Callable[[StageColumns, np.ndarray], np.ndarray]


def _on(mask: np.ndarray, v: np.ndarray) -> np.ndarray:
    """v where ``mask`` holds, NaN elsewhere (weight 0 in a weighted statistic)."""
    return np.where(mask, v, np.nan)


def brier(s: StageColumns, w: np.ndarray) -> np.ndarray:
    """Brier = Σw (y − stated P)² / Σw over questions with a parsed stated P."""
    return weighted_mean(w, _on(s.ok, (s.y - s.stated) ** 2))


def overconfidence(s: StageColumns, w: np.ndarray) -> np.ndarray:
    """meanP − ȳ = Σw (stated P − y) / Σw over questions with a parsed stated P."""
    return weighted_mean(w, _on(s.ok, s.stated - s.y))


def delta_brier(s: StageColumns, w: np.ndarray) -> np.ndarray:
    """ΔBrier = Σw [(y − posterior)² − (y − prior)²] / Σw over questions with both."""
    return weighted_mean(w, _on(s.pair, (s.y - s.post) ** 2 - (s.y - s.prior) ** 2))


def ms(s: StageColumns, w: np.ndarray) -> np.ndarray:
    """MS = weighted OLS slope of posterior − prior on prior − ½ over questions with both."""
    return weighted_slope(w, _on(s.pair, s.prior - 0.5), _on(s.pair, s.post - s.prior))


def ms_trace(s: StageColumns, w: np.ndarray) -> np.ndarray:
    """The trace's MS: weighted slope of trace_last − trace_cut on trace_cut − ½."""
    return weighted_slope(w, _on(s.trace_pair, s.trace_cut - 0.5), _on(s.trace_pair, s.trace_last - s.trace_cut))


def ms_adj(s: StageColumns, w: np.ndarray) -> np.ndarray:
    """MS_adj = β_obs / (1 − σ²_meas / Var(prior)) − 1 (stats/deattenuation.py) with weighted
    moments: β_obs the slope of the posterior on the prior, σ²_meas the weighted mean of each
    question's within-draw variance (questions with ≥ 2 parsed prior reads), Var(prior) with ddof 1."""
    pair = s.pair
    reads = np.column_stack([s.prior, column(s.draws, "draws")])
    enough = pair & ((~np.isnan(reads)).sum(axis=1) >= 2)
    within = np.full(len(s.prior), np.nan)
    with np.errstate(invalid="ignore"):
        within[enough] = np.nanvar(reads[enough], axis=1, ddof=1)
    sigma2 = weighted_mean(w, within)
    sw, _, _, sxx, sxy = weighted_moments(w, _on(pair, s.prior), _on(pair, s.post))
    with np.errstate(invalid="ignore", divide="ignore"):
        var_prior = sxx * sw / (sw - 1)
        reliability = 1 - sigma2 / var_prior
        return np.where(reliability > 0, (sxy / sxx) / reliability - 1, np.nan)


def crowd_delta_brier(s: StageColumns, w: np.ndarray) -> np.ndarray:
    """ΔBrier vs the crowd = Σw [(y − stated P)² − (y − crowd P)²] / Σw over questions with both."""
    crowd = column(s.crowd, "crowd")
    both = s.ok & ~np.isnan(crowd)
    return weighted_mean(w, _on(both, (s.y - s.stated) ** 2 - (s.y - crowd) ** 2))


def effect_brier(child: StageColumns, parent: StageColumns, w: np.ndarray) -> np.ndarray:
    """The paired ΔBrier (stats/effects.py), child − parent over questions both stated a P for."""
    both = child.ok & parent.ok
    return weighted_mean(w, _on(both, (child.y - child.stated) ** 2 - (parent.y - parent.stated) ** 2))


def effect_ms(child: StageColumns, parent: StageColumns, w: np.ndarray) -> np.ndarray:
    """The paired ΔMS, MS(child) − MS(parent) over questions both read a prior and a posterior for."""
    both = child.pair & parent.pair
    return ms(_masked(child, both), w) - ms(_masked(parent, both), w)


def _masked(s: StageColumns, keep: np.ndarray) -> StageColumns:
    """The stage's prior and posterior where ``keep`` holds (NaN elsewhere): a pairing's questions."""
    return replace(s, prior=_on(keep, s.prior), post=_on(keep, s.post))


STAGE: dict[str, Statistic] = {"brier": brier, "overconfidence": overconfidence, "delta_brier": delta_brier,
                               "ms": ms, "ms_trace": ms_trace, "ms_adj": ms_adj,
                               "crowd_delta_brier": crowd_delta_brier}
"""metric key → its weighted statistic of one stage's columns (the metric a finding reads)."""
EFFECT: dict[str, Callable[[StageColumns, StageColumns, np.ndarray], np.ndarray]] = {
    "brier": effect_brier, "ms": effect_ms}
"""effect part (``effect.brier``, ``effect.ms``) → its weighted statistic of the paired stages."""
