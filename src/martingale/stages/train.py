"""Stage s1/s2/...: policy gradient over the model's own traces, LoRA, KL anchor to the start model.

One step, read top to bottom: sample ``generations`` traces for each of ``batch_questions``
questions → read prior and posterior (the run's elicit mode) → reward (rewards.REWARDS) →
advantage = reward minus its question's group mean, divided by the batch sd, clipped → loss =
per-token −A·log π + β·KL(π‖π_start) (k3 estimator, ≥ 0) → AdamW on the adapter. The adapter is
merged at the end so the next stage starts from this one's model.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from .. import io, rewards
from . import stage_kind
from .common import StageError, log, make_world, seed_everything

FILTER_QUANTILE = {"top-half": 0.5, "top-quartile": 0.75}


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
    always costs (the log's KL-sign bug rewarded divergence). Returns (loss, mean k3).
    """
    import torch
    diff = ref_logp - logp
    k3 = torch.exp(diff) - diff - 1.0
    per_token = -adv[:, None] * logp + beta * k3
    denom = mask.sum().clamp(min=1)
    return (per_token * mask).sum() / denom, (k3 * mask).sum() / denom


def select_questions(model, tok, questions, ctx, elicit, stage: dict[str, Any], seed: int):
    """The ``filter`` option: keep the questions where the start model's |Δ| is in the top quantile."""
    from ..beliefs.elicit import rollout
    if stage["filter"] is None:
        return questions, None
    ro = rollout(model, tok, questions, ctx, elicit, seed, float(stage["temperature"]))
    delta = np.array([abs(b - a) if a is not None and b is not None else np.nan
                      for a, b in zip(ro.prior, ro.posterior)])
    cut = np.nanquantile(delta, FILTER_QUANTILE[stage["filter"]])
    kept = [q for q, d in zip(questions, delta) if np.isfinite(d) and d >= cut]
    return kept, {"filter": stage["filter"], "threshold": float(cut), "kept": len(kept), "of": len(questions)}


def _as_array(xs) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in xs], dtype=float)


@stage_kind("train", "step", keys=("world", "model", "elicit"), inputs=("start_model", "judge_model"),
            per_seed=True)
def run(cfg: dict[str, Any], start_model: Path, judge_model: Path, out_dir: Path) -> None:
    """cfg: world, model, elicit, stage, seed → out_dir/model (adapter merged), train.jsonl, stage.json."""
    import torch
    from peft import LoraConfig, get_peft_model

    from ..beliefs.elicit import Rollout, rollout
    from ..beliefs.readers import ReadContext
    from ..model.generate import token_logprobs
    from ..model.load import load, save

    stage, elicit, seed = cfg["stage"], cfg["elicit"], int(cfg["seed"])
    name = f"train stage ({stage['reward']} reward)"
    if stage["reward"] not in rewards.REWARDS:
        raise StageError(f"stages.*.reward: unknown reward {stage['reward']!r} "
                         f"(known: {', '.join(rewards.REWARDS)})")
    seed_everything(seed)
    world = make_world(cfg["world"])
    train_q, _ = world.splits()
    if stage["balance"]:
        train_q = train_q + [q.negation() for q in train_q]
    base, tok = load(start_model, cfg["model"])
    judge = load(judge_model, cfg["model"]) if elicit.get("judge") == "self" else None
    ctx = ReadContext(world=world, judge=judge)
    train_q, filter_info = select_questions(base, tok, train_q, ctx, elicit, stage, seed)
    if filter_info:
        log.info("%s filter: %s", name, filter_info)

    r = int(stage["lora_r"])
    policy = get_peft_model(base, LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0,
                                             target_modules=list(cfg["model"]["lora_targets"])))
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=float(stage["lr"]), weight_decay=0.0)
    order_rng = np.random.default_rng([seed, 11])
    B, G = int(stage["batch_questions"]), int(stage["generations"])
    history: list[dict[str, Any]] = []
    step, t0 = 0, time.time()
    for epoch in range(int(stage["epochs"])):
        perm = order_rng.permutation(len(train_q))
        for start in range(0, len(perm) - B + 1, B):
            qs = [train_q[i] for i in perm[start:start + B] for _ in range(G)]
            group = np.repeat(np.arange(B), G)
            policy.eval()
            ro: Rollout = rollout(policy, tok, qs, ctx, elicit, seed * 100_003 + step,
                                  float(stage["temperature"]))
            y = np.array([q.y for q in qs], dtype=float)
            rew = rewards.compute(stage["reward"], _as_array(ro.prior), _as_array(ro.posterior),
                                  _as_array(ro.stated), y, stage)
            adv = torch.tensor(advantages(rew, group, float(stage["adv_clip"])), dtype=torch.float32)
            policy.train()
            loss, kl = 0.0, 0.0
            batches = [ro.trace] + ([ro.snap] if ro.snap is not None else [])
            for b in batches:
                logp = token_logprobs(policy, b)
                with torch.no_grad(), policy.disable_adapter():
                    ref = token_logprobs(policy, b)
                part_loss, part_kl = policy_loss(logp, ref, adv, b.completion_mask.float(),
                                                 float(stage["kl_beta"]))
                loss, kl = loss + part_loss / len(batches), kl + part_kl.detach() / len(batches)
            if not torch.isfinite(loss):
                raise StageError(f"{name}: loss is {float(loss)} at step {step} "
                                 f"(lr {stage['lr']}, kl_beta {stage['kl_beta']}): stopping")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            stated = _as_array(ro.stated)
            row = {"step": step, "epoch": epoch, "loss": round(float(loss), 6), "kl": round(float(kl), 6),
                   "reward": round(float(np.nanmean(rew)), 6) if np.isfinite(rew).any() else None,
                   "parse_rate": round(float(np.isfinite(stated).mean()), 4),
                   "brier": round(float(np.nanmean((y - stated) ** 2)), 6) if np.isfinite(stated).any() else None}
            history.append(row)
            if step % 20 == 0:
                log.info("%s step %d %s (%.0fs)", name, step, row, time.time() - t0)
            step += 1
    if step == 0:
        raise StageError(f"{name}: no training step ran ({len(train_q)} questions < "
                         f"batch_questions {B})")
    merged = policy.merge_and_unload()
    with io.atomic_dir(out_dir) as tmp:
        save(merged, tok, tmp)
        io.write_jsonl(tmp / "train.jsonl", history)
        io.write_json(tmp / "stage.json", {"kind": "train", "reward": stage["reward"],
                                           "steps": step, "filter": filter_info})
