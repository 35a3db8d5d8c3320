"""The whole chain, for real, at smoke scale: snakemake builds filter-s2only (pretrain → D → s1 BP
→ s2 martingale → eval of every stage → aggregate) in a copy of the project, then the table.

Smoke scale = the repo's conf/ with small sizes appended to config.yaml; every stage body, the
HF loaders, peft and the Snakefile are the real ones.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from projcopy import REPO

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))

SMOKE = """
# --- smoke scale (tests/test_end_to_end.py) ---
world: {n_train: 24, n_heldout: 48, clues_per_question: 6}
model: {hidden_size: 32, num_layers: 1, num_heads: 2, intermediate_size: 64}
pretrain: {steps: 60, batch_size: 32}
distill: {steps: 20, batch_size: 16}
eval: {n_bootstrap: 100}
"""

pytestmark = pytest.mark.slow


def smk(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SNAKEMAKE, "--cores", "2", *args], cwd=root, capture_output=True, text=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A smoke-scale project where `snakemake results/filter-s2only/eval.json` has run once."""
    import shutil
    root = tmp_path_factory.mktemp("e2e") / "proj"
    root.mkdir()
    for d in ("conf", "workflow"):
        shutil.copytree(REPO / d, root / d)
    shutil.copy(REPO / "Snakefile", root / "Snakefile")
    with open(root / "conf" / "config.yaml", "a", encoding="utf-8") as f:
        f.write(SMOKE)
    res = smk(root, "results/filter-s2only/eval.json")
    assert res.returncode == 0, res.stderr[-4000:]
    return root


def test_filter_s2only_reports_every_stage_with_the_core_metrics(built):
    ev = json.loads((built / "results/filter-s2only/eval.json").read_text())
    assert ev["stage_order"] == ["s0", "s1", "s2"]
    for stage in ev["stages"].values():
        for key in ("n", "brier", "bss", "mean_p", "share_gt_0.8", "ms", "ms_ci", "rho",
                    "parse_rate", "coherence", "ms_trace"):
            assert key in stage, key
        assert stage["n"] == 48


def test_run_folder_holds_config_lineage_and_per_question_records(built):
    run = built / "results/filter-s2only"
    lineage = json.loads((run / "lineage.json").read_text())
    assert [r["run_id"] for r in lineage][0] == "base" and lineage[-1]["run_id"] == "filter-s2only"
    assert "stages:" in (run / "config.yaml").read_text()
    rows = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * 48
    assert {"qid", "y", "prior", "posterior", "stage", "seed"} <= rows[0].keys()


def test_second_call_does_nothing(built):
    res = smk(built, "-n", "results/filter-s2only/eval.json")
    assert res.returncode == 0
    assert "Nothing to be done" in res.stdout + res.stderr


def test_a_sibling_run_reuses_the_shared_prefix(built):
    # judge-samemode-BP shares pretrain, D and the unfiltered BP stage with filter-s2only.
    res = smk(built, "-n", "--quiet", "rules", "results/judge-samemode-BP/eval.json")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "pretrain" not in out and "distill" not in out
    assert "train" in out  # only its unfiltered s2


def test_a_knob_edit_reruns_exactly_the_stages_it_affects(built):
    # filter-twostage's knob feeds filter-s2only's s2 only: s1 (BP, unfiltered) and D stay cached.
    path = built / "conf/runs/filter-twostage.yaml"
    original = path.read_text()
    try:
        path.write_text(original.replace("stages.s2.filter=top-quartile", "stages.s2.filter=top-half"))
        res = smk(built, "-n", "--quiet", "rules", "results/filter-s2only/eval.json")
        counts = dict(re.findall(r"^(\w+)\s+(\d+)$", res.stdout + res.stderr, re.M))
        assert counts == {"aggregate": "1", "evaluate": "1", "total": "3", "train": "1"}, res.stdout
    finally:
        path.write_text(original)


def test_a_failing_stage_logs_its_error_and_the_table_marks_the_run_crashed(built):
    (built / "conf/runs/nan-kl.yaml").write_text("parent: filter-s2only\nknob: stages.s2.kl_beta=nan\n")
    try:
        res = smk(built, "--keep-going", "results/nan-kl/eval.json")
        assert res.returncode != 0
        logs = [p for p in (built / "logs/train").glob("*.log") if "loss is nan" in p.read_text()]
        assert len(logs) == 1 and "StageError" in logs[0].read_text()
        assert not (built / "results/nan-kl").exists()
        from martingale.table import build_table
        states = {r["run_id"]: r["state"] for r in build_table(built)}
        assert states["nan-kl"] == "crashed" and states["filter-s2only"] == "done"
    finally:
        (built / "conf/runs/nan-kl.yaml").unlink()


def test_runs_table_marks_the_built_run_done_and_regenerates_byte_identical(built):
    assert smk(built, "runs.json").returncode == 0
    first = (built / "runs.json").read_bytes()
    rows = {r["run_id"]: r for r in json.loads(first)}
    assert rows["filter-s2only"]["state"] == "done" and rows["A-on-D"]["state"] == "queued"
    subprocess.run([str(Path(sys.executable).with_name("martingale")), "--root", str(built), "table"],
                   check=True, capture_output=True)
    assert (built / "runs.json").read_bytes() == first


def test_same_seed_gives_byte_identical_records(built, tmp_path):
    from martingale.io import read_json
    from martingale.plan import Plan, stage_dir
    from martingale.stages import evaluate, train
    plan = Plan.load(built)
    ev = next(e for e in plan.evals("filter-s2only") if e["stage"] == "s2")
    s2 = plan.stages[ev["model_stage"]]
    cfg = plan.stages[ev["eval_stage"]].cfg
    inputs = plan.stages[ev["eval_stage"]].inputs
    evaluate.run(cfg, built / stage_dir(inputs["model"]), built / stage_dir(inputs["judge_model"]),
                 tmp_path / "again")
    assert (tmp_path / "again/records.jsonl").read_bytes() == (built / ev["dir"] / "records.jsonl").read_bytes()
    # ... and retraining the stage from the same start gives the same weights.
    train.run(s2.cfg, built / stage_dir(s2.inputs["start_model"]), built / stage_dir(s2.inputs["judge_model"]),
              tmp_path / "s2")
    assert (tmp_path / "s2/model/model.safetensors").read_bytes() == \
        (built / stage_dir(s2.id) / "model/model.safetensors").read_bytes()
    assert read_json(tmp_path / "s2/stage.json")["steps"] > 0
