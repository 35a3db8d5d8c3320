"""The metrics a finding reads, as statistics of weighted questions (metrics/resampled.py): under unit
weights each is the stage metric of its name, so the crossed interval resamples the very number
eval.json reports; and the aggregate writes the seeds' question covariance for stages and effects."""
from __future__ import annotations

import numpy as np
import pytest

from martingale.metrics import StageColumns, stage_metrics
from martingale.metrics import resampled as stat
from martingale.records.crossed import effect_crossed, stage_crossed
from martingale.stats.effects import paired_effect


def records(seed: int, n: int = 200, shift: float = 0.0) -> list[dict]:
    rng = np.random.default_rng(seed)
    q = np.random.default_rng(0)
    belief = q.uniform(0.05, 0.95, n)
    prior = np.clip(belief + rng.normal(0, 0.05, n), 0, 1)
    post = np.clip(prior + 0.1 * (prior - 0.5) + q.normal(0, 0.1, n) + shift, 0, 1)
    y = (q.random(n) < belief).astype(int)
    rows = []
    for i in range(n):
        gone = rng.random() < 0.05
        rows.append({"qid": f"ho{i:05d}", "y": int(y[i]), "prior": None if gone else float(prior[i]),
                     "posterior": None if gone else float(post[i]), "stated": None if gone else float(post[i]),
                     "bayes_end": float(belief[i]), "trace_cut": float(prior[i]), "trace_last": float(post[i]),
                     "snap_draws": [float(v) for v in np.clip(prior[i] + rng.normal(0, 0.05, 2), 0, 1)],
                     "crowd_p": float(np.clip(belief[i] + rng.normal(0, 0.1), 0, 1))})
    return rows


@pytest.mark.parametrize("key", sorted(stat.STAGE))
def test_each_resampled_statistic_under_unit_weights_is_the_stage_metric_of_its_name(key):
    rows = records(1)
    s = StageColumns.from_records(rows, 50, 0.95, 0)
    expected = stage_metrics(rows, 50, 0.95, 0)[key]
    assert stat.STAGE[key](s, np.ones((1, len(rows))))[0] == pytest.approx(expected, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("part", sorted(stat.EFFECT))
def test_each_resampled_effect_under_unit_weights_is_the_paired_effect(part):
    child, parent = records(1, shift=0.03), records(2)
    expected = paired_effect(child, parent, 50)[part]["delta"]
    cols = [StageColumns.from_records(r, 0, 0.95, 0) for r in (child, parent)]
    assert stat.EFFECT[part](*cols, np.ones((1, len(child))))[0] == pytest.approx(expected, rel=1e-9)


def test_a_stage_over_seeds_gets_the_covariance_of_every_metric_it_has():
    rows = {seed: records(seed) for seed in (41, 42, 43)}
    metrics = {seed: stage_metrics(r, 50, 0.95, seed) for seed, r in rows.items()}
    crossed = stage_crossed(rows, metrics, 200)
    assert set(crossed) == set(stat.STAGE)
    cov = np.array(crossed["brier"]["cov"])
    assert cov.shape == (3, 3) and crossed["brier"]["n_questions"] == 200
    assert cov[0, 1] > 0.5 * cov[0, 0]             # the questions' noise is shared
    assert stage_crossed({41: rows[41]}, {41: metrics[41]}, 200) == {}


def test_an_effect_over_seeds_against_one_parent_seed_shares_the_parents_question_noise():
    child = [records(seed, shift=0.03) for seed in (41, 42, 43)]
    parent = [records(7)] * 3
    deltas = {part: [paired_effect(c, p, 20)[part]["delta"] for c, p in zip(child, parent)] for part in ("brier", "ms")}
    crossed = effect_crossed(child, parent, deltas, [41, 42, 43], 200)
    assert set(crossed) == {"brier", "ms"}
    assert crossed["ms"]["n_questions"] == 200
    assert effect_crossed(child, parent, {"brier": [None, 0.1, 0.1]}, [41, 42, 43], 200) == {}
