"""Stage kind instructor (claim C3): train the instructor in the loop, against the fixed human.

``stages.<s>.kind=instructor``: the stage's model is the instructor (the start model, prompted by
``simulate.mode``, gets a LoRA adapter); the human is the run's start model and never changes. One
iteration, read top to bottom: play ``instructor.train_episodes`` episodes on training questions (a
fresh lean and pool each iteration) with the policy as instructor, sampling its utterances at
``instructor.temperature`` (exploration) → the episode reward
(``stages.<s>.reward``: episode_ms, product, symabs, hinge, or B = Brier of the human's last P; its
λs from ``instructor``) → advantage = reward minus the batch mean, over the batch sd, clipped → loss =
per utterance token −A·log π + β·KL(π‖π_start) (train.policy_loss), over every turn → one AdamW step.

Guards: an exploring policy may sample an empty utterance now and then: its episode scores NaN
(the worst advantage, as an unparsed answer in the train stage), and a turn where every utterance
is empty fails the stage (simulate.assert_spoke); after every step the adapter
must move the utterance log-probs (more than ``model.vllm.adapter_floor``), else it was not applied
and the stage fails; the merged model must differ from the start model.

Between chat models (a prompt set with episode prompts, ``prompts=c2``): the same loop over
chat episodes (episodes/chat.py) on training questions, the policy's utterance tokens those
its chat template rendered; the human is ``simulate.human_model`` where set (any backend), its P
the forced read where its backend gives log-probs and the prompt set a prefix, else the verbal one.

Each iteration logs one progress line (iteration k/N, reward, KL, loss, the human's MS, the adapter
gap, tokens/s of the instructor's utterances — the human's reads are not counted — and an ETA) and,
in a stage job, its row and timings to the stage's live wandb run (train.report_step).
"""
from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from ... import rewards
from ...beliefs.elicit import probe_prompts
from ...beliefs.prompts import Prompts
from ...core.errors import StageError
from ...core.jsonvalue import JsonObject
from ...core.typed import fields_of
from ...episodes import chat
from ...episodes import synthetic as ep_mod
from ...episodes.chat import NO_INSTRUCTOR
from ...episodes.roles import role_model
from ...episodes.section import SimulateConfig
from ...metrics import martingale_fit
from ...stats import MetricError
from ...store.tracking import live_run
from ...training import checkpoint, ranks
from ...training.loss import accumulate_chunks, advantages, completion_tokens, policy_loss
from ...training.policy import check_adapter_finite, lora_policy, serve_policy, update, weights_digest, write_trained
from ...training.progress import Pace, report_step
from ...training.shared import ranked_model
from ..instructor import InstructorSlice
from .common import make_world, seed_everything
from .simulate import Played, assert_spoke, check_config, is_chat, play

ITERATION_SEED_STRIDE = 7919   # iteration k plays episodes seeded seed·7919 + k


def play_chat(human, instructor, questions: list, cfg: InstructorSlice, sim: SimulateConfig, seed: int,
              where: str) -> chat.Played:
    """One iteration's chat episodes (lean × outcome balanced over ``questions``), exploring."""
    prompts = Prompts(cfg.prompts, getattr(human, "tokenizer", None))
    local = getattr(human, "tokenizer", None) is not None
    ep = cfg.prompts.episode
    assert ep is not None, "chat episodes: the prompt set's episode prompts (episode_problem)"
    scale = ep.scale
    reader = chat.Reader("forced" if prompts.forced_prefix and local and scale == "p" else "verbal",
                         prompts.forced_prefix, prompts.forced_min_mass, scale)
    episodes = chat.setup(chat.balanced(questions, len(questions)), ep, prompts.fields, sim.mode, sim.lean)
    return chat.play(human, instructor, episodes, ep, sim, prompts.fields, reader, seed, assert_spoke,
                     where=where, strict=False)


def batch_inputs(played) -> dict[str, np.ndarray]:
    """The reward's batch from played episodes: first P, last P (as posterior and stated), y and
    the trajectory (None → NaN)."""
    traj = np.array([[np.nan if p is None else p for p in row] for row in played.human_p], dtype=float)
    y = np.array([e.q.y for e in played.episodes], dtype=float)
    return {"prior": traj[:, 0], "posterior": traj[:, -1], "stated": traj[:, -1], "y": y, "trajectory": traj}


def utterance_loss(policy, played, adv, beta: float, temperature: float):
    """train.policy_loss averaged over the turns' utterance batches; the reference log-probs from
    the same model with its adapter off. Returns (loss, mean k3, max |log π − log π_ref|)."""

    loss: torch.Tensor | float = 0.0
    kl: torch.Tensor | float = 0.0
    gap = 0.0
    turns = [b for b in played.turns if b is not None]
    if (policy.loss_batch or ranks.current().many) and torch.is_grad_enabled():
        # every turn's graph at once held 17 GB for SmolLM2 (4 episodes × 2 turns: OOM-killed):
        # with model.loss_batch the gradient is accumulated a few episodes at a time, turn by turn
        return accumulate_chunks(policy, turns, adv, beta, temperature)
    for b in turns:
        logp = policy.gen.token_logprobs(b, temperature)
        with torch.no_grad(), policy.model.disable_adapter():
            ref = policy.gen.token_logprobs(b, temperature)
        mask = b.completion_mask.to(logp.device).float()
        part, part_kl = policy_loss(logp, ref, adv.to(logp.device), mask, beta)
        loss, kl = loss + part / len(turns), kl + part_kl.detach() / len(turns)
        gap = max(gap, float(((logp.detach() - ref) * mask).abs().max()))
    return loss, kl, gap


def adapter_gap(policy, played, temperature: float) -> float:
    """max |log π − log π_start| over the last iteration's utterances, after the step: 0 means the
    adapter changes nothing the instructor says (it was not applied)."""
    with torch.no_grad():
        _, _, gap = utterance_loss(policy, played, torch.zeros(len(played.episodes)), 0.0, temperature)
    return gap


def iteration(policy, human, world, qs: list, cfg: InstructorSlice, explore: SimulateConfig, score, it: int,
              name: str) -> tuple[JsonObject, chat.Played | Played]:
    """One iteration: play episodes on ``qs`` with the policy as instructor (exploring), score them,
    one policy-gradient step, the guards (finite weights, the adapter applied); its history row."""
    stage, seed = cfg.stage, cfg.seed
    temperature = cfg.instructor.temperature
    floor = cfg.model.vllm.adapter_floor
    policy.model.eval()
    played: chat.Played | Played
    if is_chat(cfg):
        played = play_chat(human, policy.gen, qs, cfg, explore, seed * ITERATION_SEED_STRIDE + it, name)
    else:
        episodes = ep_mod.setup(world, qs, cfg.simulate, seed * ITERATION_SEED_STRIDE + it)
        played = play(human, policy.gen, world, episodes, explore, cfg.prompts,
                      seed * ITERATION_SEED_STRIDE + it, where=name, strict=False)
    batch = batch_inputs(played)
    rew = np.where(played.silent, np.nan, score(**batch))   # silence scores nothing: the worst advantage
    adv = torch.tensor(advantages(rew, np.zeros(len(rew), dtype=int), stage.adv_clip), dtype=torch.float32)
    policy.model.train()
    loss, kl, _ = utterance_loss(policy, played, adv, stage.kl_beta, temperature)
    if not torch.isfinite(loss):
        raise StageError(f"{name}: loss is {loss.item()} at iteration {it}: stopping")
    update(policy, loss)
    check_adapter_finite(policy, name, it, stage)
    gap = adapter_gap(policy, played, temperature)
    if gap <= floor:
        raise StageError(f"{name}: after iteration {it} the adapter leaves every utterance's "
                         f"log-prob as the start model's (max |Δ| {gap:.2e} ≤ model.vllm.adapter_floor "
                         f"{floor}): it is not applied, the instructor would be the untrained one")
    serve_policy(policy)
    return history_row(it, loss, kl, rew, gap, played, batch), played


def history_row(it: int, loss, kl, rew: np.ndarray, gap: float, played, batch: dict[str, np.ndarray]) -> JsonObject:
    """An iteration's train.jsonl row: loss, KL, mean reward, the human's MS, the adapter gap, …"""
    ok = np.isfinite(batch["prior"]) & np.isfinite(batch["posterior"])
    try:
        ms = round(martingale_fit(batch["prior"][ok], batch["posterior"][ok])["ms"], 6)
    except MetricError:
        ms = None
    return {"iteration": it, "loss": round(float(loss.detach()), 6), "kl": round(float(kl), 6),
            "reward": round(float(np.nanmean(rew)), 6) if np.isfinite(rew).any() else None,
            "human_ms": ms, "adapter_gap": round(gap, 6), "unreadable": played.unreadable,
            "silent_episodes": int(sum(played.silent)),
            "brier_last": round(float(np.nanmean((batch["y"] - batch["stated"]) ** 2)), 6)}


def run(cfg: InstructorSlice, start_model: Path, human_model: Path, out_dir: Path) -> None:
    """cfg: world, model, simulate, instructor, stage, seed → out_dir/model (adapter merged),
    train.jsonl, stage.json."""
    stage, sim, train, seed = cfg.stage, cfg.simulate, cfg.instructor, cfg.seed
    name = f"instructor stage ({stage.reward} reward)"
    assert stage.reward is not None, "a step runs where its reward is set (the plan)"
    if sim.mode in NO_INSTRUCTOR:
        raise StageError(f"{name}: simulate.mode={sim.mode} has no instructor to train")
    chat = is_chat(cfg)
    check_config(cfg)
    try:
        score = rewards.bind(stage.reward, {**fields_of(stage), **fields_of(train)})
    except ValueError as e:
        raise StageError(str(e)) from None
    seed_everything(seed)
    world = make_world(cfg.world)
    train_q, _ = world.splits()
    n = train.train_episodes
    order = np.random.default_rng([seed, 37])
    explore = dataclasses.replace(sim, instructor_temperature=train.temperature)   # the policy explores while it trains
    human = ranked_model(human_model, role_model(cfg, "human") if chat else cfg.model)
    start = ranked_model(start_model, role_model(cfg, "instructor") if chat else cfg.model)   # its own copy:
    # the adapter goes on it, the human stays as it is
    history: list[JsonObject] = []
    adapter_dir = checkpoint.folder(out_dir).with_suffix(".adapter")   # where a server backend loads it from
    try:
        # the backend guards on fixed prompts: parity with HF, then each served adapter applied
        probes = probe_prompts(train_q, prompts_cfg=cfg.prompts, tokenizer=start.tokenizer)
        guards = start.verify(list(probes))
        start_digest = weights_digest(start.model)
        policy = lora_policy(start, stage, cfg.model, start_model)
        policy.adapter_dir, policy.probes = adapter_dir, tuple(probes)
        pace, live = Pace(train.iterations), live_run()   # live: the stage's wandb run
        for it in range(train.iterations):
            t_it = time.perf_counter()
            qs = [train_q[i] for i in order.permutation(len(train_q))[:n]]
            row, played = iteration(policy, human, world, qs, cfg, explore, score, it, name)
            history.append(row)
            report_step(name, "iteration", it, pace, row, completion_tokens(*played.turns),
                        time.perf_counter() - t_it, live, tokens_label="utterance tok/s")
    finally:
        human.close()
        start.close()
        shutil.rmtree(adapter_dir, ignore_errors=True)
    write_trained(out_dir, policy, start_digest, start.tokenizer, history,
                  {"kind": "instructor", "reward": stage.reward, "mode": sim.mode,
                   "iterations": len(history), "backend": cfg.model.backend, **guards},
                  f"{name}: training did not move the instructor ({len(history)} iterations left the "
                  "merged weights equal to the start model's)")
