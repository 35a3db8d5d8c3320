"""What a finding reads from eval.json: its stage (``final`` resolved), each seed's value and CI, the
seeds' question covariance (``crossed``), whether its model was trained, and a seed count —
a ``Result`` with no verdict yet, or one that says why there is nothing to read."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from ..stages import kinds
from ..stats.replicates import Combined
from ..stats.seeds import is_spread, seed_blocks, seed_values
from ..stats.verdicts import INCONCLUSIVE, NO_RESULT, judge_count
from .finding_spec import COUNTS, EFFECTS, Finding


def _number(x: Any) -> Optional[float]:
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if ok else None


def _interval(x: Any) -> Optional[tuple[float, float]]:
    if isinstance(x, (list, tuple)) and len(x) == 2:
        lo, hi = _number(x[0]), _number(x[1])
        if lo is not None and hi is not None:
            return lo, hi
    return None


@dataclass
class Result:
    """A finding's number, its seeds combined, p, q and verdict."""
    verdict: str
    detail: str = ""                         # the run's state, the seed counts, what is missing
    stage: Optional[str] = None              # the stage read (final resolved)
    compares: Optional[str] = None           # an effect: "s1 vs parent s0"
    samples: tuple = ()                      # (seed or None, value, ci) per seed
    trained: bool = False                    # its model (an effect: child's or parent's) was trained
    combined: Optional[Combined] = None      # the seeds combined (one seed: its own estimate)
    p: Optional[float] = None
    q: Optional[float] = None
    needed: Optional[int] = None             # seeds to decide at the current estimate
    needed_is_bound: bool = False            # one seed: the spread is unknown, ``needed`` a lower bound
    questions_needed: Optional[int] = None   # held-out questions to decide with today's seeds (crossed)
    question_cov: Optional[dict] = None      # eval.json's crossed block the seeds were combined with
    look: Optional[Any] = None               # the look read (table/looks.Look): conf/decide.yaml's plan
    stopped: Optional[str] = None            # why no later look is taken (futility, the last look)


def _final(evals: dict) -> Optional[str]:
    order = evals.get("stage_order") or list(evals.get("stages") or {})
    return str(order[-1]) if order else None


def _effect_block(evals: dict, stage: str) -> Optional[dict]:
    """The paired effect of the run's ``stage`` against its parent: effect.final when it is that
    stage (its final against the parent's final), else the stage's own same-named effect."""
    final = (evals.get("effect") or {}).get("final")
    if isinstance(final, dict) and final.get("stage") == stage:
        return final
    block = (evals.get("stages") or {}).get(stage)
    eff = block.get("effect") if isinstance(block, dict) else None
    return eff if isinstance(eff, dict) else None


def _question_cov(evals: dict, f: Finding, stage: str) -> Optional[dict]:
    """The ``crossed`` block of the finding's metric at ``stage`` (records/crossed.py): the seeds'
    question covariance and its question count; None where eval.json has none."""
    if f.metric in EFFECTS:
        block = (_effect_block(evals, stage) or {}).get("crossed")
        key = f.metric.split(".")[1]
    else:
        block = ((evals.get("stages") or {}).get(stage) or {}).get("crossed")
        key = f.metric
    found = (block or {}).get(key) if isinstance(block, dict) else None
    return found if isinstance(found, dict) else None


def _valid_cov(cov: Any, k: int) -> bool:
    return isinstance(cov, list) and len(cov) == k and all(
        isinstance(row, list) and len(row) == k and all(_number(v) is not None for v in row) for row in cov)


def _samples(evals: dict, f: Finding, stage: str) -> tuple[list[tuple], Optional[str], str]:
    """(samples, compares, why-missing): one (seed, value, ci) per seed of the stage."""
    if f.metric in EFFECTS:
        eff, part = _effect_block(evals, stage), f.metric.split(".")[1]
        if eff is None:
            return [], None, f"no effect against the parent at {stage} in eval.json"
        compares = f"{eff.get('stage')} vs parent {eff.get('parent_stage')}"
        return [(s, _number((b.get(part) or {}).get("delta")), _interval((b.get(part) or {}).get("ci")))
                for s, b in seed_blocks(eff)], compares, f"no {f.metric} with a CI"
    block = (evals.get("stages") or {}).get(stage)
    if not isinstance(block, dict):
        return [], None, f"no stage {stage} in eval.json"
    value, ci = block.get(f.metric), block.get(f"{f.metric}_ci")
    if is_spread(value):                            # several seeds (stats.seeds)
        values = seed_values(value)
        cis = seed_values(ci) if is_spread(ci) else []
        seeds = block.get("seeds") or list(range(len(values)))
        return [(seeds[i] if i < len(seeds) else i, _number(v), _interval(cis[i] if i < len(cis) else None))
                for i, v in enumerate(values)], None, f"no {f.metric} with a CI"
    return [(None, _number(value), _interval(ci))], None, f"no {f.metric} with {f.metric}_ci"


def trained_kinds() -> frozenset[str]:
    """The stage kinds whose model is trained for the run (distill, train, instructor): every kind
    that takes gradient steps except a source (the pretrained base is the world's fixed model)."""
    return frozenset(k.name for k in kinds().values() if k.trains and k.place != "source")


def _trained_at(evals: Any, stage: Optional[str]) -> bool:
    """Whether eval.json's ``provenance`` says the model evaluated at ``stage`` came out of a
    trained kind (its stage id is ``<kind>-<hash>``)."""
    by_seed = ((evals or {}).get("provenance") or {}).get(stage) if isinstance(evals, dict) else None
    kinds_seen = {str(v.get("model_stage") or "").split("-")[0] for v in (by_seed or {}).values()
                  if isinstance(v, dict)}
    return bool(kinds_seen & trained_kinds())


def _count(evals: dict, f: Finding, stage: str) -> Result:
    """A seed-count finding: the stage's ``counts.<name>``, k of n seeds, and its verdict."""
    block = (evals.get("stages") or {}).get(stage)
    value = ((block or {}).get("counts") or {}).get(f.metric.split(".", 1)[1]) if isinstance(block, dict) else None
    if not isinstance(value, dict) or not value.get("n"):
        return Result(NO_RESULT, f"no {f.metric} at {stage} in eval.json", stage)
    k, n = int(value["k"]), int(value["n"])
    return Result(judge_count(f.expect, k, n), "", stage, None, ((None, f"{k}/{n}", None),))


def _measure(f: Finding, row: dict, evals: Any, parent_evals: Any) -> Result:
    """One run's reading of the finding (no verdict yet): its stage, the seeds' samples, whether it
    is trained, and in ``combined`` nothing; a Result with a reason where there is nothing to read."""
    if row["state"] != "done":
        return Result(NO_RESULT, f"{row['run_id']} is {row['state']}")
    if not isinstance(evals, dict):
        return Result(NO_RESULT, "eval.json unreadable")
    stage = _final(evals) if f.stage == "final" else f.stage
    if stage is None:
        return Result(NO_RESULT, "eval.json has no stage")
    if f.metric in COUNTS:
        return _count(evals, f, stage)
    samples, compares, missing = _samples(evals, f, stage)
    trained = _trained_at(evals, stage)
    if f.metric in EFFECTS and not trained:
        eff = _effect_block(evals, stage) or {}
        trained = _trained_at(parent_evals, eff.get("parent_stage"))
    out = Result(NO_RESULT, missing, stage, compares, tuple(samples), trained)
    known = [(v, ci) for _, v, ci in samples if v is not None and ci is not None]
    if known and len(known) < len(samples):
        out.detail = f"{len(samples) - len(known)} of {len(samples)} seeds without a CI"
    elif known:
        out.verdict = INCONCLUSIVE          # readable: the verdict is decided by ``result``
        out.question_cov = _question_cov(evals, f, stage)
    return out
