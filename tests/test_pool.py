"""The shipped pool (data/questions/forecastbench-pool.jsonl, imported from ForecastBench's snapshot):
a valid questions file at the research log's scale, every question with the crowd's probability."""
from __future__ import annotations

import pytest

from martingale.world.questions import load_questions, summary

from projcopy import REPO

POOL = REPO / "data/questions/forecastbench-pool.jsonl"


def test_the_pool_is_the_snapshots_1154_resolved_market_questions_with_a_crowd_value_each():
    qs = load_questions(POOL)
    s = summary(qs)
    assert (s["n"], s["n_yes"]) == (1154, 303)
    assert s["constant_brier"] == pytest.approx(0.1936, abs=1e-4)
    crowd = [float(q.extra["crowd_p"]) for q in qs]
    assert len(crowd) == 1154
    assert sum((p - q.y) ** 2 for p, q in zip(crowd, qs)) / 1154 == pytest.approx(0.100, abs=5e-4)
    assert {q.extra["source"] for q in qs} == {"manifold", "metaculus", "infer", "polymarket"}
