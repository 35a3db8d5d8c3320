"""Stage simulate (claim C2): two-agent episodes, an instructor and a simulated human, per seed.

``eval.kind=simulate`` measures every model stage of a run this way: the human is the run's start
model (base or D, fixed), the instructor is the stage's model (at s0 the start model prompted by
``simulate.mode``; after an ``instructor`` stage, the trained instructor). Per held-out question
(the first ``simulate.episodes``) an episode (episodes/synthetic.py): the human states P before the
first turn and after each of ``simulate.turns`` turns, the instructor says one clue a turn.

Records (one per episode): prior = the human's first P, posterior = its last, stated = its last P
(Brier is the human's, against the resolution), the whole trajectory, the Bayes belief of its
evidence each turn, the instructor's utterances; ``simulate.negations`` adds the negated episode's
last P (``stated_neg``: coherence |P(A) + P(¬A) − 1|). Metrics: the eval block (MS first → last with
its CI, Brier …) plus metrics.episode_metrics, and the instructor's own single-agent MS.

Guards (``assert_spoke``): a turn where every utterance is empty or whitespace fails the stage (the
log's C3 70B runs were invalidated by an instructor silent in every episode), and so does one that
is silent in more than 1 − ``eval.min_parse_rate`` of its turns; a rarer empty utterance (an
untrained instructor sampling its end-of-text) is counted (``silent_utterances`` in metrics.json),
that turn's human hears nothing, and the episode stays in the measure. A trained instructor that
speaks exactly as its untrained start fails too (its adapter was not applied).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ...beliefs.elicit import judge_needed
from ...beliefs.parse import parse_p
from ...beliefs.prompts import Prompts
from ...beliefs.section import PromptsConfig
from ...core.errors import StageError
from ...core.jsonvalue import JsonObject
from ...episodes import chat, episode_problem
from ...episodes import synthetic as ep_mod
from ...episodes.roles import role_model, same_model
from ...episodes.section import SimulateConfig
from ...episodes.synthetic import Episode
from ...metrics import episode_metrics, stage_metrics
from ...model.backend import open_model
from ...model.generate import Batch
from ...model.load import describe
from ...model.section import model_section
from ...store import files
from ..instructor import InstructorSlice
from ..simulate import SimulateSlice
from .common import log, make_world, seed_everything
from .evaluate import check_parse_rate, evaluate_model

TURN_SEED_STRIDE = 10       # turn t: the human samples with seed·1000 + 10t, the instructor + 1
NEGATION_OFFSET = 500       # the negated episodes' seeds


def _r(v: Optional[float]) -> Optional[float]:
    return None if v is None else round(float(v), 6)


@dataclass
class Played:
    """What a batch of episodes produced: per episode the human's stated P each turn (None =
    unparsed), the Bayes belief of its evidence each turn, the utterances, its last trace; per turn
    the instructor's sampled batch (for the policy gradient) or None without an instructor."""
    episodes: list[Episode]
    human_p: list[list[Optional[float]]]
    bayes: list[list[float]]
    utterances: list[list[str]]
    last_trace: list[str]
    turns: list[Optional[Batch]] = field(default_factory=list)
    unreadable: int = 0
    silent: list[bool] = field(default_factory=list)   # per episode: an utterance was empty (strict=False)


def assert_spoke(texts: list[str], turn: int, where: str, strict: bool = True) -> None:
    """Fail when any instructor utterance of a turn is empty or whitespace (``strict``), or when
    every one is (not strict: a policy exploring while it trains, or a measure that counts a rarer
    silence): a silent instructor is not an instructor (the human would drift on its own and the
    episode would be read as influence)."""
    silent = [i for i, t in enumerate(texts) if not t.strip()]
    if silent and (strict or len(silent) == len(texts)):
        raise StageError(f"{where}: the instructor said nothing (empty utterance) in {len(silent)} of "
                         f"{len(texts)} episodes at turn {turn} (assert_spoke; e.g. episode {silent[0]})")


def check_spoken(played: list[Played], floor: float) -> int:
    """The empty utterances of ``played`` (a measure's episodes, every turn), failing the
    stage when the instructor spoke in fewer than ``floor`` (eval.min_parse_rate) of its turns, as
    the human's stated P is held to it. Returns how many were empty."""
    said = [u for p in played for episode in p.utterances for u in episode]
    silent = sum(1 for u in said if not u)
    if said and (len(said) - silent) / len(said) < floor:
        raise StageError(f"simulate: the instructor said nothing (empty utterance) in {silent} of its {len(said)} "
                         f"turns, more than 1 − eval.min_parse_rate {floor} (assert_spoke)")
    return silent


def human_reads(human, ask, world, episodes: list[Episode], temperature: float, seed: int) -> tuple[list, list]:
    """Each human reasons over its evidence window and states P: (stated P, trace text)."""
    batch = human.sample([ask.reasoned(e.human_question()) for e in episodes],
                         ask.trace_tokens(world.n_clues), temperature, seed)
    texts = [ask.reasoned_text(t) for t in batch.texts]
    return [parse_p(t) for t in texts], texts


def play(human, instructor, world, episodes: list[Episode], sim: SimulateConfig, prompts_cfg: PromptsConfig | None,
         seed: int, where: str = "simulate", strict: bool = True) -> Played:
    """Play every episode for ``simulate.turns`` turns (all episodes side by side, one batch per
    turn and agent). ``instructor`` None or mode ``none``: the human re-reads its own evidence.
    ``strict``: an empty utterance fails (assert_spoke); else (a policy exploring while it trains)
    the episode is marked ``silent`` and the human hears nothing, and only a turn where every
    utterance is empty fails."""


    ask = Prompts(prompts_cfg, getattr(human, "tokenizer", None))
    order = ep_mod.MODES[sim.mode]
    h_temp, i_temp = sim.human_temperature, sim.instructor_temperature
    base = seed * 1000
    p, traces = human_reads(human, ask, world, episodes, h_temp, base)
    out = Played(episodes, [[x] for x in p], [[ep_mod.window_bayes(world, e.window, e.q.negated)]
                                              for e in episodes], [[] for _ in episodes], traces,
                 silent=[False] * len(episodes))
    rngs = [np.random.default_rng([seed, 29, i]) for i in range(len(episodes))]
    last = list(p)
    for turn in range(1, sim.turns + 1):
        batch = None
        if order is not None and instructor is not None:
            slots = [order(world, e, last[i], rngs[i]) for i, e in enumerate(episodes)]
            prompts = [ep_mod.instructor_prompt(world, e, s, last[i]) for i, (e, s) in enumerate(zip(episodes, slots))]
            batch = instructor.sample(prompts, 1, i_temp, base + TURN_SEED_STRIDE * turn + 1)
            assert_spoke(batch.texts, turn, where, strict)
            for i, (e, text) in enumerate(zip(episodes, batch.texts)):
                clue = ep_mod.heard_clue(text, world.n_types)
                if not text.strip():
                    out.silent[i] = True
                elif clue is None:
                    out.unreadable += 1
                else:
                    ep_mod.hear(e, clue, slots[i])
                out.utterances[i].append(text.strip())
        out.turns.append(batch)
        p, traces = human_reads(human, ask, world, episodes, h_temp, base + TURN_SEED_STRIDE * turn)
        for i, e in enumerate(episodes):
            out.human_p[i].append(p[i])
            out.bayes[i].append(ep_mod.window_bayes(world, e.window, e.q.negated))
            if p[i] is not None:
                last[i] = p[i]
        out.last_trace = traces
    return out


def episode_questions(world, sim: SimulateConfig):
    """The held-out questions the episodes are played on: the first ``simulate.episodes``."""
    _, heldout = world.splits()
    return heldout[: sim.episodes]


def records(world, played: Played, seed: int, negated: Optional[Played] = None) -> list[JsonObject]:
    """One row per episode (see the module docstring); ``bayes_end`` is the question's own Bayes
    belief (the oracle reading the question's evidence: the same under every mode, so two modes pair)."""
    rows = []
    for i, e in enumerate(played.episodes):
        traj = played.human_p[i]
        row = {"qid": e.q.qid, "y": e.q.y, "seed": seed, "lean": e.lean,
               "prior": _r(traj[0]), "posterior": _r(traj[-1]), "stated": _r(traj[-1]),
               "trajectory": [_r(x) for x in traj], "bayes_turns": [_r(x) for x in played.bayes[i]],
               "bayes_end": _r(world.bayes(e.q)), "utterances": played.utterances[i],
               "completion": played.last_trace[i]}
        if negated is not None:
            row["stated_neg"] = _r(negated.human_p[i][-1])
        rows.append(row)
    return rows


def instructor_alone(instructor, human, cfg: SimulateSlice, questions) -> JsonObject:
    """The instructor's own single-agent MS and Brier on the episode questions (the run's elicit
    mode; the human as the self judge): the research log's 'MS ≈ 0 alone, entrenching in the loop'."""
    judge = human if judge_needed(cfg.elicit) else None
    rows = evaluate_model(instructor, judge, cfg, questions)
    m = stage_metrics(rows, cfg.eval.n_bootstrap, cfg.eval.ci, cfg.seed)
    return {"instructor_ms": m["ms"], "instructor_ms_ci": m["ms_ci"], "instructor_brier": m["brier"],
            "instructor_n": m["n_pairs"]}


def check_instructor_applied(instructor, start, world, episodes: list[Episode], floor: float) -> float:
    """A trained instructor must not speak exactly as its start model: the largest |Δ log-prob| of
    its utterance tokens on probe prompts; at or under ``floor`` the stage fails (the research log's
    70B runs: a LoRA that never served, the 'trained' instructor was the untrained one)."""

    probes = [ep_mod.instructor_prompt(world, e, ep_mod.MODES["neutral"](world, e, None, _rng(i)), None)
              for i, e in enumerate(episodes[:8])]
    batch = instructor.sample(probes, 1, 1.0, 0)
    with torch.no_grad():
        gap = float((instructor.token_logprobs(batch) - start.token_logprobs(batch)).abs().max())
    if gap <= floor:
        raise StageError(f"simulate: the trained instructor speaks exactly as its start model (max "
                         f"|Δ log-prob| {gap:.2e} ≤ model.vllm.adapter_floor {floor}): its adapter was "
                         "not applied (assert_spoke)")
    return gap


def _rng(i: int):
    return np.random.default_rng([0, 31, i])


def is_chat(cfg: SimulateSlice | InstructorSlice) -> bool:
    """Chat episodes (episodes/chat.py): the prompt set has episode prompts (conf/prompts/c2.yaml)."""
    return cfg.prompts.episode is not None


def check_config(cfg: SimulateSlice | InstructorSlice) -> None:
    """What simulate cannot play (episodes.episode_problem), in one line."""
    problem = episode_problem(cfg)
    if problem:
        raise StageError(f"simulate: {problem[0]}: {problem[1]}")


def run(cfg: SimulateSlice, model: Path, human_model: Path, out_dir: Path) -> None:
    """cfg: world, model, elicit, eval, simulate, seed → out_dir/records.jsonl, metrics.json."""

    check_config(cfg)
    if is_chat(cfg):
        return run_chat(cfg, model, human_model, out_dir)
    sim, seed = cfg.simulate, cfg.seed
    seed_everything(seed)
    world = make_world(cfg.world)
    questions = episode_questions(world, sim)
    trained = Path(model).resolve() != Path(human_model).resolve()
    opened = []
    try:
        human = open_model(human_model, cfg.model)
        opened.append(human)
        instructor = open_model(model, cfg.model) if trained else human
        if trained:
            opened.append(instructor)
        guards = {**describe(instructor.model), "instructor_trained": trained}
        try:
            episodes = ep_mod.setup(world, questions, sim, seed)
        except ValueError as e:
            raise StageError(str(e)) from None
        if trained:
            guards["instructor_adapter_gap"] = check_instructor_applied(
                instructor, human, world, episodes, cfg.model.vllm.adapter_floor)
        played = play(human, instructor, world, episodes, sim, cfg.prompts, seed, strict=False)
        negated = None
        if sim.negations:
            negated = play(human, instructor, world, ep_mod.negated(ep_mod.setup(world, questions, sim, seed)),
                           sim, cfg.prompts, seed + NEGATION_OFFSET, strict=False)
        silent = check_spoken([x for x in (played, negated) if x is not None], cfg.eval.min_parse_rate)
        alone = instructor_alone(instructor, human, cfg, questions) if sim.mode != "none" else {}
    finally:
        for b in opened:
            b.close()
    rows = records(world, played, seed, negated)
    # silent_utterances only where there were some: a stage with none writes the bytes it always did
    counts = {"unreadable_utterances": played.unreadable, **({"silent_utterances": silent} if silent else {})}
    write_episodes(cfg, rows, seed, {**counts, **alone}, guards, out_dir, "simulate", "instructor_ms")


def check_turn_parse_rates(rows: list[JsonObject], floor: float, label: str) -> None:
    """Fail the stage when the human's P parsed in fewer than ``floor`` (eval.min_parse_rate) of the
    episodes at any turn, the prior included: MS is read first → last, so a turn with no P is a
    headline with no data, however well the last turn parsed."""
    turns = max((len(r["trajectory"]) for r in rows), default=0)
    for t in range(turns):
        missing = [r for r in rows if t >= len(r["trajectory"]) or r["trajectory"][t] is None]
        rate = 1 - len(missing) / len(rows)
        if rate < floor:
            said = [m.get("text") or "" for r in missing[:3] for m in r.get("transcript", ())
                    if m["turn"] == t and m["role"] == "human"]
            shown = f"; e.g. {' | '.join(repr(x[-60:]) for x in said)}" if said else ""
            which = "before the first turn (the prior)" if t == 0 else f"after turn {t}"
            raise StageError(f"{label}: the human's P parsed in {len(rows) - len(missing)} of {len(rows)} episodes "
                             f"{which}: rate {rate:.3f} < eval.min_parse_rate {floor}{shown}")


MIN_MS_PAIRS = 3    # metrics.martingale_fit's least


def check_headline(metrics: JsonObject, n: int, label: str) -> None:
    """Fail the stage when MS, its headline, is undefined for lack of parsed answers (fewer than
    MIN_MS_PAIRS episodes with both a first and a last P, though each turn passed the floor): such
    a stage is not done."""
    if metrics["n_pairs"] < MIN_MS_PAIRS:
        raise StageError(f"{label}: MS is undefined: {metrics['n_pairs']} of {n} episodes have both a parsed "
                         f"first and last P (a slope needs {MIN_MS_PAIRS})")


def write_episodes(cfg: SimulateSlice, rows: list[JsonObject], seed: int, extra: JsonObject,
                   guards: JsonObject, out_dir: Path, label: str, last_logged: str) -> None:
    """The end of an episode stage (embedded or chat): the parse floor, the eval and episode
    blocks with mode, turns and ``extra``, one log line, then the folder, written atomically."""
    sim, floor = cfg.simulate, cfg.eval.min_parse_rate
    check_parse_rate(rows, floor)
    check_turn_parse_rates(rows, floor, label)
    n_boot, level = cfg.eval.n_bootstrap, cfg.eval.ci
    metrics = stage_metrics(rows, n_boot, level, seed)
    if floor > 0:          # eval.min_parse_rate=0: measure whatever parsed (an untrained model's mechanics)
        check_headline(metrics, len(rows), label)
    metrics.update(episode_metrics(rows, n_boot, level, seed))
    metrics.update(mode=sim.mode, turns=sim.turns, **extra)
    log.info("%s (%s): %s", label, sim.mode, {k: metrics.get(k) for k in ("ms", "ms_ci", "brier", "delta_brier",
                                                                         "entrenched_share", last_logged)})
    with files.atomic_dir(out_dir) as tmp:
        files.write_jsonl(tmp / "records.jsonl", rows)
        files.write_json(tmp / "metrics.json", metrics)
        files.write_json(tmp / "backend.json", {"backend": cfg.model.backend, **guards})


# ------------------------------------------------------------------ chat episodes (episodes/chat.py)
def _describe(gen) -> JsonObject:
    return gen.describe() if hasattr(gen, "describe") else describe(gen.model)


def run_chat(cfg: SimulateSlice, model: Path, human_model: Path, out_dir: Path) -> None:
    """Episodes between chat models: the human (the run's start model, or simulate.human_model)
    and the instructor (the stage's model, or simulate.instructor_model) on the held-out questions;
    records with transcripts, the eval block, the episode block, parse rates per turn, the
    instructor's own single-agent MS where it is a local model."""

    sim, seed, ep = cfg.simulate, cfg.seed, cfg.prompts.episode
    assert ep is not None, "chat episodes: the prompt set's episode prompts (episode_problem)"
    seed_everything(seed)
    world = make_world(cfg.world)
    _, heldout = world.splits()
    roles = {"human": (human_model, role_model(cfg, "human")), "instructor": (model, role_model(cfg, "instructor"))}
    opened: JsonObject = {}
    try:
        for role, (folder, mcfg) in roles.items():
            twin = next((r for r, (f, c) in roles.items() if r in opened and same_model(c, mcfg)
                         and Path(f).resolve() == Path(folder).resolve() and model_section(mcfg).backend != "api"), None)
            opened[role] = opened[twin] if twin else open_model(folder, mcfg)
        human, instructor = opened["human"], opened["instructor"]
        forced_read = getattr(human, "tokenizer", None) is not None
        prompts = Prompts(cfg.prompts, getattr(human, "tokenizer", None))
        reader = chat.Reader(cfg.elicit.read, prompts.forced_prefix, prompts.forced_min_mass,
                             ep.scale)
        pairs = chat.balanced(heldout, sim.episodes)
        level = sim.lean

        def played(pairs_, seed_):
            eps = chat.setup(pairs_, ep, prompts.fields, sim.mode, level)
            return chat.play(human, instructor, eps, ep, sim, prompts.fields, reader, seed_, assert_spoke).episodes
        episodes = played(pairs, seed)
        negations = played(chat.negated(pairs), seed + NEGATION_OFFSET) if sim.negations else None
        alone: JsonObject = {}
        if sim.mode not in chat.NO_INSTRUCTOR and getattr(instructor, "tokenizer", None) is not None:
            alone = instructor_alone(instructor, human if getattr(human, "tokenizer", None) is not None else instructor,
                                     cfg, [q for q, _ in pairs])
        guards = {"human": _describe(human), "instructor": _describe(instructor),
                  "api": {r: g.stats() for r, g in opened.items() if hasattr(g, "stats")}}
    finally:
        for b in {id(b): b for b in opened.values()}.values():
            b.close()
    rows = chat.records(episodes, seed, negations)
    if reader.prefix and forced_read:      # both reads side by side (metrics.read_metrics)
        for row in rows:
            tv, tf = row["trajectory_verbal"], row["trajectory_forced"]
            row.update(prior_verbal=tv[0], posterior_verbal=tv[-1], stated_verbal=tv[-1],
                       prior_forced=tf[0], posterior_forced=tf[-1], stated_forced=tf[-1])
        for row, e in zip(rows, episodes):
            row.update(prior_forced_mass=e.forced_mass[0], stated_forced_mass=e.forced_mass[-1])
    write_episodes(cfg, rows, seed, {"episode_kind": "chat", **chat.parse_rates(episodes), **alone}, guards,
                   out_dir, "simulate chat", "parse_rate_by_turn")
