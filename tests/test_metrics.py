"""Metrics: Brier from stated P, BSS, MS as the OLS slope, the ρσ identity, the bootstrap CI."""
import numpy as np
import pytest
from scipy import stats

from martingale.metrics import brier, brier_skill, constant_brier, martingale_fit, ms_ci, stage_metrics


def test_brier_is_mean_squared_error_of_stated_p():
    assert brier(np.array([0.2, 0.9]), np.array([0, 1])) == pytest.approx((0.04 + 0.01) / 2)


def test_bss_is_zero_for_stating_the_base_rate():
    y = np.array([1, 0, 0, 0])
    assert brier_skill(np.full(4, 0.25), y) == pytest.approx(0.0)
    assert constant_brier(y) == pytest.approx(0.1875)


def test_ms_equals_rho_sigma_ratio_minus_one():
    rng = np.random.default_rng(0)
    prior = rng.uniform(0.05, 0.95, 500)
    post = np.clip(prior + 0.3 * (prior - 0.5) + rng.normal(0, 0.1, 500), 0, 1)
    fit = martingale_fit(prior, post)
    assert fit["ms"] == pytest.approx(fit["rho"] * fit["sigma_ratio"] - 1, abs=1e-12)
    assert fit["ms"] == pytest.approx(stats.linregress(prior, post - prior).slope)


def test_ms_of_a_simulated_martingale_is_near_zero_and_ci_covers_it():
    rng = np.random.default_rng(1)
    prior = rng.uniform(0.1, 0.9, 3000)
    y = rng.random(3000) < prior
    post = np.clip(prior + np.where(y, 1 - prior, -prior) * 0.3, 0, 1)  # E[post | prior] = prior
    lo, hi = ms_ci(prior, post, 300, 0.95, 0)
    assert lo < 0 < hi


def test_entrenchment_gives_positive_ms():
    prior = np.linspace(0.2, 0.8, 50)
    assert martingale_fit(prior, np.clip(prior + 0.5 * (prior - 0.5), 0, 1))["ms"] == pytest.approx(0.5)


def _rec(y, prior, post, stated, last=None):
    return {"y": y, "prior": prior, "posterior": post, "stated": stated, "trace_cut": prior,
            "trace_last": last if last is not None else stated, "bayes_end": 0.5}


def test_parse_failures_are_counted_and_excluded_never_zero():
    recs = [_rec(1, 0.6, 0.8, 0.8), _rec(0, 0.3, 0.2, None), _rec(1, 0.7, 0.9, 0.9), _rec(0, 0.4, 0.1, 0.1)]
    m = stage_metrics(recs, n_bootstrap=50)
    assert m["parse_rate"] == 0.75 and m["n_stated"] == 3
    assert m["brier"] == pytest.approx(((0.2) ** 2 + 0.1 ** 2 + 0.1 ** 2) / 3)


def test_coherence_is_the_gap_between_stated_p_and_the_trace_last_belief():
    recs = [_rec(1, 0.6, 0.8, 0.8, last=0.7), _rec(0, 0.3, 0.2, 0.2, last=0.3)]
    assert stage_metrics(recs, n_bootstrap=20)["coherence"] == pytest.approx(0.1)
