"""The Snakefile over the plan: a dry run builds each distinct stage once; lint is clean."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from martingale.plan import Plan

from projcopy import REPO, proj, write_run  # noqa: F401 (proj: fixture)

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


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
    kinds = [plan.stages[s].kind for s in plan.stages_for(runs)]
    assert counts["pretrain"] == kinds.count("pretrain") == 1
    assert counts["distill"] == kinds.count("distill") == 1
    assert counts["train"] == kinds.count("train")
    assert counts["evaluate"] == kinds.count("eval")
    assert counts["aggregate"] == len(runs) == 15
    assert counts["total"] == len(kinds) + len(runs) + 2  # + runs_table + all
    assert not (proj / "results").exists()


def test_invalid_runs_are_not_built(proj):
    write_run(proj, "twostage-v2-k3.yaml",
              "parent: twostage-v2-D-snap\nknob: seeds=[41,42,43]\ninvalid: \"seed 41 used the wrong split\"\n")
    res = snakemake(proj, "-n", "--quiet", "rules")
    assert res.returncode == 0, res.stderr
    assert job_counts(res.stdout + res.stderr)["aggregate"] == 14


def test_a_bad_run_file_fails_the_parse_with_its_one_line_error(proj):
    write_run(proj, "x.yaml", "parent: base\nknob: stages.s1.lr=fast\n")
    res = snakemake(proj, "-n", "--quiet")
    assert res.returncode != 0
    assert "conf/runs/x.yaml: stages.s1.lr: Value 'fast'" in res.stderr
    assert not (proj / "results").exists()


def test_snakemake_lint_has_no_findings():
    res = snakemake(REPO, "--lint")
    assert res.returncode == 0, res.stdout + res.stderr
