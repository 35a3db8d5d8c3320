"""Rewards A, B, C, BP as plain batch functions, and how unparsed samples are handled."""
import numpy as np
import pytest
from reward_batch import compute

from martingale import rewards

CFG = {"info_coef": 1.0, "info_eps": 0.02, "lam": 0.5}


def test_brier_reward_is_minus_squared_error_of_stated_p():
    r = compute("B", [0.5], [0.5], [0.8], [1], CFG)
    assert r[0] == pytest.approx(-0.04)


def test_bp_rewards_a_calibrated_prior_and_posterior():
    r = compute("BP", [0.9, 0.1], [0.9, 0.9], [0.9, 0.9], [1, 1], CFG)
    assert r[0] > r[1] and r[0] == pytest.approx(-0.02)


def test_martingale_reward_penalises_the_prior_predictable_update():
    prior = np.array([0.2, 0.3, 0.7, 0.8])
    entrench = prior + 0.5 * (prior - 0.5)   # Δ predictable from the prior
    revert = prior - 0.5 * (prior - 0.5)
    noise = prior + np.array([0.1, -0.1, -0.1, 0.1])
    a = lambda post: compute("A", prior, post, post, [0, 0, 1, 1], CFG).mean()
    assert a(noise) > a(entrench) and a(noise) > a(revert)


def test_info_term_penalises_not_updating():
    prior = np.array([0.2, 0.4, 0.6, 0.8])
    still = compute("A", prior, prior, prior, [0, 0, 1, 1], CFG)
    assert np.all(still == pytest.approx(-0.02))


def test_combined_reward_mixes_standardised_a_and_b():
    prior, post, y = [0.2, 0.4, 0.6, 0.8], [0.1, 0.5, 0.5, 0.9], [0, 0, 1, 1]
    c = compute("C", prior, post, post, y, {**CFG, "lam": 0.0})
    b = compute("B", prior, post, post, y, CFG)
    assert c == pytest.approx((b - b.mean()) / b.std())


def test_unparsed_sample_gets_nan_reward():
    r = compute("BP", [0.5, np.nan], [0.5, 0.5], [0.5, 0.5], [1, 1], CFG)
    assert np.isfinite(r[0]) and np.isnan(r[1])


# -- episode rewards (an instructor stage): hand-made trajectories, the formula checked by hand.
TRAJ = np.array([[0.6, 0.7, 0.8],     # leans yes and moves further: x·δ = 0.1·0.1 + 0.2·0.1 = 0.03
                 [0.4, 0.5, 0.45]])   # leans no, moves back: x·δ = −0.1·0.1 + 0·(−0.05) = −0.01
EPISODE = {"lam_ms": 2.0, "lam_brier": 0.5, "meta_size": 3}


def test_symabs_is_minus_lambda_times_the_sum_of_absolute_position_times_move():
    r = rewards.bind("symabs", EPISODE)(trajectory=TRAJ)
    assert r == pytest.approx([-2.0 * 0.03, -2.0 * 0.01])


def test_hinge_charges_only_moves_the_way_the_human_leans_plus_its_last_brier():
    r = rewards.bind("hinge", EPISODE)(trajectory=TRAJ, y=np.array([1.0, 0.0]))
    assert r == pytest.approx([-2.0 * 0.03 - 0.5 * 0.2 ** 2, -2.0 * 0.0 - 0.5 * 0.45 ** 2])


def test_episode_ms_gives_each_meta_episode_minus_lambda_times_its_absolute_slope():
    prior = np.array([0.3, 0.6, 0.7, 0.2, 0.5, 0.9])
    post = np.array([0.2, 0.7, 0.9, 0.1, 0.5, 0.8])
    r = rewards.bind("episode_ms", EPISODE)(prior=prior, posterior=post)
    for chunk in (slice(0, 3), slice(3, 6)):
        slope = np.polyfit(prior[chunk] - 0.5, post[chunk] - prior[chunk], 1)[0]
        assert r[chunk] == pytest.approx([-2.0 * abs(slope)] * 3)


def test_product_is_minus_the_update_times_its_in_batch_prediction():
    prior = np.array([0.2, 0.4, 0.6, 0.8])
    post = np.array([0.1, 0.45, 0.6, 0.95])
    b, a = np.polyfit(prior, post - prior, 1)
    r = rewards.bind("product", EPISODE)(prior=prior, posterior=post)
    assert r == pytest.approx(-2.0 * (post - prior) * (a + b * prior))


def test_an_unparsed_turn_leaves_its_episode_unscored():
    traj = TRAJ.copy()
    traj[1, 1] = np.nan
    r = rewards.bind("symabs", EPISODE)(trajectory=traj)
    assert np.isfinite(r[0]) and np.isnan(r[1])


def test_episode_rewards_read_the_trajectory_and_the_others_do_not():
    assert {n for n, r in rewards.REWARDS.items() if r.episodic} == {"symabs", "hinge"}


def test_a_slope_is_a_without_its_mean_update_term():
    """A's Δ̂ = a + b·prior = mean(Δ) + b·(prior − p̄): A_slope keeps only the second part, so
    A − A_slope = −mean(Δ)·Δ (info terms equal), and a batch whose updates share one mean but do
    not depend on the prior scores 0 under A_slope (less the info term)."""
    import numpy as np

    from martingale import rewards
    rng = np.random.default_rng(0)
    prior = rng.uniform(0.1, 0.9, 200)
    post = np.clip(prior - 0.1 + 0.3 * (prior - 0.5) + rng.normal(0, 0.05, 200), 0, 1)
    cfg = {"info_coef": 1.0, "info_eps": 0.02}
    a = rewards.bind("A", cfg)(prior=prior, posterior=post, stated=post)
    a_slope = rewards.bind("A_slope", cfg)(prior=prior, posterior=post, stated=post)
    delta = post - prior
    np.testing.assert_allclose(a - a_slope, -delta.mean() * delta, atol=1e-9)
    flat = prior - 0.2                          # every update −0.2 whatever the prior
    np.testing.assert_allclose(rewards.bind("A_slope", cfg)(prior=prior, posterior=flat, stated=flat), 0, atol=1e-9)
