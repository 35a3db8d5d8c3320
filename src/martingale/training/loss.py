"""The policy-gradient loss a training stage minimises (train: traces; instructor: utterances):
advantages from rewards, −A·log π + β·KL(π‖π_start) per completion token, its gradient accumulated a
few rows at a time where a model's long prompts do not fit in memory at once."""
from __future__ import annotations

import numpy as np
import torch

from ..model.generate import rows_of
from . import ranks
from .policy import Policy


def advantages(reward: np.ndarray, group: np.ndarray, clip: float) -> np.ndarray:
    """A = (r − mean r of the same question) / sd over the batch of those centred rewards, in
    [−clip, clip]. A sample whose reward is NaN (its number did not parse) gets −clip."""
    adv = np.zeros_like(reward, dtype=float)
    ok = np.isfinite(reward)
    for g in np.unique(group):
        m = ok & (group == g)
        if m.any():
            adv[m] = reward[m] - reward[m].mean()
    sd = adv[ok].std() if ok.sum() > 1 else 0.0
    adv = adv / sd if sd > 1e-8 else np.zeros_like(adv)
    adv = np.clip(adv, -clip, clip)
    adv[~ok] = -clip
    return adv


def policy_loss(logp: torch.Tensor, ref_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean over completion tokens of −A·log π + β·k3, k3 = exp(ref − log π) − (ref − log π) − 1.

    k3 is an estimate of KL(π‖π_ref) that is never negative, so moving away from the start model
    always costs (the research log's KL-sign bug rewarded divergence). Returns (loss, mean k3).
    """
    diff = ref_logp - logp
    k3 = torch.exp(diff) - diff - 1.0
    per_token = -adv[:, None] * logp + beta * k3
    denom = mask.sum().clamp(min=1)
    return (per_token * mask).sum() / denom, (k3 * mask).sum() / denom


def rollout_loss(policy: Policy, ro, adv: torch.Tensor, beta: float, temperature: float):
    """policy_loss averaged over the rollout's batches (the trace; the snap answer in snap mode),
    the reference log-probs from the same model with its adapter off, both at the sampling
    temperature (the distribution the samples came from). Returns (loss, mean k3). With
    ``policy.loss_batch`` (model.loss_batch) the gradient is accumulated here, a few rows at a time
    (``chunked_loss``), and the loss comes back detached."""
    loss: torch.Tensor | float = 0.0
    kl: torch.Tensor | float = 0.0
    batches = [ro.trace] + ([ro.snap] if ro.snap is not None else [])
    if policy.loss_batch or ranks.current().many:
        return chunked_loss(policy, batches, adv, beta, temperature)
    for b in batches:
        logp = policy.gen.token_logprobs(b, temperature)
        with torch.no_grad(), policy.model.disable_adapter():
            ref = policy.gen.token_logprobs(b, temperature)
        part_loss, part_kl = policy_loss(logp, ref, adv.to(logp.device),
                                         b.completion_mask.to(logp.device).float(), beta)
        loss, kl = loss + part_loss / len(batches), kl + part_kl.detach() / len(batches)
    return loss, kl


def chunked_loss(policy: Policy, batches: list, adv: torch.Tensor, beta: float, temperature: float):
    """rollout_loss's gradient accumulated ``policy.loss_batch`` rows at a time, each row chunk
    weighted by its share of the batch's completion tokens (the sum is the whole batch's mean), its
    padding columns cut and vocabulary logits at completion positions only: a real model's long
    prompts do not fit in memory at once. Returns (loss, mean k3), detached."""
    loss, kl, _ = accumulate_chunks(policy, batches, adv, beta, temperature)
    return loss, kl


def accumulate_chunks(policy: Policy, batches: list, adv: torch.Tensor, beta: float, temperature: float):
    """The gradient of the mean over ``batches`` of policy_loss, accumulated ``policy.loss_batch``
    rows at a time (chunked_loss; the instructor's utterance turns too); on ranks, each rank its
    block of rows (loss_chunks), the gradient reduced in the step's last backward. Returns (loss,
    mean k3, max |log π − log π_ref| on completion tokens) over the whole batch, the first two
    detached."""

    policy.opt.zero_grad(set_to_none=True)
    loss, kl, gap = torch.zeros(()), torch.zeros(()), 0.0
    world = ranks.current().world
    chunks = loss_chunks(policy, batches)
    for i, (b, rows, weight) in enumerate(chunks):
        denom = b.completion_mask.sum().clamp(min=1).float()
        sub = rows_of(b, rows)
        mask = sub.completion_mask.float()
        if not mask.any() and world == 1:
            continue
        with ranks.no_sync(policy.loss_model, last=i == len(chunks) - 1):
            logp = (policy.loss_gen or policy.gen).token_logprobs(sub, temperature, completion_only=True)
            with torch.no_grad(), policy.model.disable_adapter():
                ref = policy.gen.token_logprobs(sub, temperature, completion_only=True)
            part, part_kl = policy_loss(logp, ref, adv[rows].to(logp.device), mask.to(logp.device), beta)
            share = mask.sum() / denom / len(batches) * weight
            (part * (share * world if world > 1 else share).to(part.device)).backward()
        loss, kl = loss + (part * share).detach().cpu(), kl + (part_kl * share).detach().cpu()
        gap = max(gap, float(((logp.detach() - ref) * mask.to(logp.device)).abs().max()))
    if world > 1:
        loss, kl = ranks.reduce(loss).float(), ranks.reduce(kl).float()
        gap = float(ranks.reduce(gap, "max"))
    return loss, kl, gap


def loss_chunks(policy: Policy, batches: list) -> list[tuple]:
    """(batch, rows, weight) for each forward/backward of a step's loss: ``policy.loss_batch`` rows
    at a time (0: a batch whole). On ranks, this rank's block of each batch in as many chunks as
    every other rank (ranks.my_rows); a chunk it has no row for runs row 0 at weight 0, since under
    FSDP every forward is a collective."""
    out = []
    for b in batches:
        n = b.input_ids.shape[0]
        if ranks.current().many:
            out += [(b, rows, 1.0) if rows else (b, [0], 0.0) for rows in ranks.my_rows(n, policy.loss_batch)]
        else:
            out += [(b, list(range(first, min(first + policy.loss_batch, n))), 1.0)
                    for first in range(0, n, policy.loss_batch)]
    return out


def completion_tokens(*batches) -> int:
    """Completion tokens sampled in these batches (their ``completion_mask``; None skipped)."""
    return int(sum(int(b.completion_mask.sum()) for b in batches if b is not None))
