"""`martingale decide` end to end at smoke scale: an open finding on `base` gets its next looks as run
files a person can read (more seeds, or a held-out redraw), built by Snakemake within the budget;
FINDINGS.md says which look decided it, or why it stopped; a second decide with nothing new builds
nothing; a look whose files a killed decide wrote is built by the next one."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from martingale.config.runs import RunTree
from martingale.decide import LEDGER, decide, spent
from martingale.plan import Plan, cost
from martingale.store.files import read_jsonl
from martingale.table.looks import look_runs

from projcopy import SMOKE, copy_pretrain, make_project

pytestmark = pytest.mark.slow     # builds base and its looks at smoke scale (~3 min)

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
PLAN = "looks: 3\nseeds: [1, 3, 5]\ndraws: 2\nalpha: 0.05\nboundary: pocock\n"
FINDING = ('base-flat:\n  claim: C1\n  log: l\n  statement: "base\'s same-mode MS > 0"\n'
           '  test: {run: base, stage: s0, metric: ms, expect: "> 0"}\n')


def store(root: Path) -> set[str]:
    return {p.name for p in (root / "results" / "_store").glob("*/*")}


@pytest.fixture(scope="module")
def project(tmp_path_factory, smoke_pretrain) -> Path:
    """base built at smoke scale on one seed, with a finding on its MS and decide's plan."""
    root = make_project(tmp_path_factory.mktemp("decide") / "proj", code=("workflow", "profiles"), config=SMOKE)
    copy_pretrain(smoke_pretrain, root)
    (root / "conf" / "decide.yaml").write_text(PLAN, encoding="utf-8")
    (root / "conf" / "findings.yaml").write_text(FINDING, encoding="utf-8")
    env = {**os.environ, "WANDB_MODE": "disabled"}
    res = subprocess.run([SNAKEMAKE, "--profile", "profiles/local", "results/base/eval.json", "runs.json"],
                         cwd=root, capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return root


@pytest.fixture(scope="module")
def decided(project) -> tuple[Path, list[str], dict]:
    """A decide killed after writing its first look's files and before building them (the files of
    base's look on a fresh held-out draw, written here), then a decide with a budget of 0.05 CPU-h."""
    tree = RunTree.load(project / "conf")
    for f in look_runs(tree, "base", 1, 1, set()):
        (project / "conf" / "runs" / f"{f.run_id}.yaml").write_text(f.text(), encoding="utf-8")
    lines: list[str] = []
    tallies = decide(project, budget=0.05, say=lines.append)
    return project, lines, tallies


def test_a_look_is_run_files_that_pass_martingale_check(decided):
    root, lines, _ = decided
    written = sorted(p.stem for p in (root / "conf" / "runs").glob("base--*.yaml"))
    assert written, lines
    tree = RunTree.load(root / "conf")
    for run in written:
        tree.resolved_config(run)               # composes: one knob, a change, known keys
    res = subprocess.run([str(Path(sys.executable).with_name("martingale")), "check"], cwd=root,
                         capture_output=True, text=True)
    assert res.returncode == 0 and "decide's plan OK (3 looks)" in res.stdout, res.stdout + res.stderr


def test_findings_md_says_which_look_the_finding_was_read_at(decided):
    root, lines, _ = decided
    md = (root / "FINDINGS.md").read_text(encoding="utf-8")
    row = next(line for line in md.splitlines() if line.startswith("| base-flat |"))
    assert " of 3 (" in row, row
    assert any(line.startswith("round 1:") for line in lines), lines


def test_the_budget_is_exceeded_by_one_stage_at_most(decided):
    root, _, _ = decided
    plan = Plan.load(root)
    built = [r["sid"] for r in read_jsonl(root / LEDGER)]
    largest = max(cost.read_benchmark(root / cost.BENCHMARK.format(kind=s.split("-")[0], sid=s)) or 0 for s in built)
    assert spent(root, plan) <= 0.05 + largest / 3600 * 2


def test_the_looks_stage_jobs_start_warm_in_the_worker_decide_keeps_for_its_waves(decided):
    """A wave is one or two jobs, too few for a Snakemake call to start a warm worker: decide keeps
    one, so no look's job imports torch and the rest again."""
    root, _, _ = decided
    built = [r["sid"] for r in read_jsonl(root / LEDGER)]
    logs = [root / "logs" / sid.split("-")[0] / f"{sid}.log" for sid in built]
    assert built and all("job started warm" in log.read_text() for log in logs), built


def test_decide_keeps_a_worker_only_where_the_profile_runs_jobs_on_this_machine():
    from martingale.decide import runs_here
    repo = Path(__file__).resolve().parents[1]
    assert runs_here(repo, "local") and not runs_here(repo, "slurm")


def test_a_second_decide_with_nothing_new_changes_nothing_and_builds_nothing(decided):
    root, _, _ = decided
    before = (store(root), sorted((root / "conf" / "runs").glob("*.yaml")), (root / "FINDINGS.md").read_bytes())
    lines: list[str] = []
    decide(root, budget=0.05, say=lines.append)
    after = (store(root), sorted((root / "conf" / "runs").glob("*.yaml")), (root / "FINDINGS.md").read_bytes())
    assert after == before, lines


def test_a_look_written_by_a_killed_decide_is_built_by_the_next(decided):
    """The written look is resumed from the run files and the store, whatever route decide would
    choose now."""
    root, lines, _ = decided
    assert (root / "results" / "base--d1" / "eval.json").exists(), lines
    assert any("base-flat: look → 1 seeds, 2 draws (resume" in line for line in lines), lines


def test_a_decide_stopped_mid_build_leaves_no_lock_and_the_next_one_builds_on(decided):
    """SIGTERM (a scheduler's, `timeout`'s) stops decide as Ctrl-C does: its Snakemake ends its jobs
    and removes its lock, so the next decide builds on instead of finding the project locked."""
    import signal
    import time

    from martingale.store import locks

    root, _, _ = decided
    # a fourth look and draws the third did not pool: something left to build (at draws: 2 the third
    # look pools every draw, and futility stops base-flat: more seeds cannot narrow what its seeds share)
    plan = PLAN.replace("looks: 3", "looks: 4").replace("[1, 3, 5]", "[1, 3, 5, 8]").replace("draws: 2", "draws: 4")
    (root / "conf" / "decide.yaml").write_text(plan, encoding="utf-8")
    cli = str(Path(sys.executable).with_name("martingale"))
    proc = subprocess.Popen([cli, "decide", "--budget", "0.5"], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "WANDB_MODE": "disabled"})
    deadline = time.monotonic() + 240
    while not locks.live_snakemakes(root) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert locks.live_snakemakes(root), "decide built nothing to stop"
    time.sleep(3)                                    # its Snakemake has taken the lock and started jobs
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode != 0, out
    assert locks.lock_state(root) is None and not locks.live_snakemakes(root), out
    lines: list[str] = []
    decide(root, budget=0.5, say=lines.append)
    assert not any("failed:" in line for line in lines), lines
    assert locks.lock_state(root) is None
