"""The policy a training stage trains: a LoRA adapter on the start model wrapped in its generation
backend, AdamW on the adapter, the guards (finite weights, a model that moved) and the merged result."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, get_peft_model

from .. import io
from ..errors import StageError
from ..model.load import describe, save
from . import checkpoint


@dataclass
class Policy:
    """The policy being trained: the peft model, the backend generating with it, its optimiser;
    for a server backend, where its adapter is saved for the server and the probes that check it."""
    model: Any
    gen: Any
    opt: Any
    params: list
    adapter_dir: Path | None = None
    probes: tuple[str, ...] = ()
    loss_batch: int = 0             # model.loss_batch: rows per forward/backward of the loss (0 = all at once)


def lora_policy(start, stage: dict[str, Any], model_cfg: dict[str, Any]) -> Policy:
    """A LoRA adapter on the start backend's model (an in-process torch model), wrapped in the
    same backend so the rollouts sample from the policy; AdamW on the adapter."""

    r = int(stage["lora_r"])
    model = get_peft_model(start.model, LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0,
                                                   target_modules=list(model_cfg["lora_targets"])))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=float(stage["lr"]), weight_decay=0.0)
    return Policy(model, start.with_model(model), opt, params, loss_batch=int(model_cfg.get("loss_batch") or 0))


def serve_policy(policy: Policy, step: int | None = None) -> None:
    """Later rollouts sample from the adapter as trained so far, after optimizer step ``step``
    (None: now); a server backend reloads it, as often as its settings say, and checks it is
    applied (model/vllm.py)."""
    policy.gen.serve_adapter(policy.model, policy.adapter_dir, list(policy.probes), step)


def weights_digest(model) -> str:
    """sha256 over every parameter's bytes in name order: equal digests = equal weights."""

    h = hashlib.sha256()
    for name, p in model.state_dict().items():
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def update(policy: Policy, loss: torch.Tensor) -> None:
    """One AdamW step on the adapter, gradients clipped to norm 1 (a detached loss: its gradient
    was accumulated already, chunked_loss)."""
    if loss.requires_grad:
        policy.opt.zero_grad(set_to_none=True)
        loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.params, 1.0)
    policy.opt.step()


def check_adapter_finite(policy: Policy, name: str, step: int, stage: dict[str, Any]) -> None:
    """Stop the stage when an optimizer step left NaN/Inf in the adapter: otherwise the next
    rollout fails inside the sampler with a message that does not say why."""
    for tensor, p in checkpoint.adapter(policy.model).items():
        if not torch.isfinite(p.detach()).all():
            raise StageError(f"{name}: adapter weights hold NaN/Inf (tensor {tensor}) after step "
                             f"{step} (lr {stage['lr']}, kl_beta {stage['kl_beta']}): stopping")


def write_trained(out_dir: Path, policy: Policy, start_digest: str, tokenizer, history: list[dict[str, Any]],
                  info: dict[str, Any], unmoved: str) -> None:
    """Merge the adapter and write out_dir/model, train.jsonl and stage.json (``info`` and where the
    model lives); a merged model equal to the start model fails the stage with ``unmoved`` instead."""
    merged = policy.model.merge_and_unload()
    if weights_digest(merged) == start_digest:
        raise StageError(unmoved)
    with io.atomic_dir(out_dir) as tmp:
        save(merged, tokenizer, tmp)
        io.write_jsonl(tmp / "train.jsonl", history)
        io.write_json(tmp / "stage.json", {**describe(merged), **info})
