"""Each extension is one new file of the package, and a built run uses all five: a reward with a
parameter (rewards/), a belief reader (beliefs/), a model backend (model/), a stage kind with its
own section (stages/) and a metric (metrics/), each from tests/extensions_built/, dropped into a copy
of the package (no file of the project edited). Snakemake builds the run at smoke scale; the metric
is in eval.json, runs.json, RUNS.md and runs.html."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import oneseed
import pytest

import martingale

from projcopy import SMOKE, copy_pretrain, make_project

pytestmark = pytest.mark.slow

FILES = Path(__file__).parent / "extensions_built"
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
CHAIN = ["elicit.judge=midway", "midway.value=0.3", "model.backend=echo", "model.echo.delay_ms=1",
         "stages.s1.reward=Rpower", "stages.s1.power=3", "stages.s2.reward=B", "stages.s2.kind=anneal",
         "anneal.cooling=0.5"]


@pytest.fixture(scope="module")
def built(tmp_path_factory, smoke_pretrain) -> Path:
    """A copy of the package with the five files added, and a project that built the run using them."""
    base = tmp_path_factory.mktemp("ext")
    package = base / "src" / "martingale"
    shutil.copytree(Path(martingale.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    for f in FILES.rglob("*.py"):
        shutil.copy(f, package / f.relative_to(FILES))
    root = make_project(base / "proj", config=SMOKE)
    copy_pretrain(smoke_pretrain, root)
    parent = "base"
    for i, knob in enumerate(CHAIN, 1):
        (root / "conf/runs" / f"x{i}.yaml").write_text(f"parent: {parent}\nknob: {knob}\n")
        parent = f"x{i}"
    env = {**os.environ, "PYTHONPATH": str(base / "src")}
    res = subprocess.run([SNAKEMAKE, "--cores", "2", f"results/x{len(CHAIN)}/eval.json", "runs.json"], cwd=root,
                         capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr[-4000:]
    return root


def last_run(root: Path) -> dict:
    return json.loads((root / "results" / f"x{len(CHAIN)}" / "eval.json").read_text())


def stage_file(root: Path, eval_json: dict, stage: str, name: str) -> dict:
    sid = next(iter(eval_json["provenance"][stage].values()))["model_stage"]
    return json.loads((root / "results/_store" / sid.split("-")[0] / sid / name).read_text())


def test_the_new_reward_with_its_parameter_trained_stage_one(built):
    s1 = stage_file(built, last_run(built), "s1", "stage.json")
    assert s1["kind"] == "train" and s1["reward"] == "Rpower" and s1["steps"] > 0


def test_the_new_stage_kind_with_its_section_built_stage_two(built):
    assert stage_file(built, last_run(built), "s2", "stage.json") == {"kind": "anneal", "cooling": 0.5}


def test_the_new_backend_played_the_model(built):
    assert stage_file(built, last_run(built), "s1", "stage.json")["echo_delay_ms"] == 1


def test_the_new_reader_read_every_prior_and_posterior(built):
    rows = [json.loads(x) for x in (built / "results" / f"x{len(CHAIN)}" / "records.jsonl").read_text().splitlines()]
    assert rows and all(r["prior"] == 0.3 and r["posterior"] == 0.3 for r in rows)


def test_the_new_metric_is_in_eval_json_runs_json_runs_md_and_runs_html(built):
    stages = {name: oneseed.metrics(block) for name, block in last_run(built)["stages"].items()}
    assert all(isinstance(stages[s]["stated_sd"], float) for s in ("s0", "s1", "s2"))
    row = next(r for r in json.loads((built / "runs.json").read_text()) if r["run_id"] == f"x{len(CHAIN)}")
    assert row["metrics"]["stated_sd"] == {"mean": stages["s2"]["stated_sd"], "sd": None,
                                           "per_seed": [stages["s2"]["stated_sd"]]}
    md = (built / "RUNS.md").read_text()
    assert "| sd(P) |" in md and f"{stages['s2']['stated_sd']:.3f}" in md
    assert '"stated_sd":{"digits":3,"label":"sd(P)","signed":false}' in (built / "runs.html").read_text()
