"""`martingale plan --cost` and the budget: what a build would run (new vs reused from the store),
its estimated hours (recorded stage durations, else the model's runtime_min limit), and a build
whose estimate exceeds budget.cpu_hours / budget.gpu_hours refused by Snakemake before any job.

The slow tests build one real pretrain stage at a tiny scale (a few steps: its wall time, not its
model, is what they read) under a budget below the estimate, with the override.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from martingale.cli import app
from martingale.config.sections import BudgetConfig
from martingale.plan import Plan, cost

from projcopy import make_project, proj  # noqa: F401 (proj: fixture)

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
ENV = {**os.environ, "WANDB_MODE": "disabled"}

# Tiny scale: the stages run for real, as briefly as they can (the estimate, not the model, is tested).
TINY = """
# --- tiny scale (tests/test_cost.py) ---
world: {n_train: 24, n_heldout: 24, clues_per_question: 4}
model: {hidden_size: 48, num_layers: 2, num_heads: 2, intermediate_size: 96}
pretrain: {steps: 20, batch_size: 8, warmup: 5}
eval: {n_bootstrap: 20, min_parse_rate: 0}
"""
# tiny.yaml asks for 2 cpus and runtime_min 30: one stage without history is 1 CPU-hour.
BUDGET = "budget: {cpu_hours: 0.25}\n"


def smk(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SNAKEMAKE, "--cores", "2", *args], cwd=root, capture_output=True, text=True, env=ENV)


def cli(root: Path, *args: str):
    return CliRunner().invoke(app, ["--root", str(root), *args])


def stage_of(plan: Plan, run: str, kind: str) -> str:
    return next(s for s in plan.run_chain(run) if plan.stages[s].kind == kind)


def row(output: str, sid: str) -> list[str]:
    """The cells of the stage table's row for sid."""
    line = next(x for x in output.splitlines() if sid in x)
    return [c.strip() for c in line.strip("│ ").split("│")]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A tiny project with a budget below the estimate where base's pretrain was built with
    --config allow_over_budget=1."""
    root = make_project(tmp_path_factory.mktemp("cost") / "proj", config=TINY + BUDGET)
    pretrain = stage_of(Plan.load(root), "base", "pretrain")
    res = smk(root, f"results/_store/pretrain/{pretrain}/MANIFEST.json", "--config", f"{cost.OVERRIDE}=1")
    return root, res


@pytest.mark.slow
def test_the_override_lets_an_over_budget_build_run(built):
    root, res = built
    assert res.returncode == 0, res.stderr[-3000:]
    notes = [line for line in res.stderr.splitlines() if line.startswith("budget:")]
    assert len(notes) == 1 and notes[0].endswith(f"going ahead: --config {cost.OVERRIDE}=1"), notes
    assert len(list((root / "results/_store/pretrain").glob("*/MANIFEST.json"))) == 1


@pytest.mark.slow
def test_a_stage_job_records_its_wall_time(built):
    root, _ = built
    plan = Plan.load(root)
    pretrain = stage_of(plan, "base", "pretrain")
    seconds = cost.read_benchmark(root / cost.BENCHMARK.format(kind="pretrain", sid=pretrain))
    assert seconds is not None and 0 < seconds < 3600
    assert cost.durations(plan, root) == {("pretrain", "tiny"): [seconds]}


@pytest.mark.slow
def test_plan_cost_lists_built_stages_as_reused_and_the_rest_as_new(built):
    root, _ = built
    plan = Plan.load(root)
    pretrain, evaluate = stage_of(plan, "base", "pretrain"), stage_of(plan, "base", "evaluate")
    res = cli(root, "plan", "--cost", "base")
    assert res.exit_code == 0, res.output
    assert row(res.output, pretrain)[:3] == [pretrain, "tiny", "reused"]
    assert row(res.output, evaluate)[:4] == [evaluate, "tiny", "new", "30.0"]   # runtime_min: no history
    assert "1 run: 2 stages, 1 new, 1 reused from the store" in res.output
    # the eval alone (30 min on 1 CPU) is over the 0.25 CPU-hour budget: plan --cost says snakemake
    # would refuse it
    assert "snakemake would refuse this build: budget: this build needs ~0.5 CPU-hours" in res.output


def test_plan_cost_covers_each_run_and_its_parents_evals(proj):
    plan = Plan.load(proj)
    run = "filter-s2only"
    expected = set(plan.run_chain(run)) | set(plan.run_chain(plan.tree.specs[run].parent))
    assert set(cost.build_stages(plan, [run])) == expected
    res = cli(proj, "plan", "--cost", run)
    assert res.exit_code == 0, res.output
    assert f"1 run: {len(expected)} stages, {len(expected)} new, 0 reused from the store" in res.output
    assert all(sid in res.output for sid in expected)
    assert "budget: none set" in res.output


def test_a_stage_with_a_manifest_in_the_store_is_reused(proj):
    plan = Plan.load(proj)
    pretrain = stage_of(plan, "base", "pretrain")
    folder = proj / "results/_store/pretrain" / pretrain
    folder.mkdir(parents=True)
    est = cost.estimate(plan, cost.build_stages(plan, ["base"]), proj)
    assert [s.sid for s in est.new] == [pretrain] + [s for s in plan.run_chain("base") if s != pretrain]
    (folder / "MANIFEST.json").write_text('{"files": {}}\n')   # a temp-less folder without one is unfinished
    est = cost.estimate(plan, cost.build_stages(plan, ["base"]), proj)
    assert [s.sid for s in est.reused] == [pretrain] and pretrain not in [s.sid for s in est.new]


def test_recorded_durations_of_the_same_kind_and_model_replace_the_runtime_limit(proj):
    plan = Plan.load(proj)
    trains = [s for s in plan.stages_for(plan.active_run_ids()) if plan.stages[s].kind == "train"]
    for sid, seconds in zip(trains[:3], (60, 600, 6000)):
        path = proj / cost.BENCHMARK.format(kind=sid.split("-", 1)[0], sid=sid)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"s\th:m:s\tmax_rss\n{seconds}.0\t0:00:00\t1.0\n")
    (proj / "logs/train/train-000000000000.benchmark.tsv").write_text("s\n9999.0\n")  # not in the plan: ignored
    est = cost.estimate(plan, trains[3:5] + [stage_of(plan, "base", "evaluate")], proj)
    by_kind = {s.kind: s for s in est.stages}
    assert by_kind["train"].basis == "history (n=3)" and by_kind["train"].hours == pytest.approx(600 / 3600)
    assert by_kind["train"].cpu_hours == pytest.approx(1 * 600 / 3600)         # tiny: 1 cpu, no GPU
    assert by_kind["evaluate"].basis == cost.RUNTIME_BASIS and by_kind["evaluate"].hours == 0.5
    assert est.gpu_hours == 0


def test_the_refusal_is_one_line_naming_each_cap_exceeded_and_the_override():
    est = cost.Estimate([cost.StageCost("train-aaaaaaaaaaaa", "train", "llama31_8b", True, 2.0, 8, 1, "history (n=4)"),
                         cost.StageCost("evaluate-bbbbbbbbbbbb", "evaluate", "llama31_8b", True, 4.0, 8, 1,
                                        cost.RUNTIME_BASIS),
                         cost.StageCost("pretrain-cccccccccccc", "pretrain", "tiny", False, 0.5, 2, 0, "history (n=1)")])
    assert cost.over_budget(est, BudgetConfig(gpu_hours=6.0)) is None
    assert cost.over_budget(est, BudgetConfig(gpu_hours=2.0, cpu_hours=100.0)) == (
        "budget: this build needs ~6.0 GPU-hours > budget.gpu_hours 2.0 (by 4.0) for 2 new stages "
        "(1 of them from runtime_min limits, an upper bound); raise budget.gpu_hours in conf/config.yaml "
        "or rerun with --config allow_over_budget=1")
    both = cost.over_budget(est, BudgetConfig(gpu_hours=2.0, cpu_hours=10.0))
    assert "\n" not in both and "~48 CPU-hours > budget.cpu_hours 10 (by 38)" in both
    assert "raise budget.gpu_hours / budget.cpu_hours in conf/config.yaml" in both
    assert cost.overridden({"allow_over_budget": 1}) and cost.overridden({"allow_over_budget": True})
    assert not cost.overridden({}) and not cost.overridden({"allow_over_budget": 0})


@pytest.mark.slow
def test_a_budget_below_the_estimate_stops_snakemake_before_any_job_runs(tmp_path):
    root = make_project(tmp_path / "proj", config=TINY + BUDGET)
    plan = Plan.load(root)
    res = smk(root, "results/base/eval.json")
    assert res.returncode != 0
    expected = cost.over_budget(cost.estimate(plan, cost.build_stages(plan, ["base"]), root), BudgetConfig(cpu_hours=0.25))
    # pretrain 30 min on 2 CPUs + its eval 30 min on 1
    assert expected.startswith("budget: this build needs ~1.5 CPU-hours > budget.cpu_hours 0.25 (by 1.2)")
    assert res.stderr.rstrip().splitlines()[-1] == expected
    assert [line for line in res.stderr.splitlines() if line.startswith("budget:")] == [expected]
    assert not (root / "results").exists() and not (root / "logs").exists()   # no job ran, nothing written


@pytest.mark.slow
def test_a_dry_run_over_budget_is_not_refused(tmp_path):
    root = make_project(tmp_path / "proj", config=TINY + BUDGET)
    res = smk(root, "-n", "results/base/eval.json")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "budget:" not in res.stderr + res.stdout


@pytest.mark.slow
def test_a_forced_rerun_is_counted_while_touch_and_no_hooks_are_exempt(tmp_path):
    """The budget rules for Snakemake's other modes, on a built pretrain under a budget below its
    own recorded seconds: nothing to run is never refused; --forcerun runs the stage again, so it is
    counted and refused (its history, not the runtime limit, prices it); --touch runs nothing and
    --no-hooks skips onstart (where the check lives, as a user's escape hatch): both go ahead."""
    root = make_project(tmp_path / "proj", config=TINY + "budget: {cpu_hours: 0.000001}\n")
    plan = Plan.load(root)
    pretrain = stage_of(plan, "base", "pretrain")
    target = f"results/_store/pretrain/{pretrain}/MANIFEST.json"
    assert smk(root, target, "--config", f"{cost.OVERRIDE}=1").returncode == 0
    manifest = (root / target).read_bytes()

    def budget_lines(res) -> list[str]:
        return [line for line in (res.stdout + res.stderr).splitlines() if line.startswith("budget:")]

    again = smk(root, target)
    assert again.returncode == 0 and budget_lines(again) == [], again.stderr[-2000:]
    forced = smk(root, target, "--forcerun", "pretrain")
    assert forced.returncode != 0
    (line,) = budget_lines(forced)
    assert line.startswith("budget: this build needs ~") and "for 1 new stage (" in line, line
    assert "(from recorded durations)" in line, line
    assert (root / target).read_bytes() == manifest
    for exempt in ("--touch", "--no-hooks"):
        res = smk(root, target, "--forcerun", "pretrain", exempt)
        assert res.returncode == 0 and budget_lines(res) == [], (exempt, res.stderr[-2000:])
    assert (root / target).is_file()
