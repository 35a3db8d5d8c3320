"""The embedded model as the vllm backend's tests serve it: its config (head_dim 32, -O0 for a
faster start) and an untrained copy saved the way stages save one."""
from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from martingale.config.schema import Config

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"


def model_cfg() -> dict:
    cfg = OmegaConf.to_container(OmegaConf.structured(Config), resolve=True)["model"]
    cfg.update(backend="vllm", hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128)
    cfg["vllm"].update(python=str(VLLM_PYTHON), startup_timeout_s=600, extra_args=["-O0"])  # no torch.compile: a faster start
    return cfg


def build(out: Path, seed: int) -> Path:
    import torch

    from martingale.model.load import build_tiny, save
    from martingale.model.tokenizer import build_tokenizer
    from martingale.world import traces
    tok = build_tokenizer(traces.vocabulary(40))
    torch.manual_seed(seed)
    save(build_tiny(model_cfg(), tok), tok, out)
    return out
