"""Stage distill (TRL SFTTrainer): writes a loadable merged model + stage.json, same seed → same weights."""
import json

import pytest
from typed import typed_slice

from martingale.model.load import load
from martingale.stages.body import distill


@pytest.mark.slow   # two SFT runs (~15 s)
def test_distill_writes_a_merged_model_and_is_deterministic(tmp_path, default_cfg, untrained_model):
    cfg = {"world": default_cfg["world"], "model": default_cfg["model"], "seed": 0,
           "distill": {**default_cfg["distill"], "steps": 3, "batch_size": 4}}
    a, b = tmp_path / "a", tmp_path / "b"
    distill.run(typed_slice("distill", cfg), untrained_model, a)
    distill.run(typed_slice("distill", cfg), untrained_model, b)

    stage = json.loads((a / "stage.json").read_text())
    assert stage["kind"] == "distill" and stage["history"] and stage["history"][-1]["step"] == 2
    assert stage["final_loss"] > 0
    model, tok = load(a, cfg["model"])
    names = [n for n, _ in model.named_parameters()]
    assert not any("lora" in n or "modules_to_save" in n for n in names)  # merged, plain Llama
    assert tok.eos_token == "end"
    assert (a / "model" / "model.safetensors").read_bytes() == (b / "model" / "model.safetensors").read_bytes()
    assert not list(tmp_path.glob("**/checkpoint-*"))
