"""A training stage on N ranks (model.distributed, training/ranks.py): DDP and FSDP2 through the real
launcher (torchrun, gloo on this CPU) take the same steps as one rank within the stated tolerance;
a launch that degrades to independent copies fails in one line; a killed rank fails the stage in
one line naming it, stops the others, writes nothing, and a rerun resumes to the same bytes.

The tolerance: a rank sums its block of the batch's per-token terms and the ranks' gradients are
then averaged, so float32 sums are reordered. How far a 2-rank run's training moved the weights is
compared with how far the 1-rank run's moved them: ‖(w₂ − w_start) − (w₁ − w_start)‖ / ‖w₁ − w_start‖
over every tensor. Measured: 4.7e-7 (DDP) and 4.7e-7 (FSDP2) on this model over 8 steps; 7.0e-5 on
SmolLM2 over 2 (Adam's first steps move every coordinate by about ±lr, so a gradient coordinate that
cancels to near zero can take the other sign when its sum is reordered); 0.80 with the gradient not
reduced (each rank stepping on its half of the batch). Held to 1e-3: 14× SmolLM2's noise, 800×
under the fault. The logged losses agree within 1e-4 relative (the fault moves them by 3.5e-5 only:
Adam's steps are small, so the weights are the sharp test).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from rankdriver import build_untrained
from typed import typed_section

from martingale.core.errors import StageError
from martingale.model.section import model_section
from martingale.training import launch, ranks, ranks_of

DRIVER = Path(__file__).with_name("rankdriver.py")
LOSS_RTOL, KL_ATOL, WEIGHT_RTOL = 1e-4, 1e-5, 1e-3


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ranks") / "untrained"
    build_untrained(folder / "model")
    return folder / "model"


def drive(model: Path, out: Path, n: int, strategy: str = "ddp", epochs: int = 2,
          wait: bool = True, backend: str = "hf", stage: dict | None = None) -> subprocess.CompletedProcess | subprocess.Popen:
    cmd = [sys.executable, str(DRIVER), str(model.resolve()), str(out.resolve()), str(n), strategy, str(epochs),
           backend]
    env = {**os.environ, "WANDB_MODE": "disabled", "RANKDRIVER_STAGE": json.dumps(stage or {})}
    out.parent.mkdir(parents=True, exist_ok=True)     # its cwd: a server's log goes to logs/vllm there
    if not wait:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                cwd=out.parent)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, cwd=out.parent)


def history(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]


def weights(folder: Path) -> dict:
    """A model's tensors: a stage folder's model/, or an HF folder itself."""
    from safetensors.torch import load_file
    inner = folder / "model" if (folder / "model").is_dir() else folder
    return load_file(str(next(inner.glob("*.safetensors"))))


def weight_gap(start: dict, one: dict, many: dict) -> float:
    """‖(w_many − w_start) − (w_one − w_start)‖ / ‖w_one − w_start‖ over every tensor (Frobenius)."""
    apart = sum(float(((many[k].double() - one[k].double()) ** 2).sum()) for k in one)
    moved = sum(float(((one[k].double() - start[k].double()) ** 2).sum()) for k in one)
    assert moved > 0
    return (apart / moved) ** 0.5


def assert_same_weights(start: dict, one: dict, many: dict) -> None:
    gap = weight_gap(start, one, many)
    assert gap <= WEIGHT_RTOL, gap


def assert_same_steps(one: list[dict], many: list[dict]) -> None:
    assert [r["step"] for r in one] == [r["step"] for r in many]
    for a, b in zip(one, many):
        assert b["loss"] == pytest.approx(a["loss"], rel=LOSS_RTOL), (a, b)
        assert abs(b["kl"] - a["kl"]) <= KL_ATOL, (a, b)
        assert b["parse_rate"] == a["parse_rate"]


@pytest.fixture(scope="module")
def one_rank(model, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("one") / "train"
    res = drive(model, out, 1, "none")
    assert res.returncode == 0, res.stderr[-3000:]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_a_two_rank_train_stage_takes_the_one_rank_steps_within_the_tolerance(model, one_rank, tmp_path, strategy):
    out = tmp_path / "train"
    res = drive(model, out, 2, strategy)
    assert res.returncode == 0, res.stderr[-3000:]
    assert_same_steps(history(one_rank), history(out))
    assert_same_weights(weights(model), weights(one_rank), weights(out))
    stage = json.loads((out / "stage.json").read_text())
    assert (stage["ranks"], stage["strategy"]) == (2, strategy)
    assert (out / "model" / "model.safetensors").is_file() and not list(tmp_path.glob(".train.*"))
    steps = len(history(one_rank))
    assert "rank 0" in res.stdout and f"step {steps}/{steps}" in res.stdout


@pytest.mark.slow
@pytest.mark.real("vllm")
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_ranks_sampling_from_one_vllm_server_take_the_one_rank_steps(tmp_path_factory, strategy):
    """backend vllm: rank 0 starts the one server and asks it, the other ranks receive its samples;
    the adapter (gathered under FSDP) is reloaded in the server every 2 steps and checked applied."""
    work = tmp_path_factory.getbasetemp() / "ranks-vllm"
    start = work / "start"
    if not start.is_dir():
        build_untrained(start, "vllm")
    one = work / "one" / "train"
    if not one.is_dir():
        res = drive(start, one, 1, "none", backend="vllm")
        assert res.returncode == 0, res.stderr[-3000:]
    out = work / strategy / "train"
    res = drive(start, out, 2, strategy, backend="vllm")
    assert res.returncode == 0, res.stderr[-3000:]
    assert_same_steps(history(one), history(out))
    assert_same_weights(weights(start), weights(one), weights(out))
    stage = json.loads((out / "stage.json").read_text())
    assert (stage["ranks"], stage["backend"]) == (2, "vllm") and stage["parity_probes"] > 0
    assert len(list((out.parent / "logs" / "vllm").glob("*.log"))) == 1      # one server, rank 0's


def test_a_launch_that_starts_independent_copies_fails_in_one_line(model, tmp_path):
    """``accelerate launch --cpu --num_processes 2`` starts one plain process: the rank entry sees
    a world of 1 where the spec asks for 2. So does torchrun asked for fewer processes."""
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"kind": "train", "cfg": {}, "inputs": {}, "out_dir": str(tmp_path / "out"),
                                "ranks": 2, "strategy": "ddp", "threads": 1, "scratch": str(tmp_path)}))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    plain = subprocess.run([sys.executable, "-m", "martingale.jobs.rank", str(spec)],
                           capture_output=True, text=True, env=env, timeout=120)
    assert plain.returncode == 1
    assert plain.stderr.strip().splitlines()[-1] == (
        "train stage: started as a world of 1 where model.distributed.ranks is 2: launch it with torchrun "
        "(a launcher that starts independent copies, such as `accelerate launch --cpu`, trains 2 separate models)")
    one = subprocess.run([*launch.launcher(1, 1, {}), "-m", "martingale.jobs.rank", str(spec)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert one.returncode != 0 and "started as a world of 1 where model.distributed.ranks is 2" in one.stderr
    assert not (tmp_path / "out").exists()


def _rank_pid(rank: int, cwd: Path) -> int | None:
    """The pid of a live ``rank_main`` process started as ``rank`` in folder ``cwd`` (its stage's
    driver's): a parallel test worker's ranks, in their own folders, are never this test's."""
    folder = cwd.resolve()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            here = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            continue
        if b"martingale.jobs.rank" in cmd and f"RANK={rank}".encode() in env and here == folder:
            return int(pid)
    return None


@pytest.mark.slow
def test_a_killed_rank_fails_the_stage_naming_it_and_a_rerun_resumes_to_the_same_bytes(model, tmp_path):
    whole = tmp_path / "whole" / "train"
    assert drive(model, whole, 2, epochs=8).returncode == 0
    out = tmp_path / "killed" / "train"
    proc = drive(model, out, 2, epochs=8, wait=False)
    ckpt = out.parent / f".{out.name}.ckpt"
    deadline = time.time() + 120
    while not (ckpt.is_dir() and any(p.name >= "00000004" for p in ckpt.iterdir())) and time.time() < deadline:
        time.sleep(0.02)
    pid = _rank_pid(1, out.parent)
    assert pid is not None and proc.poll() is None, "the stage ended before a checkpoint at step 4"
    os.kill(pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=120)        # no hang: the other rank is stopped
    assert proc.returncode == 1
    assert err.strip().splitlines()[-1] == ("martingale: train stage: rank 1 of 2 ended by signal SIGKILL; "
                                            "torchrun stopped the other ranks (a rerun resumes from the last checkpoint)")
    assert not out.exists() and _rank_pid(0, out.parent) is None and _rank_pid(1, out.parent) is None
    rerun = drive(model, out, 2, epochs=8)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "resuming from checkpoint" in rerun.stdout
    for name in ("train.jsonl", "model/model.safetensors"):
        assert (out / name).read_bytes() == (whole / name).read_bytes(), name
    assert not ckpt.exists()


@pytest.mark.slow
def test_a_ranks_own_error_is_the_stages_one_line_not_torchruns_exit_code(model, tmp_path):
    """A batch larger than the questions stops each rank with its own StageError, which it leaves in
    its error file: the stage fails with that message, where torchrun alone says only which rank
    exited 1."""
    out = tmp_path / "none" / "train"
    res = drive(model, out, 2, epochs=1, stage={"batch_questions": 64})
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1] == (
        "martingale: train stage (B reward): no training step ran (16 questions < batch_questions 64)"), res.stderr[-2000:]
    assert not out.exists()


def test_every_rank_runs_as_many_loss_chunks_as_the_others(monkeypatch):
    """Under FSDP each forward is a collective: a rank with fewer rows still runs every chunk."""
    for world, n, per_chunk in [(2, 33, 16), (2, 8, 0), (3, 10, 2), (2, 1, 4)]:
        counts, rows = set(), []
        for rank in range(world):
            monkeypatch.setattr(ranks, "_CURRENT", ranks.Ranks(world, rank, "fsdp"))
            chunks = ranks.my_rows(n, per_chunk)
            counts.add(len(chunks))
            rows += [r for c in chunks for r in c]
        assert len(counts) == 1 and sorted(rows) == list(range(n))


def test_the_launcher_is_torchrun_standalone_on_one_node_and_srun_with_a_rendezvous_across_nodes():
    one = launch.launcher(4, 1, {})
    assert one[1:3] == ["-m", "torch.distributed.run"] and "--nproc-per-node=4" in one and "--standalone" in one
    many = launch.launcher(8, 2, {"SLURM_JOB_ID": "77", "MARTINGALE_RDZV_HOST": "gpu-a"})
    assert many[:4] == ["srun", "--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    assert {"--nproc-per-node=4", "--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=gpu-a:29500",
            "--rdzv-id=77"} <= set(many)
    with pytest.raises(Exception, match="inside a SLURM allocation"):
        launch.launcher(8, 2, {})


def test_a_config_without_distributed_is_one_rank():
    assert ranks_of({}) == (1, "ddp", 1) and ranks_of({"distributed": {"ranks": 4, "strategy": "fsdp"}}) == (4, "fsdp", 1)


def test_the_failure_line_prefers_a_ranks_own_error_to_a_peer_that_saw_it_vanish(tmp_path):
    (tmp_path / "rank-0.error").write_text("peer: rank 0 of 2: RuntimeError: Connection closed by peer\n")
    assert launch.failure("train", 2, tmp_path, "", 1) == "train stage: its 2 ranks failed (torchrun exit code 1)"
    (tmp_path / "rank-1.error").write_text("train stage (B reward): loss is nan at step 3\n")
    assert launch.failure("train", 2, tmp_path, "", 1) == "train stage (B reward): loss is nan at step 3"


def test_a_non_finite_setting_is_refused_in_one_line_before_any_rank_starts(tmp_path):
    cfg = {"model": {"distributed": {"ranks": 2}}, "stage": {"lr": 1e-3, "kl_beta": float("nan")}}
    with pytest.raises(StageError, match=r"^train stage config: stage\.kl_beta is nan, not a finite number$"):
        launch.launch("train", cfg, {}, tmp_path / "out" / "stage", 1, model_section(cfg["model"]))
    assert not (tmp_path / "out").exists()          # nothing written, no scratch folder left


def test_a_non_finite_setting_in_a_typed_section_is_refused_as_in_a_dict(tmp_path):
    """spec.json's writer walks a typed section as the mapping it is: so does the refusal."""
    cfg = {"model": {"distributed": {"ranks": 2}},
           "stage": typed_section("stage", {"reward": "A", "lr": 1e-3, "kl_beta": float("inf")})}
    with pytest.raises(StageError, match=r"^train stage config: stage\.kl_beta is inf, not a finite number$"):
        launch.launch("train", cfg, {}, tmp_path / "out" / "stage", 1, model_section(cfg["model"]))
    assert not (tmp_path / "out").exists()


def test_losses_of_ranks_are_reduced_over_the_batch():
    assert float(ranks.reduce(np.float64(2.5))) == 2.5     # one rank: itself


def test_ranks_needing_more_gpus_than_a_node_has_are_refused_naming_the_ranks():
    """On a GPU model each rank takes a GPU of its node: 2 ranks on a 1-GPU node cannot run."""
    from martingale.config.compose import ComposeError, Composer

    from projcopy import FIXTURE
    composer = Composer(FIXTURE / "conf")
    assert composer.compose(["model.resources.gpus=2", "model.distributed.ranks=2"])["model"]["distributed"]["ranks"] == 2
    with pytest.raises(ComposeError, match=r"^model\.distributed\.ranks: a node's ranks \(one GPU each\)"):
        composer.compose(["model.resources.gpus=1", "model.distributed.ranks=2"])
