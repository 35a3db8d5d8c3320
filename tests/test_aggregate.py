"""A run's results folder: per-stage metrics, seeds aggregated as mean ± sd, records tagged."""
import json

import pytest

from martingale.records.aggregate import write_run_results
from martingale.store import files


def _eval_dir(path, brier, ms, seed):
    files.write_json(path / "metrics.json", {"n": 2, "brier": brier, "ms": ms, "ms_ci": [ms - 0.1, ms + 0.1]})
    files.write_jsonl(path / "records.jsonl", [
        {"qid": "ho00000", "y": 1, "prior": 0.6, "posterior": 0.7, "seed": seed, "completion": "think ..."},
        {"qid": "ho00001", "y": 0, "prior": 0.4, "posterior": None, "seed": seed, "completion": "think"}])
    return path


def test_seeds_are_aggregated_as_mean_and_sd_per_stage(tmp_path):
    evals = []
    for seed, (b0, b1) in {41: (0.30, 0.20), 42: (0.32, 0.24)}.items():
        for stage, b in (("s0", b0), ("s1", b1)):
            d = tmp_path / f"{stage}-{seed}"
            d.mkdir()
            _eval_dir(d, b, 0.1 * seed / 41, seed)
            evals.append({"stage": stage, "seed": seed, "dir": d, "model_stage": f"m-{stage}", "eval_stage": f"e-{stage}-{seed}"})
    lineage = [{"run_id": "base", "parent": None, "knob": None}, {"run_id": "k3", "parent": "base", "knob": "seeds=[41,42]"}]
    out = tmp_path / "results" / "k3"
    result = write_run_results("k3", {"seeds": [41, 42]}, lineage, evals, out)
    s1 = result["stages"]["s1"]
    assert s1["brier"]["mean"] == pytest.approx(0.22) and s1["brier"]["sd"] == pytest.approx(0.0282843, rel=1e-4)
    assert s1["brier"]["per_seed"] == [0.20, 0.24] and s1["seeds"] == [41, 42]
    assert result["stage_order"] == ["s0", "s1"] and result["knob"] == "seeds=[41,42]"
    rows = files.read_jsonl(out / "records.jsonl")
    assert len(rows) == 8 and {r["stage"] for r in rows} == {"s0", "s1"}
    assert all("completion" not in r for r in rows)
    assert json.loads((out / "eval.json").read_text()) == json.loads(files.canonical_json(result))


def test_a_one_seed_stage_has_the_shape_of_several(tmp_path):
    d = tmp_path / "e"
    d.mkdir()
    _eval_dir(d, 0.25, 0.05, 42)
    result = write_run_results("base", {}, [{"run_id": "base", "parent": None, "knob": None}],
                               [{"stage": "s0", "seed": 42, "dir": d, "model_stage": "m", "eval_stage": "e"}],
                               tmp_path / "out")
    s0 = result["stages"]["s0"]
    assert s0["seeds"] == [42] and s0["brier"]["mean"] == 0.25 and s0["brier"]["per_seed"] == [0.25]
    assert result["parent"] is None


def test_chat_episodes_transcripts_are_gathered_per_stage_and_embedded_episodes_add_none():
    from martingale.records.aggregate import transcripts
    said = [{"turn": 0, "role": "human", "text": "P = 0.6", "p": 0.6}]
    records = {("s1", 7): [{"qid": "q2", "y": 1, "lean": -1, "transcript": said}],
               ("s0", 7): [{"qid": "q1", "y": 0, "lean": 1, "transcript": said}]}
    assert transcripts(records) == {
        "s0": [{"seed": 7, "qid": "q1", "lean": 1, "y": 0, "messages": said}],
        "s1": [{"seed": 7, "qid": "q2", "lean": -1, "y": 1, "messages": said}]}
    assert transcripts({("s0", 7): [{"qid": "q1", "y": 0, "lean": 1, "trajectory": [0.6]}]}) == {}


def test_a_chat_episode_runs_eval_json_holds_its_transcripts_and_an_embedded_runs_none(tmp_path):
    chat, plain = tmp_path / "chat", tmp_path / "plain"
    for d in (chat, plain):
        d.mkdir()
        _eval_dir(d, 0.25, 0.05, 42)
    said = [{"turn": 0, "role": "human", "text": "P = 0.6", "p": 0.6}]
    rows = [dict(r, lean=1, transcript=said) for r in files.read_jsonl(chat / "records.jsonl")]
    files.write_jsonl(chat / "records.jsonl", rows)
    lineage = [{"run_id": "c", "parent": None, "knob": None}]
    ev = [{"stage": "s0", "seed": 42, "model_stage": "m", "eval_stage": "e"}]
    got = write_run_results("c", {}, lineage, [dict(ev[0], dir=chat)], tmp_path / "out-chat", plots=False)
    assert [t["qid"] for t in got["transcripts"]["s0"]] == ["ho00000", "ho00001"]
    assert got["transcripts"]["s0"][0]["messages"] == said
    assert "transcripts" not in write_run_results("p", {}, lineage, [dict(ev[0], dir=plain)], tmp_path / "out-p",
                                                  plots=False)


def test_a_tracker_logs_one_value_per_metric_for_one_seed_and_several():
    from martingale.stats.seeds import combine_seeds, combined_values
    one = combine_seeds({42: {"brier": 0.2, "n": 48, "mode": "syc", "ms_ci": [0.1, 0.2], "api_judge": {"calls": 1}}})
    assert combined_values(one) == {"brier": 0.2, "n": 48, "mode": "syc", "ms_ci": [0.1, 0.2]}
    several = combine_seeds({41: {"brier": 0.2, "mode": "syc"}, 42: {"brier": 0.4, "mode": "syc"}})
    assert combined_values(several) == {"brier": pytest.approx(0.3)}
