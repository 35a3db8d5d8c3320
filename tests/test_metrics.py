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


# ------------------------------------------------------------------------------------------------
# The full metric set against independent references (sklearn, scipy, plain loops), on random and
# adversarial data; invariants as properties; degenerate input gives a clear error or a NaN with
# its reason, never a silent number.
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.calibration import calibration_curve
from sklearn.metrics import brier_score_loss

from martingale.metrics import (
    N_BINS,
    MetricError,
    brier_ci,
    calibration_bins,
    declared_metrics,
    ece,
    extremes,
    inertia,
    mean_p,
    murphy_decomposition,
    negation_coherence,
    squared_errors,
    trace_coherence,
)
from martingale.stats import MIN_CI_PAIRS, bootstrap_ci, ms_slope, nan_array, nan_matrix, too_few_for_ci
from martingale.stats.deattenuation import DEATT_KEYS

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
EDGES = np.linspace(0, 1, N_BINS + 1)


def _random(n=400, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.random(n)
    return p, (rng.random(n) < p).astype(int)


def _adversarial():
    """Bin edges exactly, the ends 0 and 1, ties, and extreme confident misses."""
    p = np.concatenate([EDGES, EDGES, [0, 0, 1, 1, 0.5, 0.5, 0.05, 0.95, 0.8, 0.8000001]])
    y = np.array([i % 2 for i in range(len(p))])
    y[-10:] = [1, 0, 0, 1, 1, 0, 1, 0, 0, 1]   # p = 0 with y = 1 and p = 1 with y = 0: maximal loss
    return p, y


@st.composite
def forecasts(draw, min_n=3, both_classes=False):
    n = draw(st.integers(min_n, 80))
    p = draw(arrays(float, n, elements=st.floats(0, 1, allow_nan=False)))
    y = draw(arrays(np.int64, n, elements=st.integers(0, 1)))
    if both_classes and y.min() == y.max():
        y[0] = 1 - y[0]
    return p, y


@pytest.mark.parametrize("data", [_random(), _random(37, 3), _adversarial()], ids=["random", "small", "adversarial"])
def test_brier_matches_sklearn(data):
    p, y = data
    assert brier(p, y) == pytest.approx(brier_score_loss(y, p), abs=1e-15)
    assert squared_errors(p, y).mean() == pytest.approx(brier_score_loss(y, p), abs=1e-15)


@pytest.mark.parametrize("data", [_random(), _random(37, 3), _adversarial()], ids=["random", "small", "adversarial"])
def test_calibration_bins_match_sklearn_calibration_curve_even_on_bin_edges(data):
    p, y = data
    true, pred = calibration_curve(y, p, n_bins=N_BINS, strategy="uniform")
    t = calibration_bins(p, y)
    ok = t["count"] > 0
    np.testing.assert_allclose(t["freq"][ok], true, atol=1e-12)
    np.testing.assert_allclose(t["mean_p"][ok], pred, atol=1e-12)
    assert t["count"].sum() == len(p)


def test_ece_matches_a_reference_from_calibration_curve_and_histogram_counts():
    p, y = _random(2000, 5)          # continuous p: no value on a bin edge
    true, pred = calibration_curve(y, p, n_bins=N_BINS, strategy="uniform")
    counts, _ = np.histogram(p, bins=EDGES)
    w = counts[counts > 0] / len(p)
    assert ece(p, y) == pytest.approx(float(np.sum(w * np.abs(true - pred))), abs=1e-12)
    assert ece(np.full(4, 0.5), np.array([1, 0, 1, 0])) == 0.0
    assert ece(np.array([1.0, 1.0]), np.array([0, 0])) == 1.0


def _murphy_by_loops(p, y):
    """Murphy's REL, RES, UNC grouping by each distinct forecast value, in plain loops."""
    n, ybar = len(p), float(np.mean(y))
    rel = res = 0.0
    for v in sorted(set(p.tolist())):
        idx = [i for i in range(n) if p[i] == v]
        ok = sum(y[i] for i in idx) / len(idx)
        rel += len(idx) * (v - ok) ** 2
        res += len(idx) * (ok - ybar) ** 2
    return rel / n, res / n, ybar * (1 - ybar)


def test_murphy_decomposition_matches_the_classical_one_for_forecasts_constant_within_bins():
    rng = np.random.default_rng(2)
    p = rng.choice([0.05, 0.15, 0.35, 0.55, 0.85, 0.95], 500)   # one value per bin
    y = (rng.random(500) < p).astype(int)
    m = murphy_decomposition(p, y)
    rel, res, unc = _murphy_by_loops(p, y)
    assert m["brier_reliability"] == pytest.approx(rel, abs=1e-12)
    assert m["brier_resolution"] == pytest.approx(res, abs=1e-12)
    assert m["brier_uncertainty"] == pytest.approx(unc, abs=1e-12)
    assert m["brier_wbv"] == pytest.approx(0, abs=1e-15) and m["brier_wbc"] == pytest.approx(0, abs=1e-15)
    assert rel - res + unc == pytest.approx(brier_score_loss(y, p), abs=1e-12)


@PROPS
@given(forecasts(min_n=1))
def test_murphy_decomposition_sums_to_brier_exactly(data):
    p, y = data
    m = murphy_decomposition(p, y)
    total = m["brier_reliability"] - m["brier_resolution"] + m["brier_uncertainty"] + m["brier_wbv"] - m["brier_wbc"]
    assert total == pytest.approx(brier_score_loss(y, p, labels=[0, 1]), abs=1e-12)
    assert m["brier_reliability"] >= 0 and m["brier_resolution"] >= 0 and m["brier_wbv"] >= 0


@PROPS
@given(forecasts(both_classes=True))
def test_bss_is_one_minus_the_ratio_to_the_base_rate_constant(data):
    p, y = data
    ref = brier_score_loss(y, np.full(len(y), y.mean()))
    assert constant_brier(y) == pytest.approx(ref, abs=1e-12)
    assert brier_skill(p, y) == pytest.approx(1 - brier_score_loss(y, p) / ref, rel=1e-9, abs=1e-12)


def test_extremes_mean_p_inertia_and_coherences_by_hand():
    p = np.array([0.0, 0.05, 0.06, 0.5, 0.8, 0.81, 0.95, 1.0])
    e = extremes(p)
    assert e == {"share_le_0.05": 2 / 8, "share_ge_0.95": 2 / 8, "share_extreme": 4 / 8, "share_gt_0.8": 3 / 8}
    assert mean_p(p) == pytest.approx(p.sum() / 8)
    prior = np.array([0.2, 0.5, 0.7, 0.9])
    assert inertia(prior, prior + np.array([0.0, 0.02, -0.03, 0.1])) == 0.5
    assert negation_coherence(np.array([0.7, 0.2]), np.array([0.3, 0.6])) == pytest.approx((0 + 0.2) / 2)
    assert trace_coherence(np.array([0.7, 0.2]), np.array([0.6, 0.2])) == pytest.approx(0.05)


@pytest.mark.parametrize("seed", range(5))
def test_ms_and_its_pieces_match_scipy_on_random_data(seed):
    rng = np.random.default_rng(seed)
    prior = rng.random(200)
    post = np.clip(prior + rng.normal(0, 0.2, 200), 0, 1)
    fit = martingale_fit(prior, post)
    ref = stats.linregress(prior - 0.5, post - prior)
    assert fit["ms"] == pytest.approx(ref.slope, abs=1e-12)
    assert fit["ms_intercept"] == pytest.approx(ref.intercept, abs=1e-12)
    assert fit["lin_r2"] == pytest.approx(ref.rvalue ** 2, abs=1e-12)
    assert fit["rho"] == pytest.approx(np.corrcoef(prior, post)[0, 1], abs=1e-12)
    assert fit["sigma_ratio"] == pytest.approx(post.std() / prior.std(), abs=1e-12)
    assert fit["mean_abs_delta"] == pytest.approx(np.abs(post - prior).mean(), abs=1e-15)


@PROPS
@given(forecasts(min_n=3))
def test_rho_sigma_identity_is_exact(data):
    prior, _ = data
    post = np.clip(prior[::-1] * 0.7 + 0.1, 0, 1)
    if np.ptp(prior) < 1e-6 or np.ptp(post) < 1e-6:
        return
    fit = martingale_fit(prior, post)
    assert fit["ms"] == pytest.approx(fit["rho"] * fit["sigma_ratio"] - 1, abs=1e-9)


@PROPS
@given(st.integers(0, 2 ** 32 - 1))
def test_ms_of_a_simulated_martingale_is_near_zero(seed):
    rng = np.random.default_rng(seed)
    prior = rng.uniform(0.05, 0.95, 4000)
    y = rng.random(4000) < prior
    # Partial resolution: the posterior moves a random fraction towards the outcome, E[post|prior] = prior.
    post = prior + rng.uniform(0, 1, 4000) * (y - prior)
    assert abs(martingale_fit(prior, post)["ms"]) < 0.06


def test_brier_ci_covers_the_population_brier():
    rng = np.random.default_rng(4)
    p = rng.random(600)
    y = (rng.random(600) < p).astype(int)      # calibrated: E[(y − p)²] = E[p(1 − p)] = 1/6
    lo, hi = brier_ci(p, y, 500, 0.95, 0)
    assert lo < 1 / 6 < hi


# ---------------------------------------------------------------- degenerate input: clear errors
@pytest.mark.parametrize("call, match", [
    (lambda: brier([], []), "at least 1"),
    (lambda: brier([np.nan, np.nan], [0, 1]), "every value is NaN"),
    (lambda: brier([0.2, np.nan], [0, 1]), "NaN values"),
    (lambda: brier([0.2, 1.2], [0, 1]), r"\[0, 1\]"),
    (lambda: brier([0.2, 0.3], [0, 2]), "labels must be 0 or 1"),
    (lambda: brier([0.2, 0.3], [0]), "labels for 2"),
    (lambda: brier_skill([0.2, 0.3], [1, 1]), "one class only"),
    (lambda: martingale_fit([0.2, 0.3], [0.3, 0.4]), "at least 3"),
    (lambda: martingale_fit([0.4] * 5, [0.1, 0.2, 0.3, 0.4, 0.5]), "constant prior"),
    (lambda: martingale_fit([np.nan] * 5, [0.1] * 5), "every value is NaN"),
    (lambda: martingale_fit([0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3]), "4 priors but 3"),
    (lambda: ece([[0.1]], [1]), "1-D"),
    (lambda: negation_coherence([0.1, 0.2], [0.5]), "differ in length"),
])
def test_degenerate_input_raises_a_clear_metric_error(call, match):
    with pytest.raises(MetricError, match=match):
        call()


def test_a_constant_posterior_has_an_ms_but_no_rho():
    fit = martingale_fit(np.array([0.2, 0.5, 0.8]), np.full(3, 0.5))
    assert fit["ms"] == pytest.approx(-1.0) and math.isnan(fit["rho"])


def _block(recs):
    return stage_metrics(recs, n_bootstrap=50)


def test_stage_metrics_writes_nan_with_a_reason_for_every_undefined_metric():
    # constant priors, one class only, and fewer than 10 questions
    recs = [_rec(1, 0.5, p, p) for p in (0.6, 0.7, 0.8, 0.9)]
    m = _block(recs)
    assert math.isnan(m["ms"]) and "constant prior" in m["undefined"]["ms"]
    assert math.isnan(m["rho"]) and "constant prior" in m["undefined"]["rho"]
    assert math.isnan(m["bss"]) and "one class only" in m["undefined"]["bss"]
    assert all(math.isnan(v) for v in m["ms_ci"]) and "constant prior" in m["undefined"]["ms_ci"]
    assert all(math.isnan(v) for v in m["brier_ci"]) and "too few" in m["undefined"]["brier_ci"]
    assert m["brier"] == pytest.approx(np.mean([(1 - p) ** 2 for p in (0.6, 0.7, 0.8, 0.9)]))
    assert "brier" not in m["undefined"]


def test_stage_metrics_with_nothing_parsed_says_so():
    m = _block([_rec(1, None, None, None), _rec(0, None, None, None), _rec(1, None, None, None)])
    assert m["parse_rate"] == 0.0 and m["n_stated"] == 0
    for key in ("brier", "bss", "mean_p", "ece", "ms", "share_gt_0.8", "brier_reliability"):
        assert math.isnan(m[key]), key
        assert "at least" in m["undefined"][key], key


def test_stage_metrics_of_too_few_pairs_names_the_count():
    m = _block([_rec(1, 0.6, 0.8, 0.8), _rec(0, 0.3, 0.2, 0.2)])
    assert math.isnan(m["ms"]) and "at least 3 values, got 2" in m["undefined"]["ms"]


def test_stage_metrics_has_the_full_set_and_it_matches_the_pure_functions():
    rng = np.random.default_rng(9)
    n = 60
    prior = rng.uniform(0.05, 0.95, n)
    post = np.clip(prior + rng.normal(0, 0.1, n), 0, 1)
    y = (rng.random(n) < post).astype(int)
    recs = [_rec(int(y[i]), float(prior[i]), float(post[i]), float(post[i])) for i in range(n)]
    for r, neg in zip(recs, 1 - post + rng.normal(0, 0.05, n).clip(-0.04, 0.04)):
        r["stated_neg"] = float(np.clip(neg, 0, 1))
    m = stage_metrics(recs, n_bootstrap=100, seed=1)
    assert m["undefined"] == {}
    assert m["brier"] == pytest.approx(brier_score_loss(y, post))
    assert m["ece"] == pytest.approx(ece(post, y)) and m["inertia"] == pytest.approx(inertia(prior, post))
    assert m["ms"] == pytest.approx(stats.linregress(prior - 0.5, post - prior).slope)
    assert m["ms_ci"][0] < m["ms"] < m["ms_ci"][1] and m["brier_ci"][0] < m["brier"] < m["brier_ci"][1]
    assert m["negation_coherence"] < 0.05 and m["n_negation_pairs"] == n
    for key in ("share_le_0.05", "share_ge_0.95", "share_extreme", "brier_resolution", "brier_uncertainty",
                "brier_wbv", "brier_wbc", "brier_constant", "ms_trace", "ms_trace_ci", "lin_r2", "sigma_ratio"):
        assert key in m, key
    assert stage_metrics(recs, n_bootstrap=100, seed=1) == m     # seeded: the same block twice


# ---------------------------------------------------------------- the statistics core and the table
@PROPS
@given(forecasts(min_n=3))
def test_ms_slope_is_scipys_slope_of_delta_on_prior_minus_half(data):
    prior, _ = data
    post = np.clip(prior[::-1] * 0.6 + 0.2, 0, 1)
    assert math.isnan(ms_slope(np.full(len(prior), prior[0]), post))   # constant prior: a resample may draw one
    if np.ptp(prior) > 1e-6:
        assert ms_slope(prior, post) == stats.linregress(prior - 0.5, post - prior).slope


def test_none_is_nan_and_ragged_rows_are_padded():
    assert np.array_equal(nan_array([0.2, None, 1]), [0.2, np.nan, 1.0], equal_nan=True)
    assert np.array_equal(nan_matrix([[0.1, None], None, [0.3]]),
                          [[0.1, np.nan], [np.nan, np.nan], [0.3, np.nan]], equal_nan=True)


def test_too_few_for_an_interval_and_the_bootstrap_is_scipys():
    assert too_few_for_ci(MIN_CI_PAIRS) is None
    why = too_few_for_ci(3, "paired questions")
    assert why == f"3 paired questions < {MIN_CI_PAIRS}: too few for a bootstrap interval"
    x = np.random.default_rng(2).random(40)
    ref = stats.bootstrap((x,), np.mean, n_resamples=200, confidence_level=0.9, method="percentile",
                          rng=np.random.default_rng(5)).confidence_interval
    assert bootstrap_ci((x,), np.mean, 200, 0.9, 5, paired=False, vectorized=None) == (ref.low, ref.high)


def test_stage_metrics_writes_exactly_the_registered_metrics_keys_in_order():
    recs = [_rec(i % 2, 0.1 + 0.05 * i, 0.2 + 0.04 * i, 0.3 + 0.03 * i) for i in range(12)]
    registered = [d.metric for d in declared_metrics().values()]
    every = [k for metric in registered if "crowd" not in metric.reads for k in metric.keys] + ["undefined"]
    assert list(_block(recs)) == [k for k in every if k not in DEATT_KEYS and "negation" not in k]
    for r in recs:
        r["stated_neg"], r["snap_draws"] = 1 - r["stated"], [r["prior"] + 0.01, None]
    m = list(_block(recs))                  # negations and snap draws add theirs, in registry order
    assert [k for k in m if k not in DEATT_KEYS] == [k for k in every if k not in DEATT_KEYS] and set(m) == set(every)
    assert all(metric.fn.__doc__ for metric in registered)   # every metric says its formula


def test_a_metric_sees_only_the_columns_it_declares():
    """Each entry's ``reads`` is what its function gets: an undeclared column is an error naming it,
    so every declaration in the table is checked by the test above (all of them computed)."""
    from martingale.metrics import Metric, StageColumns
    s = StageColumns.from_records([_rec(i % 2, 0.2, 0.3, 0.4) for i in range(8)], 10, 0.9, 0)
    assert Metric(("x",), lambda c: float(c.stated[c.ok].mean()), ("stated",)).compute(s) == pytest.approx(0.4)
    with pytest.raises(AttributeError, match=r"used y \(y undeclared\)"):
        Metric(("x",), lambda c: float(c.y.mean()), ("stated",)).compute(s)
    with pytest.raises(AttributeError, match="used pair"):
        Metric(("x",), lambda c: int(c.pair.sum()), ("prior",)).compute(s)
    with pytest.raises(ValueError, match="reads must be some of"):
        Metric(("x",), lambda c: 0.0, ("logits",))
