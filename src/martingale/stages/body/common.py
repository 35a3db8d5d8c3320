"""What every stage body shares: seeding, the world, and the supervised next-token loop (pretrain)."""
from __future__ import annotations

import logging
import math
import random
from typing import Callable

import numpy as np
import torch

from ...core.errors import StageError
from ...world import open_world
from ...world.questions import QuestionsError
from ...world.section import WorldConfig
from ...world.synthetic import SyntheticWorld

log = logging.getLogger("martingale")


def seed_everything(seed: int) -> None:
    """Wire one seed into python, numpy and torch; single-threaded determinism on CPU."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)


def make_world(world_cfg: WorldConfig) -> SyntheticWorld:
    """The world a stage reads, by ``world.name`` (world/__init__.py's registry: the synthetic one, or
    its clue table with a questions file's questions, world/jsonl.py). A stage whose slice has no
    ``name`` (one that never asks a question: pretrain, distill) gets the clue table alone."""
    try:
        return open_world(world_cfg)
    except QuestionsError as e:
        raise StageError(str(e).splitlines()[0]) from None
    except KeyError as e:
        raise StageError(str(e.args[0])) from None


def encode_pairs(tokenizer, pairs: list[tuple[str, str]]) -> dict[str, torch.Tensor]:
    """Tokenise (prompt, completion) pairs; labels only on completion tokens, right-padded."""
    prompts = tokenizer([p for p, _ in pairs], add_special_tokens=False)["input_ids"]
    comps = tokenizer([c for _, c in pairs], add_special_tokens=False)["input_ids"]
    width = max(len(p) + len(c) for p, c in zip(prompts, comps))
    ids = torch.full((len(pairs), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    attn = torch.zeros_like(ids)
    for i, (p, c) in enumerate(zip(prompts, comps)):
        n = len(p) + len(c)
        ids[i, :n] = torch.tensor(p + c)
        labels[i, len(p):n] = torch.tensor(c)
        attn[i, :n] = 1
    return {"input_ids": ids, "attention_mask": attn, "labels": labels}


def supervised_loop(model, tokenizer, next_pairs: Callable[[int], list[tuple[str, str]]],
                    steps: int, lr: float, warmup: int, on_step: Callable[[int, float], None] | None = None,
                    params=None) -> float:
    """AdamW with warmup + cosine decay on completion-token cross-entropy; returns the final loss."""
    params = [p for p in (params or model.parameters()) if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, warmup)) * 0.5 * (1 + math.cos(math.pi * s / steps)))
    model.train()
    loss_value = float("nan")
    for step in range(steps):
        batch = {k: v.to(model.device) for k, v in encode_pairs(tokenizer, next_pairs(step)).items()}
        loss = model(**batch).loss
        if not torch.isfinite(loss):
            raise StageError(f"loss is {loss.item()} at step {step}: stopping (lower the lr?)")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        loss_value = loss.item()
        if on_step is not None:
            on_step(step, loss_value)
    model.eval()
    return loss_value
