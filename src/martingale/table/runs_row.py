"""runs.json read through types: a row is a TypedDict that mirrors runs.schema.json's ``run``
(tests/test_typed_records.py holds each to its definition), so the rows stay the JSON objects the
page, RUNS.md and the CLI read, and every key they read is checked. ``read_rows`` checks a file
against the schema first."""

import json
from pathlib import Path
from typing import NotRequired, Optional, TypedDict, cast

from ..core.jsonvalue import Json
from .schema import check_rows


class Seeded(TypedDict):
    """A metric over the seeds that reached the stage, one shape whatever their count: mean and sd
    (null for one seed, or where a seed has no number) and each seed's value as eval.json has it (a
    CI's: [lo, hi])."""
    mean: Optional[float]
    sd: Optional[float]
    per_seed: list[Json]


def one_seed(m: Seeded) -> tuple[bool, Json]:
    """(whether the metric is one seed's, that seed's value; None for several)."""
    values = m["per_seed"]
    return (True, values[0]) if len(values) == 1 else (False, None)


class Count(TypedDict):
    """k of n seeds."""
    k: int
    n: int


class RowEffect(TypedDict, total=False):
    """The knob's paired effect (eval.json's effect.headline): one seed's CI and p, or several
    seeds' spread and counts."""
    stage: Optional[str]
    parent_stage: Optional[str]
    compares: Optional[str]
    n_paired: Optional[int]
    brier_delta: Optional[float]
    brier_ci: Optional[list[Optional[float]]]
    p_t: Optional[float]
    p_wilcoxon: Optional[float]
    share_child_wins: Optional[float]
    ms_delta: Optional[float]
    ms_ci: Optional[list[Optional[float]]]
    p_perm_ms: Optional[float]
    seeds: list[int]
    brier_delta_sd: Optional[float]
    ms_delta_sd: Optional[float]
    beats_parent: Optional[Count]
    beats_parent_ci: Optional[Count]


class Provenance(TypedDict):
    """What the run's stages ran with (store/provenance.py summary)."""
    versions: dict[str, Json]
    weights_sha256: dict[str, dict[str, Json]]


class Artifacts(TypedDict):
    """The run's files: results/<run>/{eval,records,config,lineage}, plots, its stage folders."""
    eval: NotRequired[str]
    records: NotRequired[str]
    config: NotRequired[str]
    lineage: NotRequired[str]
    plots: list[str]
    stages: list[str]


class Wandb(TypedDict):
    """Where a tracker files the run."""
    name: str
    group: Optional[str]
    project: str


class Row(TypedDict):
    """One row of runs.json (runs.schema.json's ``run``)."""
    run_id: str
    parent: Optional[str]
    knob: Optional[str]
    question: Optional[str]
    claims: list[str]
    owner: Optional[str]
    verdict: Optional[str]
    invalid: Optional[str]
    state: str
    built_knob: NotRequired[Optional[str]]
    log: Optional[str]
    model: Optional[str]
    start: Optional[str]
    elicit: Optional[str]
    needs: list[str]
    stage_chain: Optional[list[str]]
    stage: Optional[str]
    metrics: dict[str, Seeded]
    effect: Optional[RowEffect]
    provenance: Optional[Provenance]
    seeds: Optional[list[int]]
    replicates: int
    landed: Optional[str]
    artifacts: Artifacts
    wandb: Wandb
    config_hash: Optional[str]


class RowsError(ValueError):
    """A runs.json that is not JSON or breaks its schema: str() is one line naming the file."""


def read_rows(path: Path | str) -> list[Row]:
    """runs.json's rows, checked against runs.schema.json (RowsError naming the file otherwise)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise RowsError(f"{path}: unreadable (not JSON)") from None
    if errors := check_rows(data):
        raise RowsError(f"{path}: {errors[0][:300]}")
    return cast(list[Row], data)


__all__ = ["Artifacts", "Count", "Provenance", "Row", "RowEffect", "RowsError", "Seeded", "Wandb", "one_seed", "read_rows"]
