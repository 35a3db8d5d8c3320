"""`martingale stage <id>`: one stage's job run in the command's own process, from the plan: what it
refuses (in one line), and at smoke scale the same bytes as the stage's Snakemake job."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from martingale.plan import Plan
from martingale.store import stage_dir

from projcopy import SMOKE, copy_pretrain, make_project, proj  # noqa: F401 (proj: fixture)

BIN = Path(sys.executable).parent
ENV = {**os.environ, "WANDB_MODE": "disabled"}


def stage(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "martingale"), "--root", str(root), "stage", *args], capture_output=True,
                          text=True, env=ENV)


def base_stage(root: Path, kind: str) -> str:
    plan = Plan.load(root)
    return next(s for s in plan.run_chain("base") if plan.stages[s].kind == kind)


def test_a_stage_whose_inputs_are_not_built_is_refused_naming_the_input(proj):
    sid, pretrain = base_stage(proj, "evaluate"), base_stage(proj, "pretrain")
    res = stage(proj, sid)
    assert res.returncode == 1
    assert res.stderr.strip() == (f"error: stage {sid}: its model input {pretrain} is not built: "
                                  f"snakemake -c2 {stage_dir(pretrain)}/MANIFEST.json")
    assert not (proj / stage_dir(sid)).exists()


def test_an_unknown_stage_and_a_built_one_are_refused(proj):
    assert stage(proj, "evaluate-000000000000").stderr.startswith("error: stage 'evaluate-000000000000': no stage")
    sid = base_stage(proj, "pretrain")
    (proj / stage_dir(sid)).mkdir(parents=True)
    (proj / stage_dir(sid) / "MANIFEST.json").write_text("{}")
    res = stage(proj, sid)
    assert res.returncode == 1 and res.stderr.strip().endswith("is built (results/_store/pretrain/"
                                                               f"{sid}): --force runs it again")


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_stage_run_here_writes_the_bytes_its_snakemake_job_writes(tmp_path, smoke_pretrain):
    """The base run's eval of the smoke pretrain: built by Snakemake, moved aside, run again by
    `martingale stage`: the same files, MANIFEST.json (every file's sha256) first; again with
    --force, over the built folder."""
    root = make_project(tmp_path / "proj", config=SMOKE)
    copy_pretrain(smoke_pretrain, root)
    sid = base_stage(root, "evaluate")
    res = subprocess.run([str(BIN / "snakemake"), "--cores", "2", f"{stage_dir(sid)}/MANIFEST.json"], cwd=root,
                         capture_output=True, text=True, env=ENV)
    assert res.returncode == 0, res.stderr[-3000:]
    by_snakemake = tmp_path / "by-snakemake"
    shutil.move(root / stage_dir(sid), by_snakemake)
    res = stage(root, sid)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == f"{stage_dir(sid)}: built"
    here = files(root / stage_dir(sid))
    assert here["MANIFEST.json"] == (by_snakemake / "MANIFEST.json").read_bytes()
    assert here == files(by_snakemake)
    assert stage(root, sid).returncode == 1                      # built now: refused without --force
    assert stage(root, sid, "--force").returncode == 0 and files(root / stage_dir(sid)) == here
