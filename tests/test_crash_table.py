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
from martingale.store.locks import live_snakemakes, stale_lock

from projcopy import SMOKE, base_pretrain_sid, make_project

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
ENV = {k: v for k, v in os.environ.items() if k != "WANDB_MODE"}   # wandb mirrors offline (the default)

pytestmark = pytest.mark.slow


def started(root: Path) -> Path | None:
    """The pretrain job's log once it has a line, or its temp folder (files.atomic_dir)."""
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
    # Killed while its folder was being written (files.atomic_dir's temp folder left behind, as a kill
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


# ---------------------------------------------------------------- a kill just after the rename, a SIGTERM
TINY = """
# --- tiny scale (tests/test_crash_table.py) ---
world: {n_train: 24, n_heldout: 24, clues_per_question: 4}
model: {hidden_size: 48, num_layers: 2, num_heads: 2, intermediate_size: 96}
pretrain: {steps: 20, batch_size: 8, warmup: 5}
eval: {n_bootstrap: 20, min_parse_rate: 0}
"""


def _children(pid: int) -> list[int]:
    """Every live descendant of pid (from /proc: no library needed)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _state(pid: int) -> str:
    """The process's state letter (R, S, T stopped, Z zombie); "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def _wait(what: str, ok, proc: subprocess.Popen, err: Path, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not ok():
        assert time.monotonic() < deadline, f"{what} within {seconds} s:\n{err.read_text()[-3000:]}"
        time.sleep(0.05)


def _pretrain_target(root: Path) -> tuple[str, Path]:
    sid = base_pretrain_sid(root)
    return sid, root / "results/_store/pretrain" / sid / "MANIFEST.json"


def test_a_stage_killed_just_after_its_rename_is_rebuilt_to_the_same_bytes_by_the_profile(tmp_path):
    """The stage's folder is in place but Snakemake never saw its job end (stopped with SIGSTOP
    once the job started, so it cannot reap it; SIGKILLed once the job has exited): Snakemake
    marks the output incomplete. A plain rerun refuses to trust it; the local profile
    (rerun-incomplete) rebuilds it, and the rebuilt stage's manifest is byte-identical."""
    root = make_project(tmp_path / "proj", code=("workflow", "profiles"), config=TINY)
    sid, manifest = _pretrain_target(root)
    target = str(manifest.relative_to(root))
    err_path = tmp_path / "snakemake.err"
    with open(err_path, "w") as err:
        proc = subprocess.Popen([SNAKEMAKE, "--cores", "1", target], cwd=root, env=ENV,
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        try:
            _wait("the pretrain job starts", lambda: started(root) is not None, proc, err_path)
            os.kill(proc.pid, signal.SIGSTOP)            # Snakemake freezes; its job runs on
            jobs = _children(proc.pid)
            _wait("the job renames its folder into place and exits",
                  lambda: manifest.is_file() and all(_state(p) in ("Z", "") for p in jobs), proc, err_path)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert list((root / ".snakemake/incomplete").rglob("*")), "Snakemake did not see the job finish"
    first = manifest.read_bytes()
    assert subprocess.run([SNAKEMAKE, "--unlock", target], cwd=root, env=ENV, capture_output=True).returncode == 0

    plain = subprocess.run([SNAKEMAKE, "--cores", "1", target], cwd=root, env=ENV, capture_output=True, text=True)
    assert plain.returncode != 0 and "incomplete" in plain.stderr.lower(), plain.stderr[-2000:]
    assert manifest.read_bytes() == first
    profile = subprocess.run([SNAKEMAKE, "--profile", "profiles/local", target], cwd=root, env=ENV,
                             capture_output=True, text=True)
    assert profile.returncode == 0, profile.stderr[-3000:]
    assert "1 of 1 steps (100%) done" in profile.stderr, profile.stderr[-2000:]
    assert manifest.read_bytes() == first, "the rebuilt stage has other bytes"
    assert not list((root / ".snakemake/incomplete").rglob("*.*"))


def test_a_stage_sent_sigterm_logs_why_leaves_no_folder_and_its_run_shows_crashed_with_that_log(tmp_path):
    """SIGTERM to the stage's own process (what scancel or a time limit sends): the stage logs
    "killed by signal SIGTERM", removes its temp folder, Snakemake sees the job fail and exits
    releasing its lock (no `--unlock` needed), and the table says crashed with the stage's log."""
    root = make_project(tmp_path / "proj", config=SMOKE)
    sid, manifest = _pretrain_target(root)
    err_path = tmp_path / "snakemake.err"
    with open(err_path, "w") as err:
        proc = subprocess.Popen([SNAKEMAKE, "--cores", "1", str(manifest.relative_to(root))], cwd=root,
                                env=ENV, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        try:
            log = root / "logs/pretrain" / f"{sid}.log"
            _wait("the stage logs its first line", lambda: log.is_file() and log.stat().st_size > 0, proc, err_path)
            stage = [p for p in _children(proc.pid) if "stage.py" in Path(f"/proc/{p}/cmdline").read_bytes().decode()
                     and Path(f"/proc/{p}/exe").resolve().name.startswith("python")]
            assert len(stage) == 1, stage
            os.kill(stage[0], signal.SIGTERM)
            assert proc.wait(timeout=120) != 0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    text = log.read_text()
    assert "stage failed" in text and "Killed: killed by signal SIGTERM" in text, text[-2000:]
    assert not manifest.parent.exists()
    assert not list((root / "results/_store/pretrain").glob(".*.tmp")), "a temp folder was left behind"
    assert not live_snakemakes(root) and not stale_lock(root)
    row = {r["run_id"]: r for r in json.loads(_table(root))}["base"]
    assert row["state"] == "crashed" and row["log"] == f"logs/pretrain/{sid}.log", row
