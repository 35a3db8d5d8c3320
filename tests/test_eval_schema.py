"""eval.json's contract: every eval.json the aggregate writes meets eval.schema.json, one that
breaks it is refused before anything is written, and only stats/seeds.py (the writer) and
the typed readers of eval.json and runs.json know the seeds' key."""
import copy
import json
import math
from pathlib import Path

import pytest

from martingale.records.aggregate import write_run_results
from martingale.records.eval_schema import EvalSchemaError, check_eval, eval_errors
from martingale.stats.seeds import seed_blocks, seed_values
from martingale.store import files

SRC = Path(__file__).resolve().parents[1] / "src" / "martingale"


def _eval_dir(path, brier, ms, seed):
    path.mkdir(parents=True)
    files.write_json(path / "metrics.json", {"n": 12, "brier": brier, "ms": ms, "ms_ci": [ms - 0.1, ms + 0.1]})
    rows = [{"qid": f"ho{i:05d}", "y": i % 2, "prior": 0.2 + 0.05 * i,
             "posterior": 0.25 + 0.05 * i + 0.01 * (seed % 3), "seed": seed} for i in range(12)]
    files.write_jsonl(path / "records.jsonl", [{**r, "stated": r["posterior"]} for r in rows])
    return path


def _evals(tmp_path, run, seeds, stages=("s0", "s1")):
    out = []
    for seed in seeds:
        for i, stage in enumerate(stages):
            d = _eval_dir(tmp_path / run / f"{stage}-{seed}", 0.3 - 0.02 * i + 0.001 * seed, 0.1 + 0.01 * seed, seed)
            out.append({"stage": stage, "seed": seed, "dir": d, "model_stage": f"train-{run}{stage}",
                        "eval_stage": f"evaluate-{run}{stage}{seed}"})
    return out


@pytest.mark.parametrize("seeds", [[42], [41, 42, 43]])
def test_the_aggregates_eval_json_has_one_shape_for_one_seed_and_several(tmp_path, seeds):
    lineage = [{"run_id": "base", "parent": None, "knob": None}, {"run_id": "kid", "parent": "base", "knob": "x=1"}]
    result = write_run_results("kid", {"eval": {"n_bootstrap": 50}}, lineage, _evals(tmp_path, "kid", seeds),
                               tmp_path / "out", parent_evals=_evals(tmp_path, "base", seeds), plots=False)
    assert eval_errors(json.loads((tmp_path / "out" / "eval.json").read_text())) == []
    effect = result["stages"]["s1"]["effect"]
    assert [s for s, _ in seed_blocks(effect)] == seeds and effect["seeds"] == seeds
    s1 = result["stages"]["s1"]
    assert s1["seeds"] == seeds and len(seed_values(s1["brier"])) == len(seeds)
    assert set(s1["brier"]) == {"mean", "sd", "per_seed"}                  # the combined value beside each seed's
    assert math.isnan(s1["brier"]["sd"]) == (len(seeds) == 1)                # sd: none for one seed


def test_an_eval_json_that_breaks_the_schema_is_refused_with_one_line_naming_the_key(tmp_path):
    lineage = [{"run_id": "base", "parent": None, "knob": None}]
    good = write_run_results("base", {}, lineage, _evals(tmp_path, "base", [41, 42]), tmp_path / "out", plots=False)
    broken = copy.deepcopy(good)
    broken["stages"]["s0"]["brier"] = {"mean": 0.3, "sd": 0.01, "per_seed": ["0.3", 0.2]}   # a seed as a string
    with pytest.raises(EvalSchemaError) as info:
        check_eval(broken, "results/base/eval.json")
    message = str(info.value)
    assert message.startswith("results/base/eval.json: stages/s0/brier:") and "\n" not in message
    del broken["stages"]["s0"]["brier"]
    broken["config_hash"] = "not-a-hash"
    assert eval_errors(broken) == ["config_hash: 'not-a-hash' does not match '^sha256:[0-9a-f]{64}$'"]


def test_a_one_seed_eval_json_in_the_old_bare_shape_is_refused(tmp_path):
    """One seed writes the shape of several: a bare value, a stage without its seeds, or an
    effect that is one seed's block itself each break the schema."""
    lineage = [{"run_id": "base", "parent": None, "knob": None}, {"run_id": "kid", "parent": "base", "knob": "x=1"}]
    good = write_run_results("kid", {"eval": {"n_bootstrap": 50}}, lineage, _evals(tmp_path, "kid", [42]),
                             tmp_path / "out", parent_evals=_evals(tmp_path, "base", [42]), plots=False)
    bare_value = copy.deepcopy(good)
    bare_value["stages"]["s0"]["brier"] = good["stages"]["s0"]["brier"]["mean"]
    no_seeds = copy.deepcopy(good)
    del no_seeds["stages"]["s0"]["seeds"]
    bare_block = copy.deepcopy(good)
    bare_block["stages"]["s1"]["effect"] = good["stages"]["s1"]["effect"]["per_seed"]["42"]
    assert [e.split(":")[0] for e in eval_errors(bare_value)] == ["stages/s0/brier"]
    assert [e.split(":")[0] for e in eval_errors(no_seeds)] == ["stages/s0"]
    assert "stages/s1/effect" in [e.split(":")[0] for e in eval_errors(bare_block)]


def test_a_seed_count_is_numbers_never_a_k_of_n_string(tmp_path):
    lineage = [{"run_id": "base", "parent": None, "knob": None}]
    good = write_run_results("base", {}, lineage, _evals(tmp_path, "base", [41, 42]), tmp_path / "out", plots=False)
    assert good["stages"]["s1"]["counts"]["beats_start"] == {"k": good["stages"]["s1"]["counts"]["beats_start"]["k"], "n": 2}
    broken = copy.deepcopy(good)
    broken["stages"]["s1"]["counts"]["beats_start"] = "1/2"
    assert [e.split(":")[0] for e in eval_errors(broken)] == ["stages/s1/counts/beats_start"]


def test_a_broken_result_leaves_the_run_folder_unwritten(tmp_path, monkeypatch):
    import martingale.records.aggregate as aggregate
    monkeypatch.setattr(aggregate, "config_hash", lambda cfg: "sha256:short")
    with pytest.raises(EvalSchemaError, match="^results/base/eval.json: config_hash:"):
        write_run_results("base", {}, [{"run_id": "base", "parent": None, "knob": None}],
                          _evals(tmp_path, "base", [42]), tmp_path / "out", plots=False)
    assert not (tmp_path / "out").exists()


def test_only_the_writer_and_the_typed_readers_name_the_seeds_key():
    naming = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if '"per_seed"' in p.read_text())
    assert naming == ["records/eval_record.py", "stats/seeds.py", "table/runs_row.py"]
