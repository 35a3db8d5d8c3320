"""Live progress of a training stage: one log line per step (k/N, tokens/s, ETA), each step to the
stage's wandb run as it completes and once only, and the stage's bytes unchanged by either."""
from __future__ import annotations

import json
import logging
import re
import struct
from pathlib import Path

import pytest
from typed import typed_slice

from martingale import rewards
from martingale.stages.body import train
from martingale.store import files, tracking
from martingale.training.policy import lora_policy
from martingale.training.progress import Pace, report_step

SID = "train-0123456789ab"
INDEX = {"conf_hash": "x",
         "runs": {"A": {"chain": [SID], "group": "base/A", "model": "tiny", "start": "base", "elicit": "forced",
                        "stage_chain": ["s1"], "seeds": [42], "config_hash": "sha256:x", "needs": [],
                        "wandb": {"mode": "offline", "project": "martingale"}}},
         "stages": {SID: {"owner": "A", "job_type": "train-s1"}}}
LINE = re.compile(r"step (\d+)/(\d+) reward \S+ kl \S+ loss \S+ parse \S+ (\d+) tok/s \S+s/step eta \d+:\d\d:\d\d$")


pytestmark = pytest.mark.usefixtures("one_thread")   # conftest: a tiny model's steps on one torch thread


@pytest.fixture
def offline_env(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")


def tiny_cfg(default_cfg) -> dict:
    """A train stage of 4 steps (8 questions, 4 a step, 2 epochs), a checkpoint at step 2."""
    world = {**default_cfg["world"], "n_train": 8, "n_heldout": 8}
    s = {**default_cfg["stages"]["s1"], "reward": "B", "batch_questions": 4, "generations": 2,
         "epochs": 2, "checkpoint_every": 2}
    return {"world": world, "model": default_cfg["model"], "seed": 0, "stage": s,
            "elicit": {**default_cfg["elicit"], "mode": "snap"}}


def run_steps(cfg: dict, model_dir: Path, work: Path) -> bytes:
    """train_steps on a fresh policy, as train.run calls it; train.jsonl's bytes."""
    from martingale.beliefs.readers import ReadContext
    from martingale.model.backend import open_model
    from martingale.stages.body.common import make_world, seed_everything
    cfg = typed_slice("train", cfg)
    seed_everything(cfg.seed)
    world = make_world(cfg.world)
    train_q, _ = world.splits()
    policy = lora_policy(open_model(model_dir, cfg.model), cfg.stage, cfg.model)
    history = train.train_steps(policy, rewards.bind("B", cfg.stage), train_q,
                                ReadContext(world=world, config=cfg), cfg, work / ".ckpt", "train stage")
    files.write_jsonl(work / "train.jsonl", history)
    return (work / "train.jsonl").read_bytes()


def wandb_records(folder: Path):
    """The records of an offline run's .wandb file (a LevelDB-style log of wandb protobufs)."""
    from wandb.proto import wandb_internal_pb2 as pb
    data = next(folder.glob("*.wandb")).read_bytes()
    assert data[:4] == b":W&B"
    block, pos, buf = 32768, 7, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7]) if left >= 7 else (0, 0, 0)
        if n == 0 and kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + n], pos + 7 + n
        buf = chunk if kind in (1, 2) else buf + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(buf)
            yield record


def key(item) -> str:
    """A history or summary item's key (wandb-core writes it as ``nested_key``)."""
    return item.key or "/".join(item.nested_key)


class FakeRun:
    """What a wandb run is asked to do: log calls, summary, finish."""
    def __init__(self, fail_on_log: bool = False):
        self.logged, self.summary, self.finished, self.fail_on_log = [], {}, None, fail_on_log
        self.dir = "/nowhere/files"

    def log(self, values, step):
        if self.fail_on_log:
            raise RuntimeError("wandb service went away")
        self.logged.append((step, values))

    def finish(self, exit_code=0):
        self.finished = exit_code


def test_each_step_logs_one_progress_line_with_k_of_n_tokens_per_second_and_eta(
        tmp_path, default_cfg, untrained_model, caplog):
    with caplog.at_level(logging.INFO, logger="martingale"):
        run_steps(tiny_cfg(default_cfg), untrained_model, tmp_path)
    lines = [r.getMessage() for r in caplog.records if " step " in r.getMessage()]
    matches = [LINE.search(m) for m in lines]
    assert all(matches), lines
    assert [(int(m[1]), int(m[2])) for m in matches] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert all(int(m[3]) > 0 for m in matches)           # completion tokens were sampled
    assert lines[-1].endswith("eta 0:00:00")


@pytest.mark.slow   # 4 steps, then a wandb service and an offline run (~5 s)
def test_a_stage_logs_each_step_live_and_the_mirror_does_not_log_them_again(
        tmp_path, default_cfg, untrained_model, offline_env):
    cfg = tiny_cfg(default_cfg)
    (tmp_path / "results/_store").mkdir(parents=True)
    (tmp_path / "results/_store/index.json").write_text(json.dumps(INDEX))
    out = tmp_path / "results/train" / SID
    out.mkdir(parents=True)
    with tracking.stage_context(tmp_path, SID, cfg) as ctx:
        run_steps(cfg, untrained_model, out)
        live = ctx.live
        assert live and live.last_step == 3              # open while the stage runs, every step logged
        folder = tracking.mirror_stage(tmp_path, SID, out, cfg)
    tracking.flush()
    assert folder is not None and not live and len(list((tmp_path / "wandb").glob("offline-run-*"))) == 1
    records = list(wandb_records(folder))
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert (run.run_id, run.display_name, run.job_type, run.run_group) == (SID, "A", "train-s1", "base/A")
    history = [{key(i): i.value_json for i in r.history.item} for r in records if r.WhichOneof("record_type") == "history"]
    assert [int(h["_step"]) for h in history] == [0, 1, 2, 3]          # each step once, not again at the end
    assert {"loss", "kl", "parse_rate", "epoch", "perf/tokens_per_s", "perf/eta_seconds"} <= set(history[0])
    summary_keys = {key(i) for r in records if r.WhichOneof("record_type") == "summary" for i in r.summary.update}
    assert "step" in summary_keys                         # the mirror's summary (train.jsonl's last row)


@pytest.mark.slow   # 4 steps twice, and an offline wandb run (~5 s)
def test_train_jsonl_bytes_are_the_same_with_and_without_live_logging(
        tmp_path, default_cfg, untrained_model, offline_env):
    cfg = tiny_cfg(default_cfg)
    (tmp_path / "plain").mkdir()
    plain = run_steps(cfg, untrained_model, tmp_path / "plain")
    (tmp_path / "results/_store").mkdir(parents=True)
    (tmp_path / "results/_store/index.json").write_text(json.dumps(INDEX))
    (tmp_path / "live").mkdir()
    with tracking.stage_context(tmp_path, SID, cfg) as ctx:
        live = run_steps(cfg, untrained_model, tmp_path / "live")
        assert ctx.live                                    # it did log live
    tracking.flush()
    assert live == plain
    assert b"tokens_per_s" not in live and b"eta" not in live


def test_no_stage_context_or_disabled_wandb_means_no_wandb_run(tmp_path, monkeypatch):
    assert not tracking.live_run()
    (tmp_path / "results/_store").mkdir(parents=True)
    (tmp_path / "results/_store/index.json").write_text(json.dumps(INDEX))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    with tracking.stage_context(tmp_path, SID, {}):
        assert not tracking.live_run()
    assert not (tmp_path / "wandb").exists()


def test_mirror_finishes_the_live_run_with_the_summary_and_only_the_steps_it_missed(tmp_path, monkeypatch):
    rows = [{"step": i, "loss": 1.0 / (i + 1)} for i in range(3)]
    (tmp_path / "out").mkdir()
    files.write_jsonl(tmp_path / "out/train.jsonl", rows)
    fake = FakeRun()
    monkeypatch.setattr(tracking, "_stage_run_args", lambda *a: {})
    monkeypatch.setattr(tracking, "_init", lambda **kw: fake)
    monkeypatch.setattr(tracking, "log_run", lambda **kw: pytest.fail("a second run of the stage"))
    with tracking.stage_context(tmp_path, SID, {}):
        live = tracking.live_run()
        for row in rows[:2]:                               # step 2 never logged live
            live.log(row, step=row["step"])
        tracking.mirror_stage(tmp_path, SID, tmp_path / "out", {})
    assert [s for s, _ in fake.logged] == [0, 1, 2]
    assert fake.summary["loss"] == pytest.approx(1 / 3) and fake.finished == 0   # the last row


def test_unlogged_keeps_the_rows_after_the_last_live_step():
    rows = [{"step": 0}, {"step": 1}, {"step": 2}]
    assert tracking.unlogged(rows, None) == rows
    assert tracking.unlogged(rows, 1) == [{"step": 2}]
    assert tracking.unlogged([{"iteration": 0}, {"iteration": 1}], 0) == [{"iteration": 1}]


def test_a_failing_wandb_warns_once_and_the_loop_goes_on(tmp_path, monkeypatch, caplog):
    fake = FakeRun(fail_on_log=True)
    monkeypatch.setattr(tracking, "_stage_run_args", lambda *a: {})
    monkeypatch.setattr(tracking, "_init", lambda **kw: fake)
    with caplog.at_level(logging.WARNING, logger="martingale"), tracking.stage_context(tmp_path, SID, {}):
        live = tracking.live_run()
        for step in range(3):
            live.log({"loss": 1.0}, step=step)
        assert not live and fake.finished == 1
    assert caplog.text.count("live logging stops") == 1

    monkeypatch.setattr(tracking, "_init", lambda **kw: (_ for _ in ()).throw(OSError("no service")))
    with caplog.at_level(logging.WARNING, logger="martingale"), tracking.stage_context(tmp_path, SID, {}):
        assert not tracking.live_run()
    assert "failed to open" in caplog.text


def test_a_failed_stage_finishes_its_live_run_as_failed(tmp_path, monkeypatch):
    fake = FakeRun()
    monkeypatch.setattr(tracking, "_stage_run_args", lambda *a: {})
    monkeypatch.setattr(tracking, "_init", lambda **kw: fake)
    with pytest.raises(RuntimeError), tracking.stage_context(tmp_path, SID, {}):
        tracking.live_run().log({"loss": 1.0}, step=0)
        raise RuntimeError("stage failed")
    assert fake.finished == 1


def test_progress_line_and_eta_from_the_mean_step_time(caplog):
    pace, live = Pace(10), tracking.LiveRun(FakeRun())
    with caplog.at_level(logging.INFO, logger="martingale"):
        report_step("train stage", "step", 0, pace, {"step": 0, "reward": -0.25, "kl": 0.0, "loss": 0.1,
                                                           "parse_rate": 1.0}, 300, 2.0, live)
        report_step("train stage", "step", 1, pace, {"step": 1, "reward": None, "kl": 0.0, "loss": 0.1,
                                                           "parse_rate": 0.5}, 100, 4.0, live)
    assert caplog.records[-1].getMessage() == ("train stage step 2/10 reward - kl 0 loss 0.1 parse 0.5 "
                                               "25 tok/s 4.00s/step eta 0:00:24")
    step, values = live.run.logged[-1]
    assert step == 1 and values["perf/tokens_per_s"] == 25 and values["perf/eta_seconds"] == 24


@pytest.mark.slow   # an instructor stage of 3 iterations on the tiny model (~5 s)
def test_an_instructor_stage_logs_one_progress_line_per_iteration(tmp_path, default_cfg, untrained_model, caplog):
    from martingale.stages.body import instructor
    cfg = {**default_cfg, "seed": 1, "simulate": {**default_cfg["simulate"], "mode": "neutral", "turns": 2},
           "instructor": {**default_cfg["instructor"], "iterations": 3, "train_episodes": 8, "meta_size": 4},
           "stage": {**default_cfg["stages"]["s1"], "kind": "instructor", "reward": "episode_ms"}}
    with caplog.at_level(logging.INFO, logger="martingale"):
        instructor.run(typed_slice("instructor", cfg), start_model=untrained_model, human_model=untrained_model,
                       out_dir=tmp_path / "out")
    lines = [r.getMessage() for r in caplog.records if " iteration " in r.getMessage()]
    assert [re.search(r"iteration (\d+/\d+) ", m)[1] for m in lines] == ["1/3", "2/3", "3/3"]
    assert all(re.search(r"kl \S+ loss \S+ human_ms \S+ .* \d+ utterance tok/s .* eta \d+:\d\d:\d\d$", m)
               for m in lines), lines
    assert b"utterance" not in (tmp_path / "out/train.jsonl").read_bytes()
