"""Building a run also aggregates each ancestor whose aggregate needs nothing beyond that build
(martingale.plan.cost.ancestors_to_aggregate): its evals and its parent's, and everything upstream of
them, from the plan alone. An ancestor that would need another stage stays as it is: a child's
build never trains or evaluates for an ancestor.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from martingale.plan import Plan
from martingale.plan.cost import ancestors_to_aggregate, build_stages, upstream

from projcopy import FIXTURE, make_project

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))

# Tiny scale (as tests/test_cost.py): the stages run for real, briefly; parse failures are allowed.
TINY = """
# --- tiny scale (tests/test_ancestors.py) ---
world: {n_train: 24, n_heldout: 24, clues_per_question: 4}
model: {hidden_size: 48, num_layers: 2, num_heads: 2, intermediate_size: 96}
pretrain: {steps: 20, batch_size: 8, warmup: 5}
eval: {n_bootstrap: 20, min_parse_rate: 0}
"""


@pytest.fixture(scope="module")
def plan() -> Plan:
    return Plan.load(FIXTURE)


def test_ancestors_whose_evals_this_build_makes_are_aggregated(plan):
    # twostage-v2-base (start=base) pairs with twostage-v2-D-snap, whose chain holds its parent's
    # evals: both intermediates come for free; D-snap's aggregate would need D's evals (not built).
    assert ancestors_to_aggregate(plan, "twostage-v2-base") == \
        ["twostage-v2-D-snap", "twostage-v2-D-snap-s1"]


def test_an_ancestor_needing_another_stage_is_not_aggregated(plan):
    # filter-twostage pairs with filter-twostage-s2a, whose s2 (A, unfiltered) filter-s2only never
    # trains: building filter-s2only leaves it out, whatever another build has put in the store
    # (D and base come free: filter-s2only measures the natural base as it measures itself, which
    # is base's own s0 eval)
    assert ancestors_to_aggregate(plan, "filter-s2only") == ["D", "base"]
    missing = upstream(plan, [r.eval_stage for r in plan.run_stages("filter-twostage-s2a")]) \
        - set(build_stages(plan, ["filter-s2only"]))
    assert {plan.stages[s].kind for s in missing} == {"train", "evaluate"}


def test_invalid_ancestors_are_not_aggregated(tmp_path):
    root = make_project(tmp_path / "proj")
    path = root / "conf/runs/twostage-v2-D-snap.yaml"
    path.write_text(path.read_text() + 'invalid: "a bug"\n')
    assert ancestors_to_aggregate(Plan.load(root), "twostage-v2-base") == ["twostage-v2-D-snap-s1"]


@pytest.mark.slow
def test_building_a_child_writes_its_parents_results_and_the_table_shows_both_done(tmp_path):
    # A child whose knob changes no stage (wandb.project is in no stage's slice): its build runs
    # base's pretrain and eval, and aggregates base as well as the child.
    root = make_project(tmp_path / "proj", config=TINY,
                        runs={"base-renamed.yaml": "parent: base\nknob: wandb.project=martingale-renamed\n"})
    res = subprocess.run([SNAKEMAKE, "--cores", "2", "results/base-renamed/eval.json"], cwd=root,
                         capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "disabled"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert (root / "results/base/eval.json").is_file() and (root / "results/base-renamed/eval.json").is_file()
    from martingale.table import build_table
    states = {r["run_id"]: r["state"] for r in build_table(root)}
    assert states["base"] == "done" and states["base-renamed"] == "done"
    assert states["D"] == "queued"   # not an ancestor: untouched
    # An edit that reruns base's aggregate (its config changed) must not hide a new child's own jobs.
    with open(root / "conf/config.yaml", "a", encoding="utf-8") as f:
        f.write("judge: {max_tokens: 3}\n")
    (root / "conf/runs/base-trace.yaml").write_text("parent: base\nknob: elicit.judge=trace\n")
    res = subprocess.run([SNAKEMAKE, "-n", "--cores", "2", "results/base-trace/eval.json"], cwd=root,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout + res.stderr
    assert "wildcards: run=base-trace" in out and "wildcards: run=base\n" in out
    assert re.search(r"^evaluate\s+1$", out, re.M), out[-2000:]


def _aggregate_inputs(root: Path, run: str, target: str = "all") -> list[str]:
    """The inputs `snakemake -n <target>` gives the run's aggregate job."""
    res = subprocess.run([SNAKEMAKE, "-n", "--cores", "1", target], cwd=root, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    for block in re.split(r"^\[.*\]$", res.stdout + res.stderr, flags=re.M):   # one job per [date] header
        if "rule aggregate:" in block and re.search(rf"wildcards: run={re.escape(run)}$", block, re.M):
            return sorted(re.search(r"^\s*input: (.*)$", block, re.M).group(1).split(", "))
    raise AssertionError(f"no aggregate job for {run}")


def test_an_aggregates_inputs_do_not_depend_on_the_store_or_the_command_line(tmp_path):
    """An aggregate's inputs come from the plan alone: the same with an empty store and a full one,
    for `all` and for the run named, so no build leaves another's aggregates stale (an ancestor's
    eval.json as an input once the store held its evals made 54 aggregates of a finished campaign
    stale, and a run named on the command line made `snakemake runs.json` rerun its aggregate)."""
    root = make_project(tmp_path / "proj")
    run = "twostage-v2-D-snap"       # its ancestor D-snap needs D's evals: not in its own build
    empty = _aggregate_inputs(root, run)
    assert _aggregate_inputs(root, run, f"results/{run}/eval.json") == empty
    assert "results/twostage-v2-D-snap-s1/eval.json" in empty and "results/D-snap/eval.json" not in empty
    plan = Plan.load(root)
    for sid in plan.stages:          # every stage finished, as after a campaign
        marker = root / "results" / "_store" / plan.stages[sid].kind / sid / "MANIFEST.json"
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("{}")
    assert _aggregate_inputs(root, run) == empty
    assert _aggregate_inputs(root, run, f"results/{run}/eval.json") == empty
