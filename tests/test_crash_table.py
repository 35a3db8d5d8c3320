"""A real build killed with kill -9: the table says crashed, not running, and `martingale status`
says that `snakemake --unlock` is safe.

A smoke-scale throw-away project (tests/projcopy.py) starts `snakemake results/base/eval.json`
(pretrain → evaluate → aggregate, the cheapest chain); once the pretrain job is under way (its
log has its first line, or its temp folder exists) the whole Snakemake process group gets SIGKILL:
the lock stays in .snakemake/locks, the job log is cut off mid-run and nothing is finished.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from martingale.cli import app
from martingale.locks import live_snakemakes, stale_lock
from projcopy import SMOKE, make_project

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
ENV = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}   # wandb mirrors offline (the default)

pytestmark = pytest.mark.slow


def started(root: Path) -> Path | None:
    """The pretrain job's log once it has a line, or its temp folder (io.atomic_dir)."""
    logs = [p for p in (root / "logs" / "pretrain").glob("*.log") if p.stat().st_size > 0] \
        if (root / "logs" / "pretrain").is_dir() else []
    store = root / "results" / "_store" / "pretrain"
    tmps = list(store.glob(".*.tmp")) if store.is_dir() else []
    return (logs or tmps or [None])[0]


def test_a_build_killed_with_sigkill_shows_crashed_not_running(tmp_path):
    root = make_project(tmp_path / "proj", config=SMOKE)
    err = open(tmp_path / "snakemake.err", "w")
    proc = subprocess.Popen([SNAKEMAKE, "--cores", "1", "results/base/eval.json"], cwd=root, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    try:
        deadline = time.monotonic() + 45
        while started(root) is None:
            assert proc.poll() is None, (tmp_path / "snakemake.err").read_text()[-3000:]
            assert time.monotonic() < deadline, "the pretrain job did not start within 45 s"
            time.sleep(0.1)
        # While it runs, the row is not crashed (running only while a stage's temp folder exists).
        assert live_snakemakes(root)
        rows = {r["run_id"]: r for r in json.loads(_table(root))}
        assert rows["base"]["state"] in ("queued", "running")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # snakemake and its job: no cleanup runs
        except ProcessLookupError:               # it had ended (the assertion above says why)
            pass
        proc.wait()
        err.close()
    for _ in range(50):                           # the killed job's process is gone
        if not live_snakemakes(root):
            break
        time.sleep(0.1)
    assert stale_lock(root), "kill -9 leaves Snakemake's lock behind"
    assert not list((root / "results").glob("base/eval.json"))

    row = {r["run_id"]: r for r in json.loads(_table(root))}["base"]
    assert row["state"] == "crashed", row
    assert row["log"] is not None and row["log"].startswith("logs/pretrain/pretrain-"), row
    assert "stage failed" not in (root / row["log"]).read_text()   # cut off: no failure written
    # Killed while its folder was being written (io.atomic_dir's temp folder left behind, as a kill
    # during the save leaves it): still crashed, not running, since no live Snakemake holds the lock.
    sid = Path(row["log"]).stem
    (root / "results" / "_store" / "pretrain" / f".{sid}.k9x.tmp").mkdir(parents=True, exist_ok=True)
    assert {r["run_id"]: r for r in json.loads(_table(root))}["base"]["state"] == "crashed"

    status = CliRunner().invoke(app, ["--root", str(root), "status"])
    assert status.exit_code == 0, status.output
    assert "base  crashed" in status.output and "running" not in status.output
    assert "`snakemake --unlock` is safe" in status.output


def _table(root: Path) -> str:
    res = CliRunner().invoke(app, ["--root", str(root), "table"])
    assert res.exit_code == 0, res.output
    return (root / "runs.json").read_text()
