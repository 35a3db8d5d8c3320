"""Rollouts: sample reasoned traces (and snap answers) and read each sample's prior and posterior.

``snap`` mode: prior = the stated P of a snap answer (no reasoning), posterior = the stated P of
the reasoned trace — two different functionals (the mode gap). ``samemode``: one trace read by a
judge at ``cut`` of its clues (prior) and at its end (posterior). Every model call goes through
the run's generation backend (model.backend).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from ..world import traces as fmt
from ..world.synthetic import Question
from .forced import answer_context, forced_reads
from .parse import parse_p, parse_totals
from .prompts import Prompts
from .readers import FORCED_READERS, READERS, ReadContext, get_reader
from .section import ElicitConfig, elicit_section

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ..model.backend import Backend
    from ..model.generate import Batch


@dataclass
class Rollout:
    """One rollout of a batch of questions: the sampled traces, the prior and posterior read from them, the stated P."""
    questions: list[Question]
    trace: Batch
    snap: Batch | None
    stated: list[float | None]      # the trace's final P = X
    snap_p: list[float | None]      # the snap answer's P = X (snap mode)
    prior: list[float | None]
    posterior: list[float | None]
    trace_cut: list[float | None]   # belief the trace writes at the cut
    trace_last: list[float | None]  # last belief the trace writes
    reads: dict[str, list] | None = None   # both reads side by side (beliefs/forced.py), where the
                                           # prompt set has a forced prefix: <x>_verbal, <x>_forced, <x>_forced_mass


READ_COLUMNS = ("prior", "posterior", "stated")


def side_by_side(verbal: dict[str, list], forced: dict[str, list[tuple[float | None, float | None]]],
                 read: str) -> tuple[dict[str, list], dict[str, list]]:
    """(the headline columns prior/posterior/stated of the read ``read``, every column of both
    reads): a run says which read its Brier and MS come from, and keeps the other beside it."""
    cols: dict[str, list] = {}
    for name in READ_COLUMNS:
        cols[f"{name}_verbal"] = verbal[name]
        cols[f"{name}_forced"] = [p for p, _ in forced[name]]
        cols[f"{name}_forced_mass"] = [m for _, m in forced[name]]
    return {name: cols[f"{name}_{read}"] for name in READ_COLUMNS}, cols


def cut_index(world, elicit: object) -> int:
    """The clue count read as the prior in samemode: round(cut · clues)."""
    return int(round(float(elicit_section(elicit).cut) * world.n_clues))


def judge_needed(elicit_cfg: object) -> bool:
    """Whether a rollout with this elicit config reads through a judge model: in samemode, when
    its reader (``elicit.judge``) says so; snap mode reads no judge."""
    elicit = elicit_section(elicit_cfg)
    return elicit.mode == "samemode" and get_reader(elicit.judge).needs_judge


def probe_prompts(questions: list[Question], n: int = 4, prompts_cfg: object = None,
                  tokenizer: Optional[PreTrainedTokenizerBase] = None) -> list[str]:
    """Fixed prompts a backend guard scores (parity, adapter applied): the first n questions' traces."""
    ask = Prompts(prompts_cfg, tokenizer)
    return [ask.reasoned(q) for q in questions[:n]]


def rollout(gen: "Backend", questions: list[Question], ctx: ReadContext, elicit_cfg: object,
            seed: int, temperature: float) -> Rollout:
    """Sample each question's trace (and snap answer) with ``gen``; read prior and posterior.
    The prompts are the set ``prompts.name`` (beliefs/prompts.py); the running-total columns
    (trace_cut, trace_last) exist only in the embedded format."""
    world, elicit = ctx.world, elicit_section(elicit_cfg)
    ask = Prompts(ctx.section("prompts"), getattr(gen, "tokenizer", None))
    reasoned = [ask.reasoned(q) for q in questions]
    trace = gen.sample(reasoned, ask.trace_tokens(world.n_clues), temperature, seed)
    raw = list(trace.texts)
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
    if elicit.mode == "snap":
        snap = gen.sample([ask.snap(q) for q in questions], ask.snap_tokens(), temperature, seed + 1)
        snap.texts = [ask.snap_text(t) for t in snap.texts]
        snap_p = [parse_p(t) for t in snap.texts]
        prior, posterior = snap_p, stated
    elif elicit.mode == "samemode":
        reader = get_reader(elicit.judge)
        prior = reader(ctx, questions, texts, k)
        posterior = reader(ctx, questions, texts, world.n_clues)
    else:
        raise ValueError(f"elicit.mode: unknown mode {elicit.mode!r}")
    reads = None
    if ask.forced_prefix:
        forced = forced_columns(gen, ask, ctx, questions, reasoned, raw, texts, elicit, k, prior, posterior)
        head, reads = side_by_side({"prior": prior, "posterior": posterior, "stated": stated}, forced,
                                   elicit.read)
        prior, posterior, stated = head["prior"], head["posterior"], head["stated"]
    elif elicit.read != "verbal":
        raise ValueError(f"elicit.read={elicit.read}: the prompt set has no prompts.forced_prefix")
    return Rollout(questions, trace, snap, stated, snap_p, prior, posterior, trace_cut, trace_last, reads)


def forced_columns(gen: "Backend", ask, ctx: ReadContext, questions: list[Question], reasoned: list[str],
                   raw: list[str], texts: list[str], elicit: ElicitConfig, k: int,
                   prior: list[float | None], posterior: list[float | None]) -> dict[str, list]:
    """The forced read of each belief, (P, mass): the stated P after the reasoned trace (its own
    answer replaced by the prefix); the prior and posterior as the elicit mode reads them — the snap
    prior read forced right after the snap prompt (no reasoning), a self judge's answers read forced,
    and a reader that asks no model (oracle, trace) the same belief under either read."""
    prefix, floor = ask.forced_prefix, ask.forced_min_mass
    stated = forced_reads(gen, [answer_context(p, c, ask.embedded) for p, c in zip(reasoned, raw)], prefix, floor)
    if elicit.mode == "snap":
        return {"prior": forced_reads(gen, [ask.snap(q) for q in questions], prefix, floor),
                "posterior": stated, "stated": stated}
    forced = FORCED_READERS.get(elicit.judge)
    if forced is None:
        return {"prior": [(p, None) for p in prior], "posterior": [(p, None) for p in posterior], "stated": stated}
    return {"prior": forced(ctx, questions, texts, k), "posterior": forced(ctx, questions, texts, ctx.world.n_clues),
            "stated": stated}
