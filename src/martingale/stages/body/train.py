"""Stage s1/s2/...: policy gradient over the model's own traces, LoRA, KL anchor to the start model.

One step, read top to bottom: sample ``generations`` traces for each of ``batch_questions``
questions → read prior and posterior (the run's elicit mode) → reward (rewards.REWARDS, bound) →
advantage = reward minus its question's group mean, divided by the batch sd, clipped → loss =
per-token −A·log π + β·KL(π‖π_start) (k3 estimator, ≥ 0) → AdamW on the adapter. The adapter is
merged at the end so the next stage starts from this one's model. Sampling, judge reads and
log-probs go through the run's generation backend (model.backend) wrapping the LoRA policy; a
server backend (vllm) gets the adapter reloaded as often as its settings say (``model.vllm.reload_every``), checked
applied each time, while the loss's log-probs come from the torch policy (as TRL's GRPO does). A
stage whose merged weights equal its start model's (zero advantages, all-masked batches) fails.
Every ``checkpoint_every`` steps a checkpoint (training/checkpoint.py) is written beside the output
folder: a killed stage rerun resumes from it and ends with the same bytes as an uninterrupted one.
Each step logs one progress line (step k/N, reward, KL, loss, parse rate, tokens/s, ETA) and, in a
stage job, its row and timings to the stage's live wandb run (tracking.live_run); timings never go
into a file of the stage.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ... import rewards
from ...beliefs.elicit import judge_needed, probe_prompts, rollout
from ...beliefs.readers import ReadContext
from ...beliefs.section import ElicitConfig
from ...core.errors import StageError
from ...core.jsonvalue import JsonObject
from ...store.tracking import live_run
from ...training import checkpoint
from ...training.loss import advantages, completion_tokens, rollout_loss
from ...training.policy import (
    Policy,
    check_adapter_finite,
    lora_policy,
    serve_policy,
    update,
    weights_digest,
    write_trained,
)
from ...training.progress import Pace, report_step, step_row
from ...training.shared import ranked_models
from ..section import StageConfig
from ..train import TrainSlice
from .common import log, make_world, seed_everything

FILTER_QUANTILE = {"top-half": 0.5, "top-quartile": 0.75}


def select_questions(gen, questions, ctx, elicit: ElicitConfig, stage: StageConfig, seed: int):
    """The ``filter`` option: keep the questions where the start model's |Δ| is in the top quantile."""

    if stage.filter is None:
        return questions, None
    ro = rollout(gen, questions, ctx, elicit, seed, stage.temperature)
    delta = np.array([abs(b - a) if a is not None and b is not None else np.nan
                      for a, b in zip(ro.prior, ro.posterior)])
    cut = np.nanquantile(delta, FILTER_QUANTILE[stage.filter])
    kept = [q for q, d in zip(questions, delta) if np.isfinite(d) and d >= cut]
    return kept, {"filter": stage.filter, "threshold": float(cut), "kept": len(kept), "of": len(questions)}


def _as_array(xs) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in xs], dtype=float)


def step_loss(policy: Policy, score: Callable[..., np.ndarray], qs, group: np.ndarray, ctx,
              elicit: ElicitConfig, stage: StageConfig, seed: int):
    """Roll the policy out on ``qs`` (``group``: each sample's question), reward, advantages, loss.
    Returns (loss, mean k3, rewards, stated P, y, completion tokens sampled: trace and snap)."""

    policy.model.eval()
    ro = rollout(policy.gen, qs, ctx, elicit, seed, stage.temperature)
    y = np.array([q.y for q in qs], dtype=float)
    rew = score(prior=_as_array(ro.prior), posterior=_as_array(ro.posterior),
                stated=_as_array(ro.stated), y=y)
    adv = torch.tensor(advantages(rew, group, stage.adv_clip), dtype=torch.float32)
    policy.model.train()
    loss, kl = rollout_loss(policy, ro, adv, stage.kl_beta, stage.temperature)
    return loss, kl, rew, _as_array(ro.stated), y, completion_tokens(ro.trace, ro.snap)


def train_steps(policy: Policy, score: Callable[..., np.ndarray], train_q, ctx, cfg: TrainSlice,
                ckpt: Path, name: str) -> list[JsonObject]:
    """The policy-gradient loop: each epoch a fresh permutation of the questions, ``batch_questions``
    of them (``generations`` samples each) a step. It resumes from the stage's checkpoint when one
    verifies (skipping the batches done before it) and writes one every ``checkpoint_every`` steps,
    so a killed stage rerun ends with the same bytes. Returns the history rows."""

    stage, elicit, seed = cfg.stage, cfg.elicit, cfg.seed
    B, G, every = stage.batch_questions, stage.generations, stage.checkpoint_every
    order_rng = np.random.default_rng([seed, 11])
    done = checkpoint.resume(ckpt, policy, cfg, order_rng)
    history = done.history
    pace = Pace(stage.epochs * (len(train_q) // B))
    live = live_run()                               # the stage's wandb run (off outside a stage job)
    for row in history:                             # resumed: the steps before the checkpoint, once
        live.log(row, step=row["step"])
    if done.step:
        serve_policy(policy)                        # the resumed adapter, not the start model
    for epoch in range(done.epoch, stage.epochs):
        epoch_rng = order_rng.bit_generator.state   # a checkpoint this epoch redraws its permutation
        perm = order_rng.permutation(len(train_q))
        for first in range(0, len(perm) - B + 1, B):
            step = epoch * (len(perm) // B) + first // B
            if step < done.step:
                continue                            # done before the checkpoint resumed from
            t_step = time.perf_counter()
            if every and step % every == 0 and step > done.step:
                checkpoint.save(ckpt, policy, cfg, checkpoint.Progress(step, epoch, history), epoch_rng)
            qs = [train_q[i] for i in perm[first:first + B] for _ in range(G)]
            loss, kl, rew, stated, y, tokens = step_loss(policy, score, qs, np.repeat(np.arange(B), G), ctx,
                                                         elicit, stage, seed * 100_003 + step)
            if not torch.isfinite(loss):
                raise StageError(f"{name}: loss is {loss.item()} at step {step} "
                                 f"(lr {stage.lr}, kl_beta {stage.kl_beta}): stopping")
            update(policy, loss)
            check_adapter_finite(policy, name, step, stage)
            serve_policy(policy, step)
            history.append({"step": step, "epoch": epoch, **step_row(loss, kl, rew, stated, y)})
            report_step(name, "step", step, pace, history[-1], tokens, time.perf_counter() - t_step, live)
    return history


def run(cfg: TrainSlice, start_model: Path, judge_model: Path, out_dir: Path) -> None:
    """cfg: world, model, elicit, stage, seed → out_dir/model (adapter merged), train.jsonl, stage.json.
    Its checkpoints (stages/checkpoint.py) live beside out_dir until the output is written."""

    stage, elicit, seed = cfg.stage, cfg.elicit, cfg.seed
    name = f"train stage ({stage.reward} reward)"
    assert stage.reward is not None, "a step runs where its reward is set (the plan)"
    try:
        score = rewards.bind(stage.reward, stage)   # an unknown reward, a missing parameter
    except ValueError as e:
        raise StageError(str(e)) from None
    seed_everything(seed)
    world = make_world(cfg.world)
    train_q, _ = world.splits()
    if stage.balance:
        train_q = train_q + [q.negation() for q in train_q]
    with ranked_models(start_model, judge_model, cfg.model, judge_needed(elicit)) as (start, judge):
        probes = tuple(probe_prompts(train_q, prompts_cfg=cfg.prompts, tokenizer=start.tokenizer))
        guards = start.verify(list(probes))
        ctx = ReadContext(world=world, judge=judge, config=cfg)
        try:
            train_q, filter_info = select_questions(start, train_q, ctx, elicit, stage, seed)
            if filter_info:
                log.info("%s filter: %s", name, filter_info)
            start_digest = weights_digest(start.model)
            policy = lora_policy(start, stage, cfg.model, start_model)
            ckpt = checkpoint.folder(out_dir)
            policy.adapter_dir, policy.probes = ckpt.with_suffix(".adapter"), probes
            history = train_steps(policy, score, train_q, ctx, cfg, ckpt, name)
        finally:
            ctx.close()
    if not history:
        raise StageError(f"{name}: no training step ran ({len(train_q)} questions < "
                         f"batch_questions {stage.batch_questions})")
    write_trained(out_dir, policy, start_digest, start.tokenizer, history,
                  {"kind": "train", "reward": stage.reward, "steps": len(history), "filter": filter_info,
                   "backend": cfg.model.backend, **guards, **ctx.stats()},
                  f"{name}: training did not move the model ({len(history)} steps left the merged weights "
                  "equal to the start model's: zero advantages or all-masked batches?)")
    checkpoint.remove(ckpt)
    shutil.rmtree(policy.adapter_dir, ignore_errors=True)
