"""Deciding in looks (martingale/stats/sequential.py) with the crossed interval: simulated findings
taken through the whole procedure — the campaign's look at 3 seeds, then up to two more looks at 5
and 8 seeds, each at the plan's nominal level, stopping when decided or when the plan cannot decide
it (futility). Under the null the false-decision rate stays at 5%, where re-testing at 5% at every
look does not; under an alternative it decides more often than the campaign's fixed 3 seeds."""
from __future__ import annotations

import math

import numpy as np
import pytest

from martingale.stats.crossed import interval
from martingale.stats.sequential import Boundary, futility, pocock_constant
from martingale.table import findings
from martingale.table.findings import INCONCLUSIVE, REPRODUCED, Finding, judge
from martingale.table.looks import DecidePlan, Look

SEEDS = (3, 5, 8)                 # conf/decide.yaml's schedule: the campaign's look, then two more
N_QUESTIONS, FINDINGS = 1000, 2000
# The variance components (sds of one seed's estimate) the findings are drawn from: the training's,
# the questions' shared by every seed, each seed's own question noise.
PROFILES = [(0.02, 0.005, 0.005), (0.005, 0.015, 0.005), (0.01, 0.01, 0.01)]
MARGIN = 0.05


def procedure(rng, theta: float, expect: str, profile, boundary: Boundary, looks=SEEDS,
              futile: bool = True) -> tuple[bool, int]:
    """One finding through the looks: (decided on the side of its expectation? any decision?, seeds
    it took). Each seed's estimate is θ + its training noise + the questions' error, the same held-out
    questions at every look (so the shared part is drawn once)."""
    seed_sd, shared_sd, own_sd = profile
    shared = rng.normal(0, shared_sd)
    u = rng.normal(0, seed_sd, looks[-1]) + rng.normal(0, own_sd, looks[-1])
    level = boundary.level()
    for k in looks:
        estimates = theta + shared + u[:k]
        cov = np.full((k, k), shared_sd ** 2) + np.eye(k) * own_sd ** 2
        c = interval(estimates, cov, N_QUESTIONS, level)
        verdict = judge(expect, c.ci, MARGIN if expect == "= 0" else None)
        if verdict == REPRODUCED or (verdict != "inconclusive" and expect != "= 0"):
            return verdict, k
        target = abs(MARGIN - abs(c.estimate)) if expect == "= 0" else abs(c.estimate)
        if futile and futility(c, target, looks[-1]):
            return "futile", k
    return "inconclusive", looks[-1]


def rate(theta: float, expect: str, boundary: Boundary, looks=SEEDS, futile: bool = True,
         wanted=(REPRODUCED, "not reproduced")) -> tuple[float, float]:
    """(share of FINDINGS simulated findings whose verdict is one of ``wanted``, mean seeds taken)."""
    rng = np.random.default_rng([int(1000 * theta) + 7, len(looks), len(expect)])
    hits, seeds = 0, 0
    for i in range(FINDINGS):
        verdict, k = procedure(rng, theta, expect, PROFILES[i % len(PROFILES)], boundary, looks, futile)
        hits += verdict in wanted
        seeds += k
    return hits / FINDINGS, seeds / FINDINGS


LIMIT = 0.05 + 2 * math.sqrt(0.05 * 0.95 / FINDINGS)     # 5% within two standard errors


def test_the_pocock_constant_is_the_tabled_one():
    """Jennison & Turnbull (2000), Table 2.1: 2.178, 2.289, 2.413 for 2, 3, 5 looks at α = 0.05."""
    assert [pocock_constant(n) for n in (2, 3, 5)] == pytest.approx([2.178, 2.289, 2.413], abs=1e-3)
    assert Boundary(3, rule="bonferroni").nominal() == pytest.approx(0.05 / 3)
    assert Boundary(1).nominal() == 0.05


@pytest.mark.slow
def test_under_no_effect_the_procedure_decides_falsely_at_most_5_percent_and_naive_retesting_more():
    planned, _ = rate(0.0, "> 0", Boundary(len(SEEDS)))
    naive, _ = rate(0.0, "> 0", Boundary(1), futile=False)
    assert planned <= LIMIT, planned
    assert naive > LIMIT, naive


@pytest.mark.slow
def test_a_null_at_its_margin_is_falsely_reproduced_at_most_5_percent_and_more_under_naive_retesting():
    planned, _ = rate(MARGIN, "= 0", Boundary(len(SEEDS)), wanted=(REPRODUCED,))
    naive, _ = rate(MARGIN, "= 0", Boundary(1), futile=False, wanted=(REPRODUCED,))
    assert planned <= LIMIT, planned
    assert naive > planned, (naive, planned)


@pytest.mark.slow
def test_under_an_effect_the_procedure_decides_more_often_than_the_fixed_three_seeds():
    theta = 0.03
    planned, seeds = rate(theta, "> 0", Boundary(len(SEEDS)), wanted=(REPRODUCED,))
    fixed, _ = rate(theta, "> 0", Boundary(1), looks=(3,), wanted=(REPRODUCED,))
    assert planned > fixed, (planned, fixed)
    assert seeds < SEEDS[-1]             # it stops early: less than the 8 seeds a fixed design at its maximum takes


def _evals(value: float, shared_sd: float, n: int = 1000) -> dict:
    """eval.json of three trained seeds that all read ``value``, their question noise wholly shared."""
    return {"stage_order": ["s0"], "provenance": {"s0": {str(s): {"model_stage": "train-0"} for s in (41, 42, 43)}},
            "stages": {"s0": {"seeds": [41, 42, 43], "brier": {"per_seed": [value] * 3},
                              "brier_ci": {"per_seed": [[value - 0.05, value + 0.05]] * 3},
                              "crossed": {"brier": {"cov": [[shared_sd ** 2] * 3] * 3, "n_questions": n}}}}}


def test_futility_counts_only_the_questions_a_look_can_still_add():
    """The same estimate and question noise, read on one draw (a redraw can still halve the noise:
    not futile) and on both of the plan's draws pooled (only seeds left, which cannot narrow the
    noise the seeds share: futile)."""
    plan = DecidePlan(looks=3, seeds=(3, 5, 8), draws=2)
    f, row = Finding("x", "C0", "l", "s", "sim", "s0", "brier", "> 0"), {"run_id": "sim", "state": "done"}
    kw = {"boundary": plan.bound(), "max_seeds": plan.max_seeds, "max_draws": plan.draws}
    alone = findings.result(f, row, _evals(0.014, 0.01 / math.sqrt(2), 2000), look=Look(3, 1, ("sim",), 1, 3, 3), **kw)
    pooled = findings.result(f, row, _evals(0.014, 0.01), more=((row, _evals(0.014, 0.01), None),),
                             look=Look(3, 2, ("sim", "sim--d1"), 2, 3, 3), **kw)
    assert alone.combined.ci == pytest.approx(pooled.combined.ci, rel=1e-6)
    assert alone.verdict == pooled.verdict == INCONCLUSIVE
    assert alone.stopped is None and pooled.stopped.startswith("stopped for futility"), pooled.stopped
