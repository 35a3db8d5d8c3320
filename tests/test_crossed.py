"""A finding over seeds × questions, crossed (martingale/stats/crossed.py): simulated campaigns of the
campaign's own design — every seed reads the same 1,000 held-out questions, some unparsed — with a
per-question effect common to every seed, a seed effect and a residual. The crossed interval covers
the true effect at its level in every cell, for a mean metric and for a slope; the random-effects
combination of the seeds' own question CIs, which treats their question errors as independent,
does not where the questions' shared noise dominates."""
from __future__ import annotations

import numpy as np
import pytest

from martingale.records.crossed import RESAMPLES_PER_BOOTSTRAP, _block, _rng
from martingale.records.eval_record import QuestionCov
from martingale.stats.crossed import (
    half_width,
    interval,
    joint_cov,
    joint_draws,
    mean_tails,
    questions_to_decide,
    resample_weights,
    seeds_to_decide,
    shared_bound,
    weighted_mean,
)
from martingale.stats.replicates import combine
from martingale.stats.sequential import Boundary
from martingale.table.finding_reads import Result
from martingale.table.findings import _pooled, combined

N_QUESTIONS, UNPARSED, THETA, SIMULATIONS = 1000, 0.05, 0.1, 1000     # 1,000 campaigns a cell
N_BOOTSTRAP = 1000   # eval.n_bootstrap's default: the aggregate resamples 4 × as many
# Each cell: the standard deviations of one seed's estimate that its three sources give: the
# training (seed), the questions every seed shares, each seed's own question noise (residual; one
# per seed where they differ).
CELLS = {
    "balanced": (0.01, 0.01, 0.01),
    "questions dominate": (0.002, 0.02, 0.005),
    "seeds dominate": (0.02, 0.003, 0.003),
    "unequal per-seed errors": (0.01, 0.005, (0.005, 0.01, 0.02, 0.01, 0.005)),
}


def campaign(rng, metric: str, k: int, seed_sd: float, shared_sd: float, residual_sd) -> tuple[np.ndarray, ...]:
    """k seeds' per-question columns on the same questions; NaN where a seed did not parse. A mean
    metric's per-question values, or a slope's (x = prior − ½, y = Δ) with each seed's slope θ + u_i."""
    residual = np.broadcast_to(np.atleast_1d(np.asarray(residual_sd, dtype=float))[:k], (k,))
    scale = np.sqrt(N_QUESTIONS)
    u = rng.normal(0, seed_sd, k)
    if metric == "mean":
        q = rng.normal(0, shared_sd * scale, N_QUESTIONS)
        v = THETA + u[:, None] + q[None, :] + rng.normal(0, 1, (k, N_QUESTIONS)) * (residual * scale)[:, None]
        v[rng.random(v.shape) < UNPARSED] = np.nan
        return (v,)
    sd_x = 0.2
    x = rng.normal(0, sd_x, N_QUESTIONS)[None, :] + rng.normal(0, 0.02, (k, N_QUESTIONS))
    q = rng.normal(0, shared_sd * scale * sd_x, N_QUESTIONS)
    y = (THETA + u)[:, None] * x + q[None, :] + rng.normal(0, 1, (k, N_QUESTIONS)) * (residual * scale * sd_x)[:, None]
    x[rng.random(x.shape) < UNPARSED] = np.nan
    return x, y


def statistic(metric: str, cols: tuple[np.ndarray, ...]):
    """The B × k statistic of every seed under weights w (B × n), all seeds in one product: a mean's
    (weighted_mean) or an OLS slope's (weighted_moments: Σw, Σwx, Σwy, Σwx², Σwxy)."""
    if metric == "mean":
        (v,) = cols
        k, has = len(v), np.isfinite(v).T
        both = np.hstack([np.where(has, v.T, 0.0), has.astype(float)])
        return lambda w: (lambda s: s[:, :k] / s[:, k:])(w @ both)
    x, y = cols
    k, has = len(x), (np.isfinite(x) & np.isfinite(y)).T
    x0, y0 = np.where(has, x.T, 0.0), np.where(has, y.T, 0.0)
    sums = np.hstack([has.astype(float), x0, y0, x0 * x0, x0 * y0])

    def slope(w):
        sw, sx, sy, sxx, sxy = np.split(w @ sums, 5, axis=1)
        mx, my = sx / sw, sy / sw
        return (sxy / sw - mx * my) / (sxx / sw - mx * mx)
    return slope


def coverage(metric: str, k: int, cell: str) -> tuple[float, float]:
    """(crossed, random effects): the share of simulated campaigns whose 95% CI covers θ. The crossed
    CI is the build's: eval.json's block from the aggregate's joint resamples (4 × n_bootstrap, the
    rng of seeds 41 … 41 + k − 1, the same for every run on those seeds), the table's interval on it
    with its percentile floor. Random effects read each seed's own question bootstrap se."""
    rng = np.random.default_rng([k, len(cell), len(metric)])
    weights = resample_weights(N_QUESTIONS, RESAMPLES_PER_BOOTSTRAP * N_BOOTSTRAP, _rng(list(range(41, 41 + k))))
    crossed_hits = combine_hits = 0
    for _ in range(SIMULATIONS):
        stat = statistic(metric, campaign(rng, metric, k, *CELLS[cell]))
        estimates = list(stat(np.ones((1, N_QUESTIONS)))[0])
        block = _block(joint_draws(stat, weights), N_QUESTIONS)
        ses = list(np.sqrt(np.diag(block["cov"])))
        cov = QuestionCov(block["cov"], block["n_questions"], block["mean_tails"])
        c, old = combined(estimates, ses, cov), combine(estimates, ses)
        crossed_hits += c.ci[0] <= THETA <= c.ci[1]
        combine_hits += old.ci[0] <= THETA <= old.ci[1]
    return crossed_hits / SIMULATIONS, combine_hits / SIMULATIONS


ONE_DOMINATES = ("questions dominate", "seeds dominate")


@pytest.mark.slow
@pytest.mark.parametrize("cell", list(CELLS))
@pytest.mark.parametrize("k", [3, 5])
@pytest.mark.parametrize("metric", ["mean", "slope"])
def test_the_crossed_ci_covers_the_true_effect_in_at_least_93_percent_and_where_one_noise_dominates_at_most_97(
        metric, k, cell):
    """At least its level within two SE of 1,000 campaigns in every cell. Where one noise dominates,
    Banerjee's interval is the t interval of that noise, not conservative; where the seeds' part
    and the questions' are comparable it is conservative by construction (its price for never
    running liberal, whatever their ratio)."""
    covered, _ = coverage(metric, k, cell)
    assert 0.93 <= covered <= (0.97 if cell in ONE_DOMINATES else 1.0), covered


@pytest.mark.slow
@pytest.mark.parametrize("metric", ["mean", "slope"])
def test_random_effects_over_the_seeds_own_cis_fail_where_the_seeds_share_their_questions(metric):
    """Today's ``combine`` treats each seed's question error as its own: where the questions' shared
    noise dominates, the seeds agree and its interval shrinks below what the questions allow."""
    _, covered = coverage(metric, 3, "questions dominate")
    assert covered < 0.9, covered


def test_the_interval_is_never_narrower_than_the_question_noise_of_the_seeds_mean():
    """Seeds that agree exactly: no spread, yet the questions they share still bound the interval."""
    cov = np.full((3, 3), 0.02 ** 2)        # wholly shared question noise, ±0.02 a seed
    c = interval([0.05, 0.05, 0.05], cov, 1000)
    assert c.ci[1] - c.estimate >= 1.96 * 0.02
    assert c.var_seed == pytest.approx(0, abs=1e-12) and c.var_shared == pytest.approx(0.02 ** 2)


def test_seeds_that_disagree_beyond_their_questions_widen_it_on_k_minus_1_degrees_of_freedom():
    cov = np.diag([0.005 ** 2] * 3)
    c = interval([0.0, 0.1, 0.2], cov, 1000)
    assert c.var_seed > 0 and c.df == pytest.approx(2, rel=0.05)
    assert c.ci[0] < 0 < c.ci[1]


@pytest.mark.parametrize("k", [3, 5])
@pytest.mark.parametrize("seed_share", [0.3, 0.7, 1.0])
def test_with_the_seeds_spread_estimated_on_k_minus_1_df_the_interval_holds_its_level(k, seed_share):
    """The seeds' part s²/k is a scaled χ² on k − 1 df, the questions' known: where the seeds' part
    is ``seed_share`` of Var(θ̂), 4,000 campaigns decide θ = 0 falsely in at most 5% (two SE), where
    a Welch–Satterthwaite df from the estimated parts, or the questions alone where s² happens to
    fall under σ²_residual, does not (7.5% at k = 3 with no shared noise)."""
    rng = np.random.default_rng([k, int(10 * seed_share)])
    var = 1e-4
    shared, residual = (1 - seed_share) * var, 0.3 * seed_share * var * k      # per seed's own question noise
    seed = seed_share * var * k - residual
    cov = np.full((k, k), shared) + np.eye(k) * residual
    wrong = 0
    for _ in range(4000):
        y = rng.normal(0, np.sqrt(seed + residual), k) + rng.normal(0, np.sqrt(shared))
        lo, hi = interval(y, cov, 1000).ci
        wrong += not lo <= 0 <= hi
    assert wrong / 4000 <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 4000), wrong / 4000


def test_its_p_and_its_interval_agree_at_its_level():
    """p < 1 − level exactly where the interval excludes 0 (its df: the t whose quantile at the
    level is half-width / se)."""
    cov = np.full((3, 3), 0.01 ** 2) + np.eye(3) * 0.005 ** 2
    offsets = np.array([-0.02, 0.0, 0.02])
    h = interval(offsets, cov, 1000).ci[1]
    for mu, excluded in ((h * 0.999, False), (h * 1.001, True)):
        c = interval(offsets + mu, cov, 1000)
        assert (c.ci[0] > 0) == excluded and (c.p_zero() < 0.05) == excluded, (c, c.p_zero())


def test_without_records_the_seeds_own_cis_bound_the_shared_noise_as_wholly_shared():
    c = interval([0.05, 0.051, 0.049], shared_bound([0.01, 0.01, 0.01]), None)
    assert c.ci[1] - c.estimate >= 1.96 * 0.01 and c.n_questions is None


def test_more_seeds_cannot_narrow_what_the_questions_share_but_more_questions_can():
    """σ²_shared does not shrink with k: a finding bounded by it needs questions, not seeds."""
    c = interval([0.03, 0.031, 0.029], np.full((3, 3), 0.02 ** 2), 1000)
    target = 0.03
    assert seeds_to_decide(c, target) is None
    n = questions_to_decide(c, target)
    assert n is not None and n > 1000
    assert half_width(c.var_seed, c.var_shared, c.var_residual, 3, 1000, scale=n / 1000) < target


def test_a_spread_of_seeds_needs_seeds_not_questions():
    c = interval([0.0, 0.05, 0.1], np.diag([0.001 ** 2] * 3), 1000)
    assert questions_to_decide(c, 0.04) is None
    assert seeds_to_decide(c, 0.04) is not None


def test_joint_resampling_gives_a_shared_question_its_covariance():
    """Two seeds with the same per-question values: their resampled means move together."""
    rng = np.random.default_rng(0)
    v = rng.normal(0, 1, 500)
    cov = joint_cov(lambda w: np.stack([weighted_mean(w, v), weighted_mean(w, v)], axis=1),
                    resample_weights(500, 400, rng))
    assert cov[0, 1] == pytest.approx(cov[0, 0]) and cov[0, 0] == pytest.approx(1 / 500, rel=0.2)


def test_a_skewed_resampled_mean_widens_the_questions_part_beyond_its_variance():
    """A slope on few questions may resample skewed, one tail longer than a normal's: the interval
    holds the percentile interval of the seeds' mean, not only 1.96 of its standard deviation."""
    rng = np.random.default_rng(3)
    skewed = np.exp(rng.normal(0, 0.8, 4000))
    draws = np.stack([(skewed - skewed.mean()) * 0.01] * 3, axis=1)       # wholly shared, skewed
    tails = mean_tails(draws)
    cov = np.cov(draws, rowvar=False)
    plain, held = interval([0.0] * 3, cov, 200), interval([0.0] * 3, cov, 200, tails=tails)
    lo, hi = np.quantile(draws.mean(axis=1), [0.025, 0.975])
    assert held.ci[0] <= lo and hi <= held.ci[1]
    assert held.ci[1] - held.ci[0] > plain.ci[1] - plain.ci[0]


def _skewed_draw(seed: int) -> tuple[np.ndarray, dict]:
    """Three seeds' jointly resampled means on one held-out draw of 200 questions, wholly shared and
    skewed, and the eval.json block the aggregate writes of them (cov, n_questions, mean_tails)."""
    skewed = np.exp(np.random.default_rng(seed).normal(0, 0.8, 4000))
    draws = np.stack([(skewed - skewed.mean()) * 0.01] * 3, axis=1)
    return draws, {"cov": np.cov(draws, rowvar=False).tolist(), "n_questions": 200, "mean_tails": mean_tails(draws)}


def test_a_look_pooling_two_draws_is_never_narrower_than_the_percentile_interval_of_their_pooled_mean():
    """A redraw look pools two held-out draws: its interval holds the percentile interval of the
    seeds' mean over both (each draw's questions resampled on their own), as one draw's does."""
    level = Boundary(3).level()
    parts, means, covs = [], [], []
    for seed in (3, 4):
        draws, block = _skewed_draw(seed)
        means.append(draws.mean(axis=1))
        covs.append(np.array(block["cov"]))
        parts.append(Result("inconclusive", samples=tuple((41 + i, 0.0, (-0.02, 0.02)) for i in range(3)),
                            question_cov=QuestionCov(block["cov"], block["n_questions"], block["mean_tails"])))
    held, _ = _pooled(parts, level)
    pooled = 0.5 * means[0] + 0.5 * np.random.default_rng(5).permutation(means[1])
    lo, hi = np.quantile(pooled, [(1 - level) / 2, (1 + level) / 2])
    plain = interval([0.0] * 3, 0.25 * (covs[0] + covs[1]), 400, level)
    assert hi > plain.ci[1]                          # the pooled mean's long tail is longer than a normal's …
    assert held.ci[0] <= lo and hi <= held.ci[1]     # … and the look's interval holds it
