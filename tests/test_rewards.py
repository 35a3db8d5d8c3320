"""Rewards A, B, C, BP as plain batch functions, and how unparsed samples are handled."""
import numpy as np
import pytest

from martingale import rewards

CFG = {"info_coef": 1.0, "info_eps": 0.02, "lam": 0.5}


def test_brier_reward_is_minus_squared_error_of_stated_p():
    r = rewards.compute("B", [0.5], [0.5], [0.8], [1], CFG)
    assert r[0] == pytest.approx(-0.04)


def test_bp_rewards_a_calibrated_prior_and_posterior():
    r = rewards.compute("BP", [0.9, 0.1], [0.9, 0.9], [0.9, 0.9], [1, 1], CFG)
    assert r[0] > r[1] and r[0] == pytest.approx(-0.02)


def test_martingale_reward_penalises_the_prior_predictable_update():
    prior = np.array([0.2, 0.3, 0.7, 0.8])
    entrench = prior + 0.5 * (prior - 0.5)   # Δ predictable from the prior
    revert = prior - 0.5 * (prior - 0.5)
    noise = prior + np.array([0.1, -0.1, -0.1, 0.1])
    a = lambda post: rewards.compute("A", prior, post, post, [0, 0, 1, 1], CFG).mean()
    assert a(noise) > a(entrench) and a(noise) > a(revert)


def test_info_term_penalises_not_updating():
    prior = np.array([0.2, 0.4, 0.6, 0.8])
    still = rewards.compute("A", prior, prior, prior, [0, 0, 1, 1], CFG)
    assert np.all(still == pytest.approx(-0.02))


def test_combined_reward_mixes_standardised_a_and_b():
    prior, post, y = [0.2, 0.4, 0.6, 0.8], [0.1, 0.5, 0.5, 0.9], [0, 0, 1, 1]
    c = rewards.compute("C", prior, post, post, y, {**CFG, "lam": 0.0})
    b = rewards.compute("B", prior, post, post, y, CFG)
    assert c == pytest.approx((b - b.mean()) / b.std())


def test_unparsed_sample_gets_nan_reward():
    r = rewards.compute("BP", [0.5, np.nan], [0.5, 0.5], [0.5, 0.5], [1, 1], CFG)
    assert np.isfinite(r[0]) and np.isnan(r[1])
