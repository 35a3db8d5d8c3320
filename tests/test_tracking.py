"""The wandb mirror: offline by default, named by run-id, never writing an API key, syncable later."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from martingale.plan import Plan
from martingale.store.plan_index import IndexedStage
from martingale.store.tracking import flush, log_run, mirror_stage, stage_history, wandb_id

from projcopy import proj  # noqa: F401 (fixture)

SECRET = "sk-test-NEVER-WRITE-THIS-0123456789abcdef"


@pytest.fixture
def offline_env(monkeypatch):
    """A key in the environment, and no WANDB_MODE: the config's offline default applies."""
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")


def _all_bytes(folder: Path) -> bytes:
    """Every byte of an offline run, once wandb's service has flushed it: the .wandb file is
    written asynchronously, and a stage's process exit (wandb's atexit teardown) flushes it."""
    flush()
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


@pytest.mark.slow   # a wandb service and an offline run (~5 s)
def test_offline_run_is_named_by_run_id_with_stage_as_job_type_and_lineage_as_group(tmp_path, offline_env):
    folder = log_run(name="A-on-D", run_id="train-0123456789ab", job_type="train-s1", group="base/D/A-on-D",
                     config={"lr": 0.001}, settings={"mode": "offline", "project": "martingale"},
                     steps=[{"step": 0, "loss": 1.0}, {"step": 1, "loss": 0.5, "note": "x"}],
                     summary={"brier": 0.2}, root=tmp_path)
    assert folder is not None and folder.parent == tmp_path / "wandb"
    assert folder.name.startswith("offline-run-") and folder.name.endswith("train-0123456789ab")
    data = _all_bytes(folder)
    for text in (b"A-on-D", b"train-s1", b"base/D/A-on-D", b"martingale"):
        assert text in data, text


@pytest.mark.slow   # an offline run: wandb's service starts (~5-20 s)
def test_an_api_key_in_the_environment_is_never_written(tmp_path, offline_env):
    folder = log_run(name="r", run_id="eval-0123456789ab", job_type="eval-s0", group="r", config={},
                     settings={}, summary={"brier": 0.1}, root=tmp_path)
    assert SECRET.encode() not in _all_bytes(folder)


@pytest.mark.slow   # an offline run, then `wandb sync` in a subprocess
def test_wandb_sync_later_sees_the_offline_run(tmp_path, offline_env):
    folder = log_run(name="r", run_id="eval-abcdefabcdef", job_type="eval-s0", group="r", config={},
                     settings={}, summary={"brier": 0.1}, root=tmp_path)
    _all_bytes(folder)                     # flushed
    wandb_cli = str(Path(sys.executable).with_name("wandb"))
    res = subprocess.run([wandb_cli, "sync", "--dry-run", str(folder)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "eval-abcdefabcdef" in res.stdout + res.stderr


def test_disabled_mode_logs_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert log_run(name="r", run_id="x", job_type="eval-s0", group="r", config={}, settings={}, root=tmp_path) is None
    assert not (tmp_path / "wandb").exists()


def test_wandb_ids_keep_only_safe_characters():
    assert wandb_id("twostage-v2.k3") == "twostage-v2_k3"


def test_stage_history_reads_train_steps_and_eval_metrics(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t/train.jsonl").write_text('{"step": 0, "loss": 1}\n{"step": 1, "loss": 0.5}\n')
    steps, summary = stage_history(tmp_path / "t")
    assert [s["step"] for s in steps] == [0, 1] and summary["loss"] == 0.5
    (tmp_path / "e").mkdir()
    (tmp_path / "e/metrics.json").write_text(json.dumps({"brier": 0.12, "ms": 0.01}))
    assert stage_history(tmp_path / "e") == ([], {"brier": 0.12, "ms": 0.01})


def test_a_shared_stage_is_logged_under_the_run_that_introduced_it(proj):
    plan = Plan.load(proj)
    index = plan.index()
    distill = next(s for s in plan.run_chain("filter-s2only") if s.startswith("distill-"))
    assert index.stages[distill] == IndexedStage(owner="D", job_type="distill-D")
    assert index.runs["filter-s2only"].group.startswith("base/D/A-on-D/")


def test_mirror_of_a_stage_missing_from_the_index_warns_and_does_not_raise(tmp_path, caplog):
    assert mirror_stage(tmp_path, "train-000000000000", tmp_path, {}) is None
    assert "not in results/_store/index.json" in caplog.text


def test_a_wandb_mode_outside_wandbs_modes_is_refused_in_one_line(monkeypatch):
    from martingale.store.tracking import WandbConfig, _mode
    monkeypatch.setenv("WANDB_MODE", "sometimes")
    with pytest.raises(ValueError, match=r"^WANDB_MODE=sometimes: wandb's mode is one of offline, online"):
        _mode(WandbConfig())
