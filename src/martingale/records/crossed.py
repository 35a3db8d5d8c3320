"""eval.json's ``crossed`` blocks: for a stage (or a paired effect) read over several seeds, the
covariance of the seeds' estimates under the held-out questions resampled jointly across seeds
(stats/crossed.py), from the per-question records of every seed. FINDINGS.md combines the seeds
with it, so a finding's interval holds the question noise its seeds share.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence, TypeVar

import numpy as np

from ..core.jsonvalue import JsonObject
from ..metrics import StageColumns
from ..metrics import resampled as stat
from ..stats import Block, Record
from ..stats.crossed import QUESTION_STREAM, joint_draws, mean_tails, resample_weights


def _question_ids(*row_lists: list[Record]) -> list[str]:
    """Every question any of the lists holds, in the order first seen."""
    seen: dict[str, None] = {}
    for rows in row_lists:
        for r in rows:
            seen.setdefault(r["qid"], None)
    return list(seen)


def _columns(rows: list[Record], qids: list[str], labels: dict[str, int]) -> StageColumns:
    """One seed's columns on ``qids`` in that order; a question it lacks reads as unparsed (NaN)."""
    by_qid = {r["qid"]: r for r in rows}
    blank = {"stated": None, "prior": None, "posterior": None, "bayes_end": None}
    filled = [{**blank, **by_qid.get(q, {"qid": q, "y": labels[q]})} for q in qids]
    return StageColumns.from_records(filled, 0, 0.95, 0)


def _aligned(row_lists: list[list[Record]]) -> tuple[int, list[StageColumns]]:
    """(n questions, each list's columns on the same questions)."""
    qids = _question_ids(*row_lists)
    labels = {r["qid"]: r["y"] for rows in row_lists for r in rows}
    return len(qids), [_columns(rows, qids, labels) for rows in row_lists]


def _block(draws: Optional[np.ndarray], n: int) -> Optional[Block]:
    """The seeds' question covariance, the quantiles of their mean and the question count."""
    if draws is None:
        return None
    cov = np.atleast_2d(np.cov(draws, rowvar=False, ddof=1))
    return {"cov": [[float(v) for v in row] for row in cov], "n_questions": n, "mean_tails": mean_tails(draws)}


def _finite(values: Sequence[object]) -> bool:
    """A value for every seed, each a finite number (none missing, null or NaN)."""
    return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) for v in values)


RESAMPLES_PER_BOOTSTRAP = 4   # joint resamples per eval.n_bootstrap: the tails of the seeds' mean need more
                              # than one CI's ends (4,000 at the default: their 95% ends to ~1.5%)


def _rng(seeds: list[int]) -> np.random.Generator:
    return np.random.default_rng([QUESTION_STREAM, *seeds])


def stage_crossed(rows: dict[int, list[Record]], metrics: dict[int, JsonObject],
                  n_bootstrap: int) -> dict[str, Block]:
    """{metric: {cov, n_questions, mean_tails}} for each metric of ``metrics.resampled.STAGE`` that every seed
    of the stage has: the k × k covariance of the seeds' values under the questions resampled jointly
    (seeds in sorted order). Empty for one seed."""
    seeds = sorted(rows)
    if len(seeds) < 2:
        return {}
    n, cols = _aligned([rows[s] for s in seeds])
    weights = resample_weights(n, RESAMPLES_PER_BOOTSTRAP * n_bootstrap, _rng(seeds))
    out = {}
    for key, fn in stat.STAGE.items():
        if _finite([metrics[s].get(key) for s in seeds]):
            block = _block(joint_draws(_each(fn, cols), weights), n)
            if block is not None:
                out[key] = block
    return out


def effect_crossed(child: list[list[Record]], parent: list[list[Record]],
                   deltas: dict[str, list[object]], seeds: list[int], n_bootstrap: int) -> dict[str, Block]:
    """{part: {cov, n_questions, mean_tails}} for each part of the paired effect (``brier``, ``ms``) whose every
    seed has a delta: child seed i against its parent's records ``parent[i]`` (the same seed, or the
    parent's replicate), the questions resampled jointly for every seed, child and parent alike."""
    k = len(child)
    if k < 2:
        return {}
    n, cols = _aligned(child + parent)
    weights = resample_weights(n, RESAMPLES_PER_BOOTSTRAP * n_bootstrap, _rng(seeds))
    pairs = list(zip(cols[:k], cols[k:]))
    out = {}
    for part, fn in stat.EFFECT.items():
        if _finite(deltas.get(part, [])):
            block = _block(joint_draws(_each(_paired(fn), pairs), weights), n)
            if block is not None:
                out[part] = block
    return out


Pair = tuple[StageColumns, StageColumns]      # a child seed's columns and its parent's


def _paired(fn: Callable[[StageColumns, StageColumns, np.ndarray], np.ndarray]) -> Callable[[Pair, np.ndarray], np.ndarray]:
    """The effect statistic of a (child, parent) pair under weights w."""
    return lambda pair, w: fn(pair[0], pair[1], w)


Columns = TypeVar("Columns")      # a seed's columns: StageColumns, or a (child, parent) Pair


def _each(fn: Callable[[Columns, np.ndarray], np.ndarray], seeds: list[Columns]) -> Callable[[np.ndarray], np.ndarray]:
    """The B × k statistic: ``fn`` of each seed's columns under the same weights."""
    return lambda w: np.stack([fn(c, w) for c in seeds], axis=1)
