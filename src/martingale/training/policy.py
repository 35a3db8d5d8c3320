"""The policy a training stage trains: a LoRA adapter on the start model wrapped in its generation
backend, AdamW on the adapter, the guards (finite weights, a model that moved) and the merged result."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Protocol

import torch
from peft import LoraConfig, get_peft_model
from torch import nn
from transformers import PreTrainedModel

from ..core.errors import StageError
from ..core.jsonvalue import JsonObject
from ..model.load import describe, load, save
from ..model.section import ModelSection
from ..store import files
from . import checkpoint, ranks

if TYPE_CHECKING:
    from peft import PeftModel

    from ..model.backend import Backend


class TrainSettings(Protocol):
    """What the policy reads of a training stage's settings (the stage kinds' StageConfig)."""

    @property
    def lr(self) -> float: ...
    @property
    def kl_beta(self) -> float: ...
    @property
    def lora_r(self) -> int: ...


@dataclass
class Policy:
    """The policy being trained: the peft model, the backend generating with it, its optimiser;
    for a server backend, where its adapter is saved for the server and the probes that check it."""
    model: PeftModel
    gen: Backend
    opt: torch.optim.Optimizer
    params: list
    adapter_dir: Path | None = None
    probes: tuple[str, ...] = ()
    loss_batch: int = 0             # model.loss_batch: rows per forward/backward of the loss (0 = all at once)
    loss_gen: Optional[Backend] = None          # the backend the loss's forward goes through (ranks: the DDP wrapper)
    loss_model: Optional[nn.Module] = None          # the module that forward is (its no_sync for accumulated chunks)
    start_model: Path | None = None  # the start model's folder: FSDP rebuilds the policy whole from it to merge
    stage: Optional[TrainSettings] = None
    model_cfg: Optional[ModelSection] = None


def lora_model(model: PreTrainedModel, stage: TrainSettings, model_cfg: ModelSection) -> PeftModel:
    """A LoRA adapter (r, α = 2r, no dropout) on ``model``'s ``model.lora_targets``."""
    r = stage.lora_r
    return get_peft_model(model, LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0,
                                            target_modules=list(model_cfg.lora_targets)))


def lora_policy(start: Backend, stage: TrainSettings, model_cfg: ModelSection, start_model: Path | None = None) -> Policy:
    """A LoRA adapter on the start backend's model (an in-process torch model), wrapped in the
    same backend so the rollouts sample from the policy, spread over the stage's ranks
    (ranks.distribute); AdamW on the adapter."""

    base = start.model
    if not isinstance(base, PreTrainedModel):
        raise StageError(f"a LoRA policy trains an in-process transformers model: this backend holds {type(base).__name__}")
    model, loss_model = ranks.distribute(lora_model(base, stage, model_cfg))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=stage.lr, weight_decay=0.0)
    gen = start.with_model(model)
    return Policy(model, gen, opt, params, loss_batch=model_cfg.loss_batch,
                  loss_gen=gen if loss_model is model else start.with_model(loss_model), loss_model=loss_model,
                  start_model=start_model, stage=stage, model_cfg=model_cfg)


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


def check_adapter_finite(policy: Policy, name: str, step: int, stage: TrainSettings) -> None:
    """Stop the stage when an optimizer step left NaN/Inf in the adapter: otherwise the next
    rollout fails inside the sampler with a message that does not say why (on ranks: in any shard)."""
    for tensor, p in checkpoint.adapter(policy.model).items():
        detached = p.detach()
        local = detached.to_local() if hasattr(detached, "to_local") else detached   # an FSDP shard: its part
        if float(ranks.reduce(float(not torch.isfinite(local).all()), "max")):
            raise StageError(f"{name}: adapter weights hold NaN/Inf (tensor {tensor}) after step "
                             f"{step} (lr {stage.lr}, kl_beta {stage.kl_beta}): stopping")


def write_trained(out_dir: Path, policy: Policy, start_digest: str, tokenizer, history: list[JsonObject],
                  info: JsonObject, unmoved: str) -> None:
    """Merge the adapter and write out_dir/model, train.jsonl and stage.json (``info`` and where the
    model lives); a merged model equal to the start model fails the stage with ``unmoved`` instead.
    On ranks, rank 0 alone writes, from the whole weights (FSDP: gathered into the policy rebuilt
    from the start model)."""
    r = ranks.current()
    whole = policy.model
    if r.many and r.strategy == "fsdp":
        weights = ranks.full_tensors(checkpoint.adapter(policy.model).items())   # a collective: every rank
        if r.writer:
            whole = rebuilt(policy, weights)
    if not r.writer:
        return
    if r.many:
        info = {**info, "ranks": r.world, "strategy": r.strategy}
    merged = whole.merge_and_unload()
    if weights_digest(merged) == start_digest:
        raise StageError(unmoved)
    with files.atomic_dir(out_dir) as tmp:
        save(merged, tokenizer, tmp)
        files.write_jsonl(tmp / "train.jsonl", history)
        files.write_json(tmp / "stage.json", {**describe(merged), **info})


def rebuilt(policy: Policy, weights: dict[str, torch.Tensor]):
    """The policy whole on this rank: the start model loaded again, the same LoRA adapter on it,
    the gathered adapter ``weights`` copied in (FSDP's shards cannot be merged where they lie)."""
    assert policy.start_model is not None and policy.stage is not None and policy.model_cfg is not None, \
        "an FSDP policy is rebuilt from its start model, with its stage and model settings"
    model, _ = load(policy.start_model, policy.model_cfg)
    whole = lora_model(model, policy.stage, policy.model_cfg)
    params = checkpoint.adapter(whole)
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(weights[name])
    return whole
