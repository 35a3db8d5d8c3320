"""What a finding reads from eval.json: its stage (``final`` resolved), each seed's value and CI, the
seeds' question covariance (``crossed``), whether its model was trained, and a seed count —
a ``Result`` with no verdict yet, or one that says why there is nothing to read."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from ..records.eval_record import Count, Effect, EvalRecord, QuestionCov, finite, interval
from ..stages import kinds
from ..stats.replicates import Combined
from ..stats.verdicts import INCONCLUSIVE, NO_RESULT, judge_count
from .finding_spec import COUNTS, EFFECTS, Finding

if TYPE_CHECKING:
    from .looks import Look
    from .rows import Row

Sample = tuple[Optional[int], Optional[float], Optional[tuple[float, float]]]   # (seed, value, CI)


@dataclass
class Result:
    """A finding's number, its seeds combined, p, q and verdict."""
    verdict: str
    detail: str = ""                         # the run's state, the seed counts, what is missing
    stage: Optional[str] = None              # the stage read (final resolved)
    compares: Optional[str] = None           # an effect: "s1 vs parent s0"
    samples: tuple[Sample, ...] = ()         # (seed or None, value, ci) per seed
    trained: bool = False                    # its model (an effect: child's or parent's) was trained
    combined: Optional[Combined] = None      # the seeds combined (one seed: its own estimate)
    p: Optional[float] = None
    q: Optional[float] = None
    needed: Optional[int] = None             # seeds to decide at the current estimate
    needed_is_bound: bool = False            # one seed: the spread is unknown, ``needed`` a lower bound
    questions_needed: Optional[int] = None   # held-out questions to decide with today's seeds (crossed)
    question_cov: Optional[QuestionCov] = None   # eval.json's crossed block the seeds were combined with
    look: Optional[Look] = None              # the look read (table/looks.Look): conf/decide.yaml's plan
    stopped: Optional[str] = None            # why no later look is taken (futility, the last look)
    count: Optional[Count] = None            # a seed-count finding's k of n seeds


def _question_cov(evals: EvalRecord, f: Finding, stage: str) -> Optional[QuestionCov]:
    """The ``crossed`` block of the finding's metric at ``stage`` (records/crossed.py): the seeds'
    question covariance and its question count; None where eval.json has none."""
    if f.metric in EFFECTS:
        eff = evals.effect_at(stage)
        return eff.crossed.get(f.metric.split(".")[1]) if eff is not None else None
    block = evals.stages.get(stage)
    return block.crossed.get(f.metric) if block is not None else None


def _effect_samples(eff: Effect, part: str) -> list[Sample]:
    return [(s, finite(b.part(part).delta), interval(b.part(part).ci)) for s, b in eff.blocks()]


def _samples(evals: EvalRecord, f: Finding, stage: str) -> tuple[list[Sample], Optional[str], str]:
    """(samples, compares, why-missing): one (seed, value, ci) per seed of the stage."""
    if f.metric in EFFECTS:
        eff = evals.effect_at(stage)
        if eff is None:
            return [], None, f"no effect against the parent at {stage} in eval.json"
        compares = f"{eff.stage} vs parent {eff.parent_stage}"
        return _effect_samples(eff, f.metric.split(".")[1]), compares, f"no {f.metric} with a CI"
    block = evals.stages.get(stage)
    if block is None:
        return [], None, f"no stage {stage} in eval.json"
    if f.metric not in block.metrics:
        return [(None, None, None)], None, f"no {f.metric} with {f.metric}_ci"
    values, cis = block.values(f.metric), block.values(f"{f.metric}_ci")
    return [(seed, finite(v), interval(cis[i] if i < len(cis) else None))
            for i, (seed, v) in enumerate(zip(block.seeds, values))], None, f"no {f.metric} with a CI"


def trained_kinds() -> frozenset[str]:
    """The stage kinds whose model is trained for the run (distill, train, instructor): every kind
    that takes gradient steps except a source (the pretrained base is the world's fixed model)."""
    return frozenset(k.name for k in kinds().values() if k.trains and k.place != "source")


def _trained_at(evals: Optional[EvalRecord], stage: Optional[str]) -> bool:
    """Whether eval.json's ``provenance`` says the model evaluated at ``stage`` came out of a
    trained kind (its stage id is ``<kind>-<hash>``)."""
    return evals is not None and bool(evals.model_kinds(stage) & trained_kinds())


def _count(evals: EvalRecord, f: Finding, stage: str) -> Result:
    """A seed-count finding: the stage's ``counts.<name>``, k of n seeds, and its verdict."""
    block = evals.stages.get(stage)
    value = block.counts.get(f.metric.split(".", 1)[1]) if block is not None else None
    if value is None:
        return Result(NO_RESULT, f"no {f.metric} at {stage} in eval.json", stage)
    return Result(judge_count(f.expect, value.k, value.n), "", stage, count=value)


def _measure(f: Finding, row: Row, evals: Optional[EvalRecord], parent_evals: Optional[EvalRecord]) -> Result:
    """One run's reading of the finding (no verdict yet): its stage, the seeds' samples, whether it
    is trained, and in ``combined`` nothing; a Result with a reason where there is nothing to read."""
    if row["state"] != "done":
        return Result(NO_RESULT, f"{row['run_id']} is {row['state']}")
    if evals is None:
        return Result(NO_RESULT, "eval.json unreadable")
    stage = evals.final if f.stage == "final" else f.stage
    if f.metric in COUNTS:
        return _count(evals, f, stage)
    samples, compares, missing = _samples(evals, f, stage)
    trained = _trained_at(evals, stage)
    if f.metric in EFFECTS and not trained:
        eff = evals.effect_at(stage)
        trained = _trained_at(parent_evals, eff.parent_stage if eff is not None else None)
    out = Result(NO_RESULT, missing, stage, compares, tuple(samples), trained)
    known = [(v, ci) for _, v, ci in samples if v is not None and ci is not None]
    if known and len(known) < len(samples):
        out.detail = f"{len(samples) - len(known)} of {len(samples)} seeds without a CI"
    elif known:
        out.verdict = INCONCLUSIVE          # readable: the verdict is decided by ``result``
        out.question_cov = _question_cov(evals, f, stage)
    return out
