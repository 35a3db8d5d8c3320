"""Findings decided over seeds (martingale/stats/replicates.py): the random-effects combination holds its
level where the seeds spread, a question-only interval does not; equivalence, BH q and the seeds a
finding would need."""
from __future__ import annotations

import math

import numpy as np
import pytest

from martingale.stats.replicates import bh_q, combine, se_from_ci, seeds_needed


@pytest.mark.parametrize("tau, s", [(0.02, 0.007), (0.05, 0.005)])
def test_the_combined_ci_covers_the_true_effect_at_its_level_where_a_question_only_ci_does_not(tau, s):
    """1,000 simulated campaigns of 3 seeds: θ_i = θ + N(0, τ²) (training) + N(0, s²) (questions),
    each seed reporting its question-bootstrap se s. The HKSJ interval covers θ in 93–97% of them;
    the questions-only interval (the seeds' mean ± 1.96 s/√3, no between-seed term) far less."""
    rng = np.random.default_rng(7)
    theta, covered, covered_questions = 0.05, 0, 0
    for _ in range(1000):
        y = theta + rng.normal(0, tau, 3) + rng.normal(0, s, 3)
        c = combine(list(y), [s] * 3)
        covered += c.ci[0] <= theta <= c.ci[1]
        half = 1.96 * s / math.sqrt(3)
        covered_questions += y.mean() - half <= theta <= y.mean() + half
    assert 0.93 <= covered / 1000 <= 0.97, covered
    assert covered_questions / 1000 < 0.6, covered_questions


def test_one_seed_is_its_own_estimate_with_a_normal_interval():
    c = combine([0.1], [0.02])
    assert c.estimate == 0.1 and c.df is None and c.k == 1
    assert c.ci == pytest.approx((0.1 - 1.96 * 0.02, 0.1 + 1.96 * 0.02), abs=1e-4)


def test_seeds_that_disagree_widen_the_interval_beyond_each_seeds_own():
    agree, disagree = combine([0.05, 0.051, 0.049], [0.01] * 3), combine([0.05, 0.15, -0.05], [0.01] * 3)
    assert disagree.tau > 0 and agree.tau == 0
    assert disagree.ci[1] - disagree.ci[0] > 5 * (agree.ci[1] - agree.ci[0])


def test_a_seed_with_a_zero_se_beside_others_combines_without_dividing_by_zero():
    # a seed whose every question gives the same paired effect has a [x, x] CI: its weight (floored
    # se 1e-12) dwarfs the others', and Σw − Σw²/Σw computed directly cancels to 0.0
    c = combine([0.0, 0.02, -0.03], [0.0, 0.01, 0.012])
    assert c.k == 3 and c.tau > 0 and math.isfinite(c.se) and c.ci[0] < 0 < c.ci[1]


def test_a_wider_ci_cannot_reproduce_a_null_by_equivalence():
    """TOST: the tight interval inside ±margin gives a small p; the same estimate with a wide
    interval (a noisier test) gives a large one: noise no longer reproduces a null."""
    tight, wide = combine([0.001, -0.002, 0.0], [0.002] * 3), combine([0.03, -0.04, 0.01], [0.03] * 3)
    margin = 0.01
    assert -margin < tight.ci[0] and tight.ci[1] < margin and tight.p_equivalent(margin) < 0.05
    assert wide.ci[0] < 0 < wide.ci[1] and wide.p_equivalent(margin) > 0.05


def test_se_from_a_95_ci_is_its_half_width_over_1_96():
    assert se_from_ci([-0.196, 0.196]) == pytest.approx(0.1, rel=1e-3)


def test_benjamini_hochberg_q_values():
    """The textbook example: p (0.01, 0.04, 0.03, 0.005) → q (0.02, 0.04, 0.04, 0.02); untested stays None."""
    assert bh_q([0.01, 0.04, None, 0.03, 0.005]) == pytest.approx([0.02, 0.04, None, 0.04, 0.02])


def test_seeds_needed_grows_as_the_effect_shrinks_against_the_spread():
    ses = [0.01] * 3
    big, small = seeds_needed([0.1, 0.12, 0.08], ses, 0.1), seeds_needed([0.01, 0.03, -0.01], ses, 0.01)
    assert big is not None and small is not None and big < small
    assert seeds_needed([0.0, 0.1, -0.1], ses, 1e-4) is None   # more than anyone would build
