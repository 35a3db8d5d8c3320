"""Rollouts: sample reasoned traces (and snap answers) and read each sample's prior and posterior.

``snap`` mode: prior = the stated P of a snap answer (no reasoning), posterior = the stated P of
the reasoned trace — two different functionals (the mode gap). ``samemode``: one trace read by a
judge at ``cut`` of its clues (prior) and at its end (posterior). Every model call goes through
the run's generation backend (model.backend).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..world import traces as fmt
from ..world.synthetic import Question
from .parse import parse_p, parse_totals
from .readers import READERS, ReadContext, get_reader

if TYPE_CHECKING:
    from ..model.backend import Backend
    from ..model.generate import Batch


@dataclass
class Rollout:
    questions: list[Question]
    trace: Batch
    snap: Batch | None
    stated: list[float | None]      # the trace's final P = X
    snap_p: list[float | None]      # the snap answer's P = X (snap mode)
    prior: list[float | None]
    posterior: list[float | None]
    trace_cut: list[float | None]   # belief the trace writes at the cut
    trace_last: list[float | None]  # last belief the trace writes


def cut_index(world, elicit: dict[str, Any]) -> int:
    """The clue count read as the prior in samemode: round(cut · clues)."""
    return int(round(float(elicit.get("cut", 0.5)) * world.n_clues))


def judge_needed(elicit: dict[str, Any]) -> bool:
    """Whether a rollout with this elicit config reads through a judge model: in samemode, when
    its reader (``elicit.judge``) says so; snap mode reads no judge."""
    return elicit["mode"] == "samemode" and get_reader(elicit["judge"]).needs_judge


def probe_prompts(questions: list[Question], n: int = 4, prompts_cfg: dict[str, Any] | None = None,
                  tokenizer: Any = None) -> list[str]:
    """Fixed prompts a backend guard scores (parity, adapter applied): the first n questions' traces."""
    from .prompts import Prompts
    ask = Prompts(prompts_cfg, tokenizer)
    return [ask.reasoned(q) for q in questions[:n]]


def rollout(gen: "Backend", questions: list[Question], ctx: ReadContext, elicit: dict[str, Any],
            seed: int, temperature: float) -> Rollout:
    """Sample each question's trace (and snap answer) with ``gen``; read prior and posterior.
    The prompts are the set ``prompts.name`` (beliefs/prompts.py); the running-total columns
    (trace_cut, trace_last) exist only in the embedded format."""
    from .prompts import Prompts
    world = ctx.world
    ask = Prompts(ctx.config.get("prompts"), getattr(gen, "tokenizer", None))
    trace = gen.sample([ask.reasoned(q) for q in questions], ask.trace_tokens(world.n_clues), temperature, seed)
    texts = [ask.reasoned_text(t) for t in trace.texts]
    trace.texts = texts
    stated = [parse_p(t) for t in texts]
    k = cut_index(world, elicit)
    none: list[float | None] = [None] * len(questions)
    trace_cut, trace_last = none, none
    if ask.embedded:
        trace_cut = READERS["trace"](ctx, questions, texts, k)
        totals = [parse_totals(t) for t in texts]
        trace_last = [fmt.units_to_p(tt[-1], world.unit) if tt and len(tt) > 1 else None for tt in totals]
    snap = None
    snap_p: list[float | None] = none
    if elicit["mode"] == "snap":
        snap = gen.sample([ask.snap(q) for q in questions], ask.snap_tokens(), temperature, seed + 1)
        snap.texts = [ask.snap_text(t) for t in snap.texts]
        snap_p = [parse_p(t) for t in snap.texts]
        prior, posterior = snap_p, stated
    elif elicit["mode"] == "samemode":
        reader = get_reader(elicit["judge"])
        prior = reader(ctx, questions, texts, k)
        posterior = reader(ctx, questions, texts, world.n_clues)
    else:
        raise ValueError(f"elicit.mode: unknown mode {elicit['mode']!r}")
    return Rollout(questions, trace, snap, stated, snap_p, prior, posterior, trace_cut, trace_last)
