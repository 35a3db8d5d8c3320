"""De-attenuated MS: the oracle check in the embedded world (known prior noise on a true martingale),
the instrument against an independent two-stage least squares, the degenerate case flagged, and the
eval's repeated snap-prior draws that feed it."""
from __future__ import annotations

import math
from dataclasses import asdict

import numpy as np
import pytest
from oracle_check import oracle_check
from scipy import stats
from typed import typed_slice

from martingale.config.sections import WorldConfig
from martingale.metrics import MetricError, stage_metrics
from martingale.stats.deattenuation import (
    deattenuate,
    measurement_variance,
    ms_adjusted,
    ms_instrumented,
    reliability,
)


@pytest.mark.parametrize("seed", [0, 1])
def test_oracle_check_recovers_a_true_martingale_where_raw_ms_is_negative(seed):
    """Exact Bayes beliefs (a martingale) with N(0, 0.15²) noise on the prior: raw MS ≈ −0.3 with a
    CI below 0, MS_adj and MS_iv ≈ 0 with CIs covering 0, reliability ≈ the true one."""
    r = oracle_check(asdict(WorldConfig()), n=3000, k_draws=4, noise_sd=0.15, n_bootstrap=300, seed=seed)
    assert r["passed"], r
    assert r["ms_raw"] < -0.2 and r["ms_raw_ci"][1] < 0
    assert r["ms_adj_ci"][0] <= 0 <= r["ms_adj_ci"][1] and r["ms_iv_ci"][0] <= 0 <= r["ms_iv_ci"][1]
    assert abs(r["ms_adj"] - r["ms_true"]) < 0.06 and abs(r["ms_iv"] - r["ms_true"]) < 0.06
    assert r["reliability"] == pytest.approx(r["reliability_true"], abs=0.04)
    assert not r["deatt_degenerate"]


def test_without_noise_nothing_changes():
    rng = np.random.default_rng(0)
    prior = rng.uniform(0.1, 0.9, 200)
    post = np.clip(prior + 0.2 * (prior - 0.5) + rng.normal(0, 0.05, 200), 0, 1)
    d = deattenuate(prior, post, np.column_stack([prior, prior]), n_bootstrap=100)
    raw = stats.linregress(prior - 0.5, post - prior).slope
    assert d["sigma2_meas"] == pytest.approx(0, abs=1e-15) and d["reliability"] == pytest.approx(1)
    assert d["ms_adj"] == pytest.approx(raw) and d["ms_iv"] == pytest.approx(raw)


def test_pieces_match_their_definitions():
    draws = np.array([[0.2, 0.4, np.nan], [0.5, 0.5, 0.8], [0.9, np.nan, np.nan]])
    ref = np.mean([np.var([0.2, 0.4], ddof=1), np.var([0.5, 0.5, 0.8], ddof=1)])   # row 3: one draw, skipped
    assert measurement_variance(draws) == pytest.approx(ref)
    assert reliability(0.1, 0.025) == pytest.approx(0.75)
    rng = np.random.default_rng(1)
    belief = rng.uniform(0.1, 0.9, 500)
    prior, z = belief + rng.normal(0, 0.1, 500), belief + rng.normal(0, 0.1, 500)
    post = belief + rng.normal(0, 0.05, 500)
    # MS_adj = β/reliability − 1 with β the OLS slope of posterior on prior
    beta = stats.linregress(prior, post).slope
    rel = 1 - 0.01 / np.var(prior, ddof=1)
    assert ms_adjusted(prior, post, 0.01) == pytest.approx(beta / rel - 1)
    # MS_iv against two-stage least squares done by hand
    X1 = np.column_stack([np.ones(500), z])
    fitted = X1 @ np.linalg.lstsq(X1, prior, rcond=None)[0]
    X2 = np.column_stack([np.ones(500), fitted])
    beta_2sls = np.linalg.lstsq(X2, post, rcond=None)[0][1]
    assert ms_instrumented(prior, post, z) == pytest.approx(beta_2sls - 1, abs=1e-10)


def test_noise_dominated_prior_is_flagged_not_hidden():
    rng = np.random.default_rng(2)
    n = 400
    belief = rng.uniform(0.4, 0.6, n)                        # Var(belief) ≈ 0.0033
    noisy = belief[:, None] + rng.normal(0, 0.08, (n, 4))     # σ²_meas = 0.0064 ≫ Var(belief)
    post = belief + rng.normal(0, 0.02, n)
    d = deattenuate(noisy[:, 0], post, noisy[:, 1:], n_bootstrap=100)
    assert d["deatt_degenerate"] is True and d["reliability"] < 0.5
    assert "noise-dominated prior" in d["deatt_note"] and "Var_q(prior)" in d["deatt_note"]
    assert not math.isnan(d["ms_adj"])                       # reported, and flagged


def test_reliability_at_or_below_zero_gives_nan_with_the_reason():
    prior = np.array([0.4, 0.5, 0.6, 0.45, 0.55])
    draws = np.column_stack([prior[::-1] + 0.3, prior - 0.3])   # wildly noisy re-draws
    d = deattenuate(prior, prior, draws, n_bootstrap=50)
    assert d["reliability"] <= 0 and math.isnan(d["ms_adj"])
    assert "reliability" in d["undefined"]["ms_adj"] and d["deatt_degenerate"]
    assert "too few" in d["undefined"]["ms_adj_ci"]


@pytest.mark.parametrize("args, match", [
    ((np.array([0.2, 0.3]), np.array([0.2, 0.3]), np.ones((2, 2))), "at least 3"),
    ((np.full(5, 0.5), np.linspace(0, 1, 5), np.ones((5, 2))), "constant prior"),
    ((np.linspace(0, 1, 5), np.linspace(0, 1, 5), np.ones(5)), "questions × K"),
    ((np.linspace(0, 1, 5), np.linspace(0, 1, 5), np.full((5, 1), np.nan)), "two parsed prior draws"),
])
def test_bad_input_is_a_clear_error(args, match):
    with pytest.raises(MetricError, match=match):
        deattenuate(*args, n_bootstrap=20)


def test_stage_metrics_de_attenuates_records_with_snap_draws():
    rng = np.random.default_rng(3)
    n = 300
    belief = rng.uniform(0.1, 0.9, n)
    y = rng.random(n) < belief
    post = np.clip(belief + 0.5 * (y - belief), 0, 1)
    noisy = np.clip(belief[:, None] + rng.normal(0, 0.12, (n, 4)), 0, 1)
    recs = [{"y": int(y[i]), "prior": float(noisy[i, 0]), "posterior": float(post[i]), "stated": float(post[i]),
             "trace_cut": None, "trace_last": None, "bayes_end": None,
             "snap_draws": [float(v) for v in noisy[i, 1:]] + ([None] if i == 0 else [])} for i in range(n)]
    m = stage_metrics(recs, n_bootstrap=100)
    assert m["n_draws"] == 4 and m["ms"] < -0.1
    assert m["ms_adj"] > m["ms"] and m["ms_adj_ci"][0] <= 0.05
    for key in ("sigma2_meas", "var_prior", "reliability", "ms_iv", "ms_iv_ci", "deatt_degenerate"):
        assert key in m, key


# ------------------------------------------------------------------------------- the eval stage
@pytest.fixture(scope="module")
def snap_cfg(default_cfg):
    import copy
    cfg = copy.deepcopy(default_cfg)
    cfg["world"].update(n_heldout=8)
    cfg["elicit"] = {"mode": "snap", "judge": "self", "cut": 0.5}
    cfg["eval"].update(prior_draws=3, negations=True)
    cfg["seed"] = 42
    return cfg


@pytest.mark.slow
def test_eval_records_k_snap_draws_and_negations_deterministically(snap_cfg, untrained_model):
    from martingale.model.backend import open_model
    from martingale.stages.body.common import make_world
    from martingale.stages.body.evaluate import evaluate_model
    gen = open_model(untrained_model, snap_cfg["model"])
    _, heldout = make_world(snap_cfg["world"]).splits()
    rows = evaluate_model(gen, None, typed_slice("evaluate", snap_cfg), heldout)
    assert all(len(r["snap_draws"]) == 3 and "stated_neg" in r for r in rows)
    again = evaluate_model(gen, None, typed_slice("evaluate", snap_cfg), heldout)
    assert [r["snap_draws"] for r in again] == [r["snap_draws"] for r in rows]
    samemode = dict(snap_cfg, elicit={"mode": "samemode", "judge": "trace", "cut": 0.5})
    assert all("snap_draws" not in r for r in evaluate_model(gen, None, typed_slice("evaluate", samemode), heldout))
    bad = dict(snap_cfg, eval=dict(snap_cfg["eval"], prior_draws=-1))
    with pytest.raises(ValueError, match="prior_draws"):
        evaluate_model(gen, None, typed_slice("evaluate", bad), heldout)
