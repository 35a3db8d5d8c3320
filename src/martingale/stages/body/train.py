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
Every ``checkpoint_every`` steps a checkpoint (stages/checkpoint.py) is written beside the output
folder: a killed stage rerun resumes from it and ends with the same bytes as an uninterrupted one.
Each step logs one progress line (step k/N, reward, KL, loss, parse rate, tokens/s, ETA) and, in a
stage job, its row and timings to the stage's live wandb run (tracking.live_run); timings never go
into a file of the stage.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ... import io, rewards
from ...errors import StageError
from . import checkpoint
from .common import log, make_world, seed_everything

if TYPE_CHECKING:   # numpy and torch are imported where used: the plan imports this module
    import numpy as np
    import torch

FILTER_QUANTILE = {"top-half": 0.5, "top-quartile": 0.75}


def advantages(reward: np.ndarray, group: np.ndarray, clip: float) -> np.ndarray:
    """A = (r − mean r of the same question) / sd over the batch of those centred rewards, in
    [−clip, clip]. A sample whose reward is NaN (its number did not parse) gets −clip."""
    import numpy as np
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


def select_questions(gen, questions, ctx, elicit, stage: dict[str, Any], seed: int):
    """The ``filter`` option: keep the questions where the start model's |Δ| is in the top quantile."""
    import numpy as np

    from ...beliefs.elicit import rollout
    if stage["filter"] is None:
        return questions, None
    ro = rollout(gen, questions, ctx, elicit, seed, float(stage["temperature"]))
    delta = np.array([abs(b - a) if a is not None and b is not None else np.nan
                      for a, b in zip(ro.prior, ro.posterior)])
    cut = np.nanquantile(delta, FILTER_QUANTILE[stage["filter"]])
    kept = [q for q, d in zip(questions, delta) if np.isfinite(d) and d >= cut]
    return kept, {"filter": stage["filter"], "threshold": float(cut), "kept": len(kept), "of": len(questions)}


def _as_array(xs) -> np.ndarray:
    import numpy as np
    return np.array([np.nan if v is None else v for v in xs], dtype=float)


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
    import torch
    from peft import LoraConfig, get_peft_model

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
    import hashlib

    import torch
    h = hashlib.sha256()
    for name, p in model.state_dict().items():
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def rollout_loss(policy: Policy, ro, adv: torch.Tensor, beta: float, temperature: float):
    """policy_loss averaged over the rollout's batches (the trace; the snap answer in snap mode),
    the reference log-probs from the same model with its adapter off, both at the sampling
    temperature (the distribution the samples came from). Returns (loss, mean k3). With
    ``policy.loss_batch`` (model.loss_batch) the gradient is accumulated here, a few rows at a time
    (``chunked_loss``), and the loss comes back detached."""
    import torch
    loss, kl = 0.0, 0.0
    batches = [ro.trace] + ([ro.snap] if ro.snap is not None else [])
    if policy.loss_batch:
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
    rows at a time (chunked_loss; the instructor's utterance turns too). Returns (loss, mean k3,
    max |log π − log π_ref| on completion tokens), the first two detached."""
    import torch

    from ...model.generate import rows_of
    policy.opt.zero_grad(set_to_none=True)
    loss, kl, gap = torch.zeros(()), torch.zeros(()), 0.0
    for b in batches:
        denom = b.completion_mask.sum().clamp(min=1).float()
        for first in range(0, b.input_ids.shape[0], policy.loss_batch):
            rows = list(range(first, min(first + policy.loss_batch, b.input_ids.shape[0])))
            sub = rows_of(b, rows)
            mask = sub.completion_mask.float()
            if not mask.any():
                continue
            logp = policy.gen.token_logprobs(sub, temperature, completion_only=True)
            with torch.no_grad(), policy.model.disable_adapter():
                ref = policy.gen.token_logprobs(sub, temperature, completion_only=True)
            part, part_kl = policy_loss(logp, ref, adv[rows].to(logp.device), mask.to(logp.device), beta)
            share = mask.sum() / denom / len(batches)
            (part * share.to(part.device)).backward()
            loss, kl = loss + (part * share).detach().cpu(), kl + (part_kl * share).detach().cpu()
            gap = max(gap, float(((logp.detach() - ref) * mask.to(logp.device)).abs().max()))
    return loss, kl, gap


def step_loss(policy: Policy, score: Callable[..., np.ndarray], qs, group: np.ndarray, ctx,
              elicit: dict[str, Any], stage: dict[str, Any], seed: int):
    """Roll the policy out on ``qs`` (``group``: each sample's question), reward, advantages, loss.
    Returns (loss, mean k3, rewards, stated P, y, completion tokens sampled: trace and snap)."""
    import numpy as np
    import torch

    from ...beliefs.elicit import rollout
    policy.model.eval()
    ro = rollout(policy.gen, qs, ctx, elicit, seed, float(stage["temperature"]))
    y = np.array([q.y for q in qs], dtype=float)
    rew = score(prior=_as_array(ro.prior), posterior=_as_array(ro.posterior),
                stated=_as_array(ro.stated), y=y)
    adv = torch.tensor(advantages(rew, group, float(stage["adv_clip"])), dtype=torch.float32)
    policy.model.train()
    loss, kl = rollout_loss(policy, ro, adv, float(stage["kl_beta"]), float(stage["temperature"]))
    return loss, kl, rew, _as_array(ro.stated), y, completion_tokens(ro.trace, ro.snap)


def completion_tokens(*batches) -> int:
    """Completion tokens sampled in these batches (their ``completion_mask``; None skipped)."""
    return int(sum(int(b.completion_mask.sum()) for b in batches if b is not None))


@dataclass
class Pace:
    """The wall time of each step this process ran, for the progress line's ETA: the steps left
    (of ``total``) times the mean step time so far."""
    total: int
    seconds: list[float] = field(default_factory=list)

    def eta(self, done: int) -> float:
        if not self.seconds:
            return float("nan")
        return max(self.total - done, 0) * sum(self.seconds) / len(self.seconds)


def _clock(seconds: float) -> str:
    if seconds != seconds:       # NaN: no step timed yet
        return "?"
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _value(v) -> str:
    return "-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)


PROGRESS_KEYS = (("reward", "reward"), ("kl", "kl"), ("loss", "loss"), ("parse_rate", "parse"),
                 ("human_ms", "human_ms"), ("adapter_gap", "gap"), ("unreadable", "unreadable"))


def report_step(name: str, unit: str, index: int, pace: Pace, row: dict[str, Any], tokens: int,
                seconds: float, live=None, tokens_label: str = "tok/s") -> None:
    """A step is done: one progress line in the job log (``unit`` k/N, the row's quantities,
    tokens/s, ETA) and the row with its timings to the stage's live wandb run. Timings go nowhere
    else: the stage's files stay the same bytes on every run."""
    pace.seconds.append(seconds)
    eta = pace.eta(index + 1)
    rate = tokens / seconds if seconds > 0 else float("nan")
    parts = [f"{name} {unit} {index + 1}/{pace.total}"]
    parts += [f"{label} {_value(row[key])}" for key, label in PROGRESS_KEYS if key in row]
    parts += [f"{rate:.0f} {tokens_label}", f"{seconds:.2f}s/{unit}", f"eta {_clock(eta)}"]
    log.info(" ".join(parts))
    if live:
        live.log({**row, "perf/completion_tokens": tokens, "perf/tokens_per_s": rate,
                  "perf/step_seconds": seconds, "perf/eta_seconds": eta}, step=index)


def update(policy: Policy, loss: torch.Tensor) -> None:
    """One AdamW step on the adapter, gradients clipped to norm 1 (a detached loss: its gradient
    was accumulated already, chunked_loss)."""
    import torch
    if loss.requires_grad:
        policy.opt.zero_grad(set_to_none=True)
        loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.params, 1.0)
    policy.opt.step()


def check_adapter_finite(policy: Policy, name: str, step: int, stage: dict[str, Any]) -> None:
    """Stop the stage when an optimizer step left NaN/Inf in the adapter: otherwise the next
    rollout fails inside the sampler with a message that does not say why."""
    import torch
    for tensor, p in checkpoint.adapter(policy.model).items():
        if not torch.isfinite(p.detach()).all():
            raise StageError(f"{name}: adapter weights hold NaN/Inf (tensor {tensor}) after step "
                             f"{step} (lr {stage['lr']}, kl_beta {stage['kl_beta']}): stopping")


def step_row(loss, kl, rew: np.ndarray, stated: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """A step's history row: loss, KL, mean reward, parse rate and Brier of the stated P."""
    import numpy as np
    return {"loss": round(float(loss.detach()), 6), "kl": round(float(kl), 6),
            "reward": round(float(np.nanmean(rew)), 6) if np.isfinite(rew).any() else None,
            "parse_rate": round(float(np.isfinite(stated).mean()), 4),
            "brier": round(float(np.nanmean((y - stated) ** 2)), 6) if np.isfinite(stated).any() else None}


def train_steps(policy: Policy, score: Callable[..., np.ndarray], train_q, ctx, cfg: dict[str, Any],
                ckpt: Path, name: str) -> list[dict[str, Any]]:
    """The policy-gradient loop: each epoch a fresh permutation of the questions, ``batch_questions``
    of them (``generations`` samples each) a step. It resumes from the stage's checkpoint when one
    verifies (skipping the batches done before it) and writes one every ``checkpoint_every`` steps,
    so a killed stage rerun ends with the same bytes. Returns the history rows."""
    import numpy as np
    import torch

    from ...tracking import live_run
    stage, elicit, seed = cfg["stage"], cfg["elicit"], int(cfg["seed"])
    B, G, every = int(stage["batch_questions"]), int(stage["generations"]), int(stage["checkpoint_every"])
    order_rng = np.random.default_rng([seed, 11])
    done = checkpoint.resume(ckpt, policy, cfg, order_rng)
    history = done.history
    pace = Pace(int(stage["epochs"]) * (len(train_q) // B))
    live = live_run()                               # the stage's wandb run (off outside a stage job)
    for row in history:                             # resumed: the steps before the checkpoint, once
        live.log(row, step=row["step"])
    if done.step:
        serve_policy(policy)                        # the resumed adapter, not the start model
    for epoch in range(done.epoch, int(stage["epochs"])):
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
                raise StageError(f"{name}: loss is {float(loss)} at step {step} "
                                 f"(lr {stage['lr']}, kl_beta {stage['kl_beta']}): stopping")
            update(policy, loss)
            check_adapter_finite(policy, name, step, stage)
            serve_policy(policy, step)
            history.append({"step": step, "epoch": epoch, **step_row(loss, kl, rew, stated, y)})
            report_step(name, "step", step, pace, history[-1], tokens, time.perf_counter() - t_step, live)
    return history


def write_trained(out_dir: Path, policy: Policy, start_digest: str, tokenizer, history: list[dict[str, Any]],
                  info: dict[str, Any], unmoved: str) -> None:
    """Merge the adapter and write out_dir/model, train.jsonl and stage.json (``info`` and where the
    model lives); a merged model equal to the start model fails the stage with ``unmoved`` instead."""
    from ...model.load import describe, save
    merged = policy.model.merge_and_unload()
    if weights_digest(merged) == start_digest:
        raise StageError(unmoved)
    with io.atomic_dir(out_dir) as tmp:
        save(merged, tokenizer, tmp)
        io.write_jsonl(tmp / "train.jsonl", history)
        io.write_json(tmp / "stage.json", {**describe(merged), **info})


def run(cfg: dict[str, Any], start_model: Path, judge_model: Path, out_dir: Path) -> None:
    """cfg: world, model, elicit, stage, seed → out_dir/model (adapter merged), train.jsonl, stage.json.
    Its checkpoints (stages/checkpoint.py) live beside out_dir until the output is written."""
    from ...beliefs.elicit import judge_needed, probe_prompts
    from ...beliefs.readers import ReadContext
    from ...model.backend import open_models

    stage, elicit, seed = cfg["stage"], cfg["elicit"], int(cfg["seed"])
    name = f"train stage ({stage['reward']} reward)"
    try:
        score = rewards.bind(stage["reward"], stage)   # an unknown reward, a missing parameter
    except ValueError as e:
        raise StageError(str(e)) from None
    seed_everything(seed)
    world = make_world(cfg["world"])
    train_q, _ = world.splits()
    if stage["balance"]:
        train_q = train_q + [q.negation() for q in train_q]
    with open_models(start_model, judge_model, cfg["model"], judge_needed(elicit)) as (start, judge):
        probes = tuple(probe_prompts(train_q, prompts_cfg=cfg.get("prompts"), tokenizer=start.tokenizer))
        guards = start.verify(list(probes))
        ctx = ReadContext(world=world, judge=judge, config=cfg)
        try:
            train_q, filter_info = select_questions(start, train_q, ctx, elicit, stage, seed)
            if filter_info:
                log.info("%s filter: %s", name, filter_info)
            start_digest = weights_digest(start.model)
            policy = lora_policy(start, stage, cfg["model"])
            ckpt = checkpoint.folder(out_dir)
            policy.adapter_dir, policy.probes = ckpt.with_suffix(".adapter"), probes
            history = train_steps(policy, score, train_q, ctx, cfg, ckpt, name)
        finally:
            ctx.close()
    if not history:
        raise StageError(f"{name}: no training step ran ({len(train_q)} questions < "
                         f"batch_questions {stage['batch_questions']})")
    write_trained(out_dir, policy, start_digest, start.tokenizer, history,
                  {"kind": "train", "reward": stage["reward"], "steps": len(history), "filter": filter_info,
                   "backend": cfg["model"]["backend"], **guards, **ctx.stats()},
                  f"{name}: training did not move the model ({len(history)} steps left the merged weights "
                  "equal to the start model's: zero advantages or all-masked batches?)")
    checkpoint.remove(ckpt)
    shutil.rmtree(policy.adapter_dir, ignore_errors=True)
