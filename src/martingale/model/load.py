"""Build the embedded Llama, and load/save any causal LM through the Hugging Face Auto classes."""
from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from ..core.errors import StageError
from ..store.provenance import record_weights
from .section import ModelLike, model_section


def build_tiny(model_cfg: ModelLike, tokenizer) -> LlamaForCausalLM:
    """A Llama-architecture causal LM sized by the model config (untied embeddings: D's LoRA
    adapts the input and output embeddings separately)."""
    m = model_section(model_cfg)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=m.hidden_size,
        intermediate_size=m.intermediate_size,
        num_hidden_layers=m.num_layers,
        num_attention_heads=m.num_heads,
        num_key_value_heads=m.num_heads,
        max_position_embeddings=m.max_length,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config)


def model_dir(stage_dir: Path | str) -> Path:
    """Where a model-producing stage keeps its HF folder."""
    return Path(stage_dir) / "model"


def placement(model_cfg: ModelLike) -> tuple[torch.device, torch.dtype]:
    """(device, dtype) from ``model.device`` and ``model.dtype``: ``auto`` puts the model on CUDA
    when a GPU is visible, and ``dtype: auto`` is bfloat16 there and float32 on a CPU. Asking for
    CUDA where there is none fails the stage (it would otherwise run on the CPU for days)."""
    m = model_section(model_cfg)
    want = m.device
    has_cuda = torch.cuda.is_available()
    if want == "cuda" and not has_cuda:
        raise StageError("model.device=cuda but torch sees no CUDA device on this machine "
                         "(set model.device=auto or cpu, or run the stage on a GPU node)")
    device = torch.device("cuda" if want == "cuda" or (want == "auto" and has_cuda) else "cpu")
    name = m.dtype
    if name == "auto":
        name = "bfloat16" if device.type == "cuda" else "float32"
    return device, getattr(torch, name)


def describe(model) -> dict[str, str]:
    """Where a loaded model lives, for a stage's record: {"device": "cuda:0", "dtype": "bfloat16"}."""
    p = next(model.parameters())
    return {"device": str(p.device), "dtype": str(p.dtype).removeprefix("torch.")}


def load(stage_dir: Path | str, model_cfg: ModelLike = None):
    """(model, tokenizer) from a stage folder or a local HF folder — the path that loads an 8B
    model — on the device and in the dtype ``placement`` picks."""
    path = Path(stage_dir)
    if (path / "model").is_dir():
        path = path / "model"
    device, dtype = placement(model_cfg)
    record_weights(path)   # the sha256 of each weight file, in the stage's provenance.json
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    model.to(device)   # type: ignore[arg-type]  # transformers types its wrapped Module.to with self twice
    model.eval()
    check_finite(model, stage_dir)
    return model, tokenizer


def check_finite(model, stage_dir: Path | str) -> None:
    """Fail the stage naming the first tensor that holds NaN/Inf: a model that diverged upstream
    would otherwise surface as a transformers sampler error. One isfinite pass per tensor."""
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
