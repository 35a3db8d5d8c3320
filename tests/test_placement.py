"""GPU placement: the model config says where a model runs and in what dtype; nothing is forced to
the CPU, asking for CUDA where there is none fails in one line, and placement is not in stage ids.
On a CUDA machine (scripts/gpu_check.sh) the evaluate and train stage bodies run there in bfloat16."""
from __future__ import annotations

import pytest
import torch
from typed import typed_section, typed_slice

from martingale.core.errors import StageError
from martingale.model.load import placement
from martingale.plan import Plan

from projcopy import proj, write_run  # noqa: F401 (proj: fixture)

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@needs_no_gpu
def test_auto_places_the_model_on_the_cpu_in_float32_where_there_is_no_gpu():
    assert placement({"device": "auto", "dtype": "auto"}) == (torch.device("cpu"), torch.float32)


@needs_gpu
def test_auto_places_the_model_on_the_gpu_in_bfloat16_where_there_is_one():
    assert placement({"device": "auto", "dtype": "auto"}) == (torch.device("cuda"), torch.bfloat16)


def test_an_explicit_dtype_is_kept_wherever_the_model_runs():
    assert placement({"device": "cpu", "dtype": "bfloat16"}) == (torch.device("cpu"), torch.bfloat16)
    assert placement({"device": "auto", "dtype": "float32"})[1] == torch.float32


@needs_no_gpu
def test_asking_for_cuda_without_a_gpu_fails_the_stage_in_one_line():
    with pytest.raises(StageError, match=r"^model\.device=cuda but torch sees no CUDA device") as info:
        placement({"device": "cuda", "dtype": "auto"})
    assert "\n" not in str(info.value)


def test_distill_trains_on_the_cpu_in_full_precision_where_the_model_is_on_the_cpu(tmp_path):
    from martingale.stages.body.distill import sft_config
    d = {"seed": 0, "steps": 2, "batch_size": 2, "lr": 1e-3}
    cpu = sft_config(typed_section("distill", d), 0, str(tmp_path), device="cpu", dtype="float32")
    assert cpu.use_cpu and not cpu.bf16 and not cpu.fp16


@needs_gpu
def test_distill_trains_on_the_gpu_in_bfloat16_where_the_model_is_there(tmp_path):
    from martingale.stages.body.distill import sft_config
    d = {"seed": 0, "steps": 2, "batch_size": 2, "lr": 1e-3}
    gpu = sft_config(typed_section("distill", d), 0, str(tmp_path), device="cuda:0", dtype="bfloat16")
    assert not gpu.use_cpu and gpu.bf16 and not gpu.fp16


def test_the_device_is_placement_not_part_of_any_stage_id(proj):
    write_run(proj, "on-cpu.yaml", "parent: D\nknob: model.device=cpu\n")
    plan = Plan.load(proj)
    assert [(r.model_stage, r.eval_stage) for r in plan.run_stages("on-cpu")] == \
        [(r.model_stage, r.eval_stage) for r in plan.run_stages("D")]


def test_real_model_configs_ask_for_bfloat16_on_a_gpu_and_float32_on_a_cpu():
    from omegaconf import OmegaConf

    from projcopy import REPO
    for name in ("llama31_8b", "qwen3_32b", "mistral_7b", "r1_distill_qwen_32b"):
        cfg = OmegaConf.load(REPO / "conf" / "model" / f"{name}.yaml")
        assert cfg.dtype == "auto" and cfg.get("device", "auto") == "auto", name


# The real stage bodies on a GPU (run by scripts/gpu_check.sh on a CUDA machine): each records
# where its model lived, and with device=auto, dtype=auto that is the GPU in bfloat16.
def _gpu_cfg(default_cfg) -> dict:
    return {**default_cfg, "seed": 0, "model": {**default_cfg["model"], "device": "auto", "dtype": "auto"},
            "world": {**default_cfg["world"], "n_train": 8, "n_heldout": 8},
            "eval": {**default_cfg["eval"], "n_bootstrap": 10, "min_parse_rate": 0.0}}


@needs_gpu
def test_the_evaluate_stage_runs_its_model_on_the_gpu_in_bfloat16(tmp_path, default_cfg, untrained_model):
    import json

    from martingale.stages.body import evaluate
    evaluate.run(typed_slice("evaluate", _gpu_cfg(default_cfg)), model=untrained_model, judge_model=untrained_model, out_dir=tmp_path / "out")
    where = json.loads((tmp_path / "out" / "backend.json").read_text())
    assert where["device"].startswith("cuda") and where["dtype"] == "bfloat16", where


@needs_gpu
def test_a_training_stage_steps_on_the_gpu_in_bfloat16(tmp_path, default_cfg, untrained_model):
    import json

    from martingale.stages.body import train
    cfg = _gpu_cfg(default_cfg)
    cfg.update(stage={**default_cfg["stages"]["s1"], "reward": "BP", "batch_questions": 4, "generations": 2, "epochs": 1},
               elicit={"mode": "samemode", "judge": "trace", "cut": 0.5})
    train.run(typed_slice("train", cfg), start_model=untrained_model, judge_model=untrained_model, out_dir=tmp_path / "out")
    where = json.loads((tmp_path / "out" / "stage.json").read_text())
    assert where["device"].startswith("cuda") and where["dtype"] == "bfloat16", where
