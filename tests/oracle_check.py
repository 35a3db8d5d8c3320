"""The oracle check of de-attenuation: on the embedded world's exact Bayes beliefs (a true
martingale, MS = 0) with known noise added to the prior, raw MS reads below 0 and the de-attenuated
MS_adj and MS_iv recover 0. A validation harness of the tests (tests/test_deattenuation.py).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from martingale.metrics import ms_ci
from martingale.stats import ms_slope
from martingale.stats.deattenuation import deattenuate
from martingale.world.synthetic import SyntheticWorld


def oracle_check(world_cfg: dict[str, Any], n: int = 4000, k_draws: int = 4, noise_sd: float = 0.15,
                 cut: float = 0.5, n_bootstrap: int = 1000, level: float = 0.95,
                 seed: int = 0) -> dict[str, Any]:
    """De-attenuation against the oracle of the embedded world.

    n questions; the true prior is the exact Bayes belief after ``cut`` of the clues and the
    posterior the exact Bayes belief after all of them — a martingale, MS = 0. The measured prior
    and its k_draws re-draws are the true prior plus independent N(0, noise_sd²) noise (classical
    errors-in-variables). Passes when raw MS's CI lies below 0 while the CIs of MS_adj and MS_iv
    cover 0.
    """
    world = SyntheticWorld(world_cfg)
    rng = np.random.default_rng([seed, 7])
    questions = world.sample(n, rng, "or")
    k = int(round(cut * world.n_clues))
    belief = np.array([world.bayes(q, k) for q in questions])
    posterior = np.array([world.bayes(q) for q in questions])
    noisy = belief[:, None] + rng.normal(0.0, noise_sd, size=(n, k_draws + 1))
    prior, draws = noisy[:, 0], noisy[:, 1:]
    raw = ms_slope(prior, posterior)
    raw_ci = list(ms_ci(prior, posterior, n_bootstrap, level, seed))
    d = deattenuate(prior, posterior, draws, n_bootstrap, level, seed)
    var_b = float(np.var(belief, ddof=1))
    out = {
        "n": n, "k_draws": k_draws, "noise_sd": noise_sd,
        "ms_true": ms_slope(belief, posterior),
        "ms_raw": raw, "ms_raw_ci": raw_ci,
        "reliability_true": var_b / (var_b + noise_sd ** 2),
        **{key: d[key] for key in ("sigma2_meas", "var_prior", "reliability", "ms_adj", "ms_adj_ci",
                                   "ms_iv", "ms_iv_ci", "deatt_degenerate")},
    }
    out["passed"] = bool(raw_ci[1] < 0 and d["ms_adj_ci"][0] <= 0 <= d["ms_adj_ci"][1]
                         and d["ms_iv_ci"][0] <= 0 <= d["ms_iv_ci"][1])
    return out
