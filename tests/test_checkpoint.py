"""Crash recovery of a train stage: checkpoints resume to the same bytes, a bad one is discarded,
none is left after success; NaN/Inf weights fail a stage with their own message."""
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from typed import typed_section, typed_slice

from martingale.core.errors import StageError
from martingale.stages.body import train
from martingale.store.manifest import MANIFEST
from martingale.training import checkpoint
from martingale.training.policy import Policy, check_adapter_finite, lora_policy

OUTPUTS = ("train.jsonl", "stage.json", "model/model.safetensors")


pytestmark = pytest.mark.usefixtures("one_thread")   # conftest: a tiny model's steps on one torch thread


def tiny_cfg(default_cfg, **stage) -> dict:
    """A train stage small enough to run a few steps in seconds (16 questions a epoch)."""
    world = {**default_cfg["world"], "n_train": 8, "n_heldout": 8}
    s = {**default_cfg["stages"]["s1"], "reward": "B", "batch_questions": 4, "generations": 2,
         "epochs": 2, "checkpoint_every": 2, **stage}
    return {"world": world, "model": default_cfg["model"], "seed": 0, "stage": s,
            "elicit": {**default_cfg["elicit"], "mode": "snap"}}


def policy_of(model_dir: Path, cfg: dict) -> Policy:
    from martingale.model.backend import open_model
    cfg = typed_slice("train", cfg)
    return lora_policy(open_model(model_dir, cfg.model), cfg.stage, cfg.model)


def adapter_copy(policy) -> dict:
    return {n: p.detach().clone() for n, p in checkpoint.adapter(policy.model).items()}


def test_a_checkpoint_restores_the_adapter_the_optimizer_and_the_rngs(tmp_path, default_cfg, untrained_model):
    cfg = tiny_cfg(default_cfg)
    policy, ckpt = policy_of(untrained_model, cfg), tmp_path / ".train.ckpt"
    for p in policy.params:
        p.grad = torch.ones_like(p)
    policy.opt.step()                       # an optimizer state worth restoring
    rng = np.random.default_rng([0, 11])
    epoch_rng = rng.bit_generator.state
    saved, torch_rng = adapter_copy(policy), torch.get_rng_state()
    checkpoint.save(ckpt, policy, typed_slice("train", cfg), checkpoint.Progress(6, 1, [{"step": 0, "loss": 0.5}]), epoch_rng)
    assert [p.name for p in ckpt.iterdir()] == ["00000006"] and (ckpt / "00000006" / MANIFEST).is_file()

    other = policy_of(untrained_model, cfg)
    torch.rand(3)
    progress = checkpoint.resume(ckpt, other, typed_slice("train", cfg), np.random.default_rng(99))
    assert (progress.step, progress.epoch, progress.history) == (6, 1, [{"step": 0, "loss": 0.5}])
    assert all(torch.equal(saved[n], p) for n, p in checkpoint.adapter(other.model).items())
    assert torch.equal(torch.get_rng_state(), torch_rng)
    state = other.opt.state_dict()["state"]
    assert all(torch.equal(state[i]["exp_avg"], policy.opt.state_dict()["state"][i]["exp_avg"]) for i in state)


@pytest.mark.parametrize("damage", ["flip a byte", "drop the manifest", "another config"])
def test_a_checkpoint_that_does_not_verify_is_discarded_and_training_starts_over(
        tmp_path, default_cfg, untrained_model, caplog, damage):
    cfg = tiny_cfg(default_cfg)
    policy, ckpt = policy_of(untrained_model, cfg), tmp_path / ".train.ckpt"
    checkpoint.save(ckpt, policy, typed_slice("train", cfg), checkpoint.Progress(4, 0, []), np.random.default_rng(0).bit_generator.state)
    one = ckpt / "00000004"
    if damage == "flip a byte":
        data = bytearray((one / checkpoint.ADAPTER).read_bytes())
        data[-1] ^= 0xFF
        (one / checkpoint.ADAPTER).write_bytes(bytes(data))
    elif damage == "drop the manifest":
        (one / MANIFEST).unlink()
    else:
        cfg = tiny_cfg(default_cfg, lr=0.5)
    before = adapter_copy(policy)
    with caplog.at_level(logging.WARNING, logger="martingale"):
        progress = checkpoint.resume(ckpt, policy, typed_slice("train", cfg), np.random.default_rng(0))
    assert progress == checkpoint.Progress()
    assert not one.exists() and "discarded" in caplog.text and "starts over" in caplog.text
    assert all(torch.equal(before[n], p) for n, p in checkpoint.adapter(policy.model).items())


def test_the_checkpoint_folder_is_removed_after_the_stage_succeeds(tmp_path, default_cfg, untrained_model,
                                                                  monkeypatch):
    cfg = tiny_cfg(default_cfg, epochs=1)
    out = tmp_path / "train-0123456789ab"
    seen = []
    save = checkpoint.save
    monkeypatch.setattr(checkpoint, "save", lambda ckpt, *a: (save(ckpt, *a), seen.append(sorted(os.listdir(ckpt)))))
    train.run(typed_slice("train", cfg), start_model=untrained_model, judge_model=untrained_model, out_dir=out)
    assert seen == [["00000002"]]           # step 2 of 4: the one checkpoint, alone in its folder
    assert (out / MANIFEST).is_file() and not checkpoint.folder(out).exists()
    assert sorted(os.listdir(tmp_path)) == [out.name]


def test_nan_weights_at_load_fail_the_stage_naming_the_tensor(tmp_path, default_cfg, untrained_model):
    from martingale.model.backend import open_model
    from martingale.model.load import load, save
    model, tok = load(untrained_model, default_cfg["model"])
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight[3, 5] = float("nan")
    save(model, tok, tmp_path / "bad")
    with pytest.raises(StageError, match=r"weights hold NaN/Inf \(tensor model\.layers\.0\.mlp\.up_proj\.weight\)"):
        open_model(tmp_path / "bad", default_cfg["model"])


def test_inf_in_the_adapter_after_a_step_stops_the_stage_naming_the_tensor(default_cfg, untrained_model):
    cfg = tiny_cfg(default_cfg)
    policy = policy_of(untrained_model, cfg)
    check_adapter_finite(policy, "train stage", 0, typed_section("stage", cfg["stage"]))
    name, p = next(iter(checkpoint.adapter(policy.model).items()))
    with torch.no_grad():
        p[0, 0] = float("inf")
    with pytest.raises(StageError, match=rf"adapter weights hold NaN/Inf \(tensor {name}\) after step 7"):
        check_adapter_finite(policy, "train stage", 7, typed_section("stage", cfg["stage"]))


CHILD = """
import json, sys
from pathlib import Path
import torch
from martingale.config.slices import stage_config
from martingale.stages import kinds
from martingale.stages.body import train
torch.set_num_threads(1)                         # as the in-process runs (the one_thread fixture)
cfg, model, out = json.loads(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
train.run(stage_config(kinds()["train"], cfg), start_model=model, judge_model=model, out_dir=out)
"""


@pytest.mark.slow   # three short trainings, one in a subprocess (~15 s)
def test_a_stage_killed_after_a_checkpoint_resumes_to_the_bytes_of_an_uninterrupted_run(
        tmp_path, default_cfg, untrained_model, caplog):
    cfg = tiny_cfg(default_cfg, reward="A", checkpoint_every=2)
    cfg["world"]["n_train"] = 16                    # 32 questions: 8 steps an epoch, 16 in all
    cfg["elicit"] = {**default_cfg["elicit"], "mode": "samemode", "judge": "self"}
    whole, killed = tmp_path / "whole" / "train-a", tmp_path / "killed" / "train-a"
    train.run(typed_slice("train", cfg), start_model=untrained_model, judge_model=untrained_model, out_dir=whole)

    child = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(cfg), str(untrained_model), str(killed)])
    ckpt, deadline = checkpoint.folder(killed), time.time() + 300
    while child.poll() is None and time.time() < deadline and \
            not (ckpt.is_dir() and any(p.name >= "00000010" for p in ckpt.iterdir())):
        time.sleep(0.02)
    assert child.poll() is None, "the child finished (or failed) before its step-10 checkpoint"
    os.kill(child.pid, signal.SIGKILL)              # mid-epoch 1: the resume redraws its permutation
    child.wait()
    assert not killed.exists()

    with caplog.at_level(logging.INFO, logger="martingale"):
        train.run(typed_slice("train", cfg), start_model=untrained_model, judge_model=untrained_model, out_dir=killed)
    assert "resuming from checkpoint" in caplog.text
    for name in OUTPUTS:
        assert (killed / name).read_bytes() == (whole / name).read_bytes(), name
    assert not ckpt.exists()
