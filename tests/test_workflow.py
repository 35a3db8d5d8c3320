"""The Snakefile over the plan: a dry run builds each distinct stage once; lint is clean."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from martingale.plan import Plan

from projcopy import proj, run_files, write_run  # noqa: F401 (proj: fixture)

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))

pytestmark = pytest.mark.slow   # each test parses the Snakefile in a snakemake process (5-10 s)


def snakemake(root, *args):
    return subprocess.run([SNAKEMAKE, *args], cwd=root, capture_output=True, text=True)


def job_counts(output: str) -> dict[str, int]:
    counts = {}
    for line in output.splitlines():
        m = re.fullmatch(r"\s*([A-Za-z_]+)\s+(\d+)\s*", line)
        if m:
            counts[m.group(1)] = int(m.group(2))
    return counts


def test_dry_run_of_all_lists_each_distinct_stage_once(proj):
    res = snakemake(proj, "-n", "--quiet", "rules")
    assert res.returncode == 0, res.stderr
    counts = job_counts(res.stdout + res.stderr)
    plan = Plan.load(proj)
    runs = plan.active_run_ids()
    assert len(runs) == len(run_files(proj))                 # the fixture marks no run invalid
    stages = plan.stages_for(runs)
    rows = [r for run in runs for r in plan.run_stages(run)]
    distills = {s for s in stages if plan.stages[s].kind == "distill"}             # one D a seed
    assert counts["pretrain"] == 1 and counts["distill"] == len(distills) == 3
    assert counts["train"] == len({r.model_stage for r in rows if r.stage != "s0"})
    natural = {e["eval_stage"] for run in runs for e in plan.natural_evals(run)}  # the natural base, measured as each run measures
    assert counts["evaluate"] == len({r.eval_stage for r in rows} | natural)
    assert counts["aggregate"] == len(runs)
    assert counts["total"] == len(stages) + len(runs) + 2   # + runs_table + all
    assert not (proj / "results").exists()


def test_snakemake_schedules_each_stage_at_its_plan_priority(proj):
    res = snakemake(proj, "-n", "--cores", "2", "results/D/eval.json")
    assert res.returncode == 0, res.stderr[-3000:]
    printed = dict(re.findall(r"wildcards: sid=(\S+)\s+priority: (\d+)", res.stdout + res.stderr))
    prio = Plan.load(proj).priorities()
    assert len(printed) >= 3 and {sid: int(p) for sid, p in printed.items()} == {sid: prio[sid] for sid in printed}


def test_invalid_runs_are_not_built(proj):
    write_run(proj, "twostage-v2-k3.yaml",
              "parent: twostage-v2-D-snap\nknob: seeds=[41,42,43]\ninvalid: \"seed 41 used the wrong split\"\n")
    res = snakemake(proj, "-n", "--quiet", "rules")
    assert res.returncode == 0, res.stderr
    assert job_counts(res.stdout + res.stderr)["aggregate"] == len(run_files(proj)) - 1


def test_a_bad_run_file_fails_the_parse_with_its_one_line_error(proj):
    write_run(proj, "x.yaml", "parent: base\nknob: stages.s1.lr=fast\n")
    res = snakemake(proj, "-n", "--quiet")
    assert res.returncode != 0
    assert "conf/runs/x.yaml: stages.s1.lr: Value 'fast'" in res.stderr
    assert not (proj / "results").exists()


def test_snakemake_lint_has_no_findings(proj):
    res = snakemake(proj, "--lint")
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("profile", ["local", "slurm"])
def test_each_profile_sets_the_recovery_and_rerun_settings_the_readme_promises(profile):
    """What makes a killed or edited build come back right, in both profiles: an output Snakemake
    did not see finish is rebuilt (rerun-incomplete), one failed stage does not stop the others
    (keep-going), and an edited knob, input or code reruns what it affects (rerun-triggers)."""
    import yaml

    from projcopy import REPO
    settings = yaml.safe_load((REPO / "profiles" / profile / "config.yaml").read_text())
    assert settings["rerun-incomplete"] is True
    assert settings["keep-going"] is True
    assert {"params", "input", "code", "mtime"} <= set(settings["rerun-triggers"])
    assert settings["latency-wait"] >= 10
    if profile == "slurm":
        assert settings["executor"] == "slurm" and settings["retries"] >= 1
        # sacct says "CANCELLED by <uid>", which plugin 2.8.0 never matches: an scancel'd job would hang
        assert settings["slurm-status-command"] == "squeue"
        assert not any(k in settings.get("default-resources", {}) for k in ("slurm_partition", "slurm_account")), \
            "partition and account come from the environment only"
