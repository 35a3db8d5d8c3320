"""eval.json read through types: dataclasses that mirror eval.schema.json (tests/test_typed_records.py
holds each to its definition). ``read_eval`` checks a file against the schema first, so a file of
an older shape is refused in one line naming it (EvalSchemaError), never read half-way."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from ..core.jsonvalue import Json
from .eval_schema import EvalSchemaError, check_eval

Interval = tuple[float, float]


def finite(x: Json) -> Optional[float]:
    """A JSON value as a finite float; None for null, NaN, ±inf, a bool or a non-number."""
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if ok else None


def interval(x: Json) -> Optional[Interval]:
    """A JSON [low, high] of finite numbers as a tuple; None for anything else."""
    if isinstance(x, (list, tuple)) and len(x) == 2:
        lo, hi = finite(x[0]), finite(x[1])
        if lo is not None and hi is not None:
            return lo, hi
    return None


@dataclass(frozen=True)
class Count:
    """k of n seeds (definitions/count)."""
    k: int
    n: int


@dataclass(frozen=True)
class Spread:
    """A numeric metric over the seeds (definitions/spread): mean, sd (None for one seed), each seed's."""
    mean: Optional[float]
    sd: Optional[float]
    per_seed: list[Optional[float]]


@dataclass(frozen=True)
class SeedList:
    """A non-numeric metric over the seeds (definitions/seed_list): each seed's value as written."""
    per_seed: list[Json]


Metric = Union[Spread, SeedList]


@dataclass(frozen=True)
class QuestionCov:
    """The seeds' question covariance (definitions/question_cov, records/crossed.py)."""
    cov: list[list[Optional[float]]]
    n_questions: int
    mean_tails: Optional[list[list[Optional[float]]]] = None

    def finite_cov(self, k: int) -> Optional[list[list[float]]]:
        """The k × k covariance when every cell is a finite number (else None)."""
        rows = [[finite(v) for v in row] for row in self.cov]
        if len(rows) != k or any(len(row) != k or None in row for row in rows):
            return None
        return [[float(v or 0.0) for v in row] for row in rows]

    def finite_tails(self) -> Optional[list[list[float]]]:
        """The tails [p, lo, hi] when there are some and each is finite numbers (else None)."""
        rows = [[finite(v) for v in row] for row in self.mean_tails or []]
        if not rows or any(len(row) != 3 or None in row for row in rows):
            return None
        return [[float(v or 0.0) for v in row] for row in rows]


@dataclass(frozen=True)
class Part:
    """One part (brier or ms) of a seed's paired effect (definitions/part): Δ, its CI and tests."""
    delta: Optional[float]
    ci: list[Optional[float]]
    n: Optional[int] = None
    child: Optional[float] = None
    parent: Optional[float] = None
    t: Optional[float] = None
    p_t: Optional[float] = None
    wilcoxon: Optional[float] = None
    p_wilcoxon: Optional[float] = None
    share_child_wins: Optional[float] = None
    share_ties: Optional[float] = None
    p_perm: Optional[float] = None
    undefined: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SeedEffect:
    """One seed's paired effect against the parent (definitions/seed_effect)."""
    stage: str
    parent_stage: str
    same_eval_stage: bool
    brier: Part
    ms: Part
    parent_seed: Optional[int] = None
    n_child: Optional[int] = None
    n_parent: Optional[int] = None
    n_paired: Optional[int] = None
    undefined: dict[str, str] = field(default_factory=dict)

    def part(self, name: str) -> Part:
        """``brier`` or ``ms``."""
        return self.brier if name == "brier" else self.ms


@dataclass(frozen=True)
class Effect:
    """A stage's paired effect over its seeds (definitions/effect): each seed's, their spread, counts."""
    stage: str
    parent_stage: str
    same_eval_stage: bool
    seeds: list[int]
    per_seed: dict[int, SeedEffect]
    brier_delta: Spread
    ms_delta: Spread
    beats_parent: Optional[Count]
    beats_parent_ci: Optional[Count]
    crossed: dict[str, QuestionCov] = field(default_factory=dict)

    def blocks(self) -> list[tuple[int, SeedEffect]]:
        """(seed, its effect), by seed."""
        return sorted(self.per_seed.items())


@dataclass(frozen=True)
class RunEffect:
    """eval.json's ``effect`` (definitions/run_effect): the knob's, final against the parent's final."""
    parent: Optional[str]
    knob: Optional[str]
    compares: Optional[str]
    final: Optional[Effect]
    headline: Optional[dict[str, Json]]


@dataclass(frozen=True)
class Stage:
    """A stage over its seeds (definitions/stage); ``metrics`` holds its additionalProperties."""
    seeds: list[int]
    metrics: dict[str, Metric]
    counts: dict[str, Optional[Count]] = field(default_factory=dict)
    crossed: dict[str, QuestionCov] = field(default_factory=dict)
    effect: Optional[Effect] = None

    def values(self, key: str) -> list[Json]:
        """Each seed's value of a metric ([] where the stage has none)."""
        metric = self.metrics.get(key)
        return list(metric.per_seed) if metric is not None else []


@dataclass(frozen=True)
class EvalIds:
    """The model stage a seed's evaluation read and the eval stage itself (provenance)."""
    model_stage: str
    eval_stage: str


@dataclass(frozen=True)
class EvalRecord:
    """results/<run>/eval.json."""
    run_id: str
    parent: Optional[str]
    knob: Optional[str]
    config_hash: str
    seeds: list[int]
    stage_order: list[str]
    stages: dict[str, Stage]
    provenance: dict[str, dict[str, EvalIds]]
    stage_provenance: dict[str, dict[str, Json]]
    effect: Optional[RunEffect]
    transcripts: dict[str, list[dict[str, Json]]] = field(default_factory=dict)

    @property
    def final(self) -> str:
        """The run's last stage."""
        return self.stage_order[-1]

    def effect_at(self, stage: str) -> Optional[Effect]:
        """The paired effect of ``stage`` against the parent: effect.final when it is that stage
        (the run's final against the parent's final), else the stage's own same-named effect."""
        final = self.effect.final if self.effect is not None else None
        if final is not None and final.stage == stage:
            return final
        block = self.stages.get(stage)
        return block.effect if block is not None else None

    def model_kinds(self, stage: Optional[str]) -> set[str]:
        """The kinds of the models evaluated at ``stage`` (their stage ids are ``<kind>-<hash>``)."""
        return {ids.model_stage.split("-")[0] for ids in self.provenance.get(stage or "", {}).values()}


def _count(d: Json) -> Optional[Count]:
    return None if d is None else Count(int(d["k"]), int(d["n"]))


def _spread(d: Json) -> Spread:
    return Spread(d["mean"], d["sd"], list(d["per_seed"]))


def _metric(d: Json) -> Metric:
    return _spread(d) if "mean" in d else SeedList(list(d["per_seed"]))


def _crossed(d: Json) -> dict[str, QuestionCov]:
    return {k: QuestionCov(v["cov"], int(v["n_questions"]), v.get("mean_tails")) for k, v in (d or {}).items()}


_PART_EXTRA = ("n", "child", "parent", "t", "p_t", "wilcoxon", "p_wilcoxon", "share_child_wins", "share_ties",
               "p_perm")


def _part(d: Json) -> Part:
    return Part(d["delta"], list(d["ci"]), **{k: d[k] for k in _PART_EXTRA if k in d},
                undefined=dict(d.get("undefined") or {}))


def _seed_effect(d: Json) -> SeedEffect:
    ns = {k: d[k] for k in ("parent_seed", "n_child", "n_parent", "n_paired") if k in d}
    return SeedEffect(d["stage"], d["parent_stage"], bool(d["same_eval_stage"]), _part(d["brier"]), _part(d["ms"]),
                      **ns, undefined=dict(d.get("undefined") or {}))


def _effect(d: Json) -> Effect:
    return Effect(d["stage"], d["parent_stage"], bool(d["same_eval_stage"]), [int(s) for s in d["seeds"]],
                  {int(s): _seed_effect(b) for s, b in d["per_seed"].items()}, _spread(d["brier_delta"]),
                  _spread(d["ms_delta"]), _count(d["beats_parent"]), _count(d["beats_parent_ci"]),
                  _crossed(d.get("crossed")))


_STAGE_KEYS = ("seeds", "counts", "crossed", "effect")


def _stage(d: Json) -> Stage:
    return Stage([int(s) for s in d["seeds"]], {k: _metric(v) for k, v in d.items() if k not in _STAGE_KEYS},
                 {k: _count(v) for k, v in (d.get("counts") or {}).items()}, _crossed(d.get("crossed")),
                 _effect(d["effect"]) if "effect" in d else None)


def _run_effect(d: Json) -> Optional[RunEffect]:
    if d is None:
        return None
    return RunEffect(d["parent"], d["knob"], d["compares"], _effect(d["final"]) if d["final"] is not None else None,
                     d["headline"])


def eval_record(data: Json, where: str = "eval.json") -> EvalRecord:
    """eval.json's parsed JSON as an EvalRecord, checked against the schema first (EvalSchemaError
    naming ``where`` and the first violation)."""
    check_eval(data, where)
    return EvalRecord(
        run_id=data["run_id"], parent=data["parent"], knob=data["knob"], config_hash=data["config_hash"],
        seeds=[int(s) for s in data["seeds"]], stage_order=list(data["stage_order"]),
        stages={name: _stage(block) for name, block in data["stages"].items()},
        provenance={st: {seed: EvalIds(ids["model_stage"], ids["eval_stage"]) for seed, ids in by_seed.items()}
                    for st, by_seed in data["provenance"].items()},
        stage_provenance=dict(data["stage_provenance"]), effect=_run_effect(data["effect"]),
        transcripts=dict(data.get("transcripts") or {}))


def read_eval(path: Path | str, where: Optional[str] = None) -> EvalRecord:
    """results/<run>/eval.json as an EvalRecord; one that is not JSON or breaks the schema (an older
    shape) raises EvalSchemaError, one line naming ``where`` (default: the path)."""
    where = where or str(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise EvalSchemaError(f"{where}: unreadable (not a JSON object)") from None
    if not isinstance(data, dict):
        raise EvalSchemaError(f"{where}: unreadable (not a JSON object)")
    return eval_record(data, where)


__all__ = ["Count", "Effect", "EvalIds", "EvalRecord", "EvalSchemaError", "Metric", "Part", "QuestionCov",
           "RunEffect", "SeedEffect", "SeedList", "Spread", "Stage", "eval_record", "finite", "interval",
           "read_eval"]
