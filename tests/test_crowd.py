"""The crowd as a bar (metrics/crowd.py): where questions carry crowd_p, each stage reports the crowd's
Brier on the same questions and the model's paired ΔBrier against it; questions without a value are
counted, not guessed; a run without any has no crowd key at all (its bytes are as before)."""
from __future__ import annotations

import numpy as np
import pytest

from martingale.metrics import stage_metrics, table_columns
from martingale.stats.effects import beat_counts
from martingale.world.jsonl import as_question
from martingale.world.questions import ForecastQuestion


def records(n: int = 40, crowd_every: int = 5) -> list[dict]:
    rng = np.random.default_rng(3)
    out = []
    for i in range(n):
        r = {"qid": f"q{i}", "y": int(rng.random() < 0.3), "prior": 0.3, "posterior": 0.4,
             "stated": float(rng.random()), "bayes_end": None}
        if i % crowd_every:
            r["crowd_p"] = float(rng.random())
        out.append(r)
    return out


def test_the_crowds_brier_is_over_the_questions_with_a_crowd_value_and_the_rest_are_counted():
    rows = records()
    m = stage_metrics(rows, 50, 0.95, 0)
    has = [r for r in rows if "crowd_p" in r]
    assert m["crowd_n"] == len(has) == 32 and m["crowd_missing"] == 8
    assert m["crowd_brier"] == pytest.approx(np.mean([(r["y"] - r["crowd_p"]) ** 2 for r in has]))
    lo, hi = m["crowd_brier_ci"]
    assert lo < m["crowd_brier"] < hi


def test_the_models_paired_delta_brier_against_the_crowd_comes_with_its_battery():
    rows = records()
    m = stage_metrics(rows, 50, 0.95, 0)
    both = [r for r in rows if "crowd_p" in r]
    expect = np.mean([(r["y"] - r["stated"]) ** 2 - (r["y"] - r["crowd_p"]) ** 2 for r in both])
    assert m["crowd_delta_brier"] == pytest.approx(expect) and m["crowd_n_paired"] == 32
    assert 0 <= m["crowd_p_t"] <= 1 and 0 <= m["crowd_p_wilcoxon"] <= 1 and len(m["crowd_delta_brier_ci"]) == 2


def test_a_stage_whose_questions_carry_no_crowd_value_has_no_crowd_key():
    rows = [{k: v for k, v in r.items() if k != "crowd_p"} for r in records()]
    assert not [k for k in stage_metrics(rows, 50, 0.95, 0) if k.startswith("crowd")]


def test_the_runs_table_shows_the_crowds_brier_and_the_models_delta():
    assert {"crowd_brier", "crowd_delta_brier"} <= set(table_columns())


def test_a_negated_question_asks_the_crowd_the_other_way_round():
    fq = ForecastQuestion("q1", "Will it?", 1, extra={"crowd_p": 0.8})
    assert as_question(fq).crowd == 0.8 and as_question(fq.negation()).crowd == pytest.approx(0.2)


def test_beats_crowd_counts_the_seeds_whose_model_beat_the_crowd():
    per_seed = {41: {"brier": 0.2, "brier_constant": 0.19, "crowd_brier": 0.1, "crowd_delta_brier": 0.05},
                42: {"brier": 0.2, "brier_constant": 0.19, "crowd_brier": 0.1, "crowd_delta_brier": -0.01}}
    assert beat_counts(per_seed, None)["beats_crowd"] == {"k": 1, "n": 2}
    assert "beats_crowd" not in beat_counts({41: {"brier": 0.2, "brier_constant": 0.19}}, None)
