"""Build the embedded Llama, and load/save any causal LM through the Hugging Face Auto classes."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM


def build_tiny(model_cfg: dict[str, Any], tokenizer) -> LlamaForCausalLM:
    """A Llama-architecture causal LM sized by the model config (untied embeddings: D's LoRA
    adapts the input and output embeddings separately)."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=int(model_cfg["hidden_size"]),
        intermediate_size=int(model_cfg["intermediate_size"]),
        num_hidden_layers=int(model_cfg["num_layers"]),
        num_attention_heads=int(model_cfg["num_heads"]),
        num_key_value_heads=int(model_cfg["num_heads"]),
        max_position_embeddings=int(model_cfg["max_length"]),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config)


def model_dir(stage_dir: Path | str) -> Path:
    """Where a model-producing stage keeps its HF folder."""
    return Path(stage_dir) / "model"


def load(stage_dir: Path | str, model_cfg: dict[str, Any] | None = None):
    """(model, tokenizer) from a stage folder or a local HF folder — the path that loads an 8B model."""
    path = Path(stage_dir)
    if (path / "model").is_dir():
        path = path / "model"
    dtype = getattr(torch, (model_cfg or {}).get("dtype", "float32"))
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    model.eval()
    check_finite(model, stage_dir)
    return model, tokenizer


def check_finite(model, stage_dir: Path | str) -> None:
    """Fail the stage naming the first tensor that holds NaN/Inf: a model that diverged upstream
    would otherwise surface as a transformers sampler error. One isfinite pass per tensor."""
    from ..stages.common import StageError
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not torch.isfinite(p).all():
                raise StageError(f"{stage_dir}: weights hold NaN/Inf (tensor {name}): the stage "
                                 "that made this model diverged; rebuild it (a lower lr?)")


def save(model, tokenizer, out_dir: Path | str) -> None:
    """Save weights + tokenizer as a standard HF folder (safetensors)."""
    out = model_dir(out_dir)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
