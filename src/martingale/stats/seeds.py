"""A value over seeds, in the one shape eval.json writes it whatever the seed count, and each
seed's read back.

A numeric metric over k ≥ 1 seeds is ``{mean, sd, per_seed: [v₁ … v_k]}`` (seed_spread; sd null
for one seed), any other ``{per_seed: [...]}``; a paired effect keeps each seed's block under
``per_seed: {seed: block}`` beside its spread (with_seed_blocks). seed_values and seed_blocks give
every seed's of what the aggregate holds in memory; only_seed a one-seed value itself. The module
that writes the key (records/eval_record.py reads a written eval.json through types).
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence, TypedDict, TypeGuard

import numpy as np

from ..core.jsonvalue import Json, JsonObject
from . import Block, nan_array

PER_SEED = "per_seed"


class SeedSpread(TypedDict):
    """A numeric metric over seeds as seed_spread writes it."""
    mean: float
    sd: float
    per_seed: list[float | None]


def seed_spread(values: Sequence[float | None]) -> SeedSpread:
    """Across seeds: mean, sd (ddof 1; NaN for one seed) and each seed's value as it was (None
    where it has none). One rule: a seed without a value makes mean and sd NaN, never a spread over the seeds
    that happened to give one passing for the run's."""
    arr = nan_array(values)
    whole = len(arr) > 0 and not np.isnan(arr).any()
    return {"mean": float(np.mean(arr)) if whole else float("nan"),
            "sd": float(np.std(arr, ddof=1)) if whole and len(arr) > 1 else float("nan"),
            "per_seed": [None if np.isnan(a) else v for a, v in zip(arr, values)]}   # each seed's as written


def combine_seeds(per_seed: Mapping[int, JsonObject]) -> Block:
    """A stage's metrics over its seeds (one or several): ``seeds`` and every numeric metric as
    its seed_spread (NaN where a seed has none), any other as its seeds' list."""
    seeds = sorted(per_seed)
    keys = sorted(set().union(*(m.keys() for m in per_seed.values())))
    out: Block = {"seeds": seeds}
    for key in keys:
        values = [per_seed[s].get(key) for s in seeds]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            out[key] = seed_spread(values)
        else:
            out[key] = {PER_SEED: values}
    return out


def is_spread(value: object) -> TypeGuard[JsonObject]:
    """Whether a value is a metric over seeds (``{…, per_seed: [...]}``)."""
    return isinstance(value, dict) and isinstance(value.get(PER_SEED), list)


def seed_values(value: Mapping[str, Json]) -> list[Json]:
    """A metric's value per seed."""
    return list(value[PER_SEED])


def only_seed(value: object) -> Json:
    """A metric over one seed: that seed's value; over several, or not a metric over seeds: None."""
    values = seed_values(value) if is_spread(value) else []
    return values[0] if len(values) == 1 else None


def with_seed_blocks(blocks: Mapping[int, Block], **rest: object) -> Block:
    """A paired effect over its seeds: each seed's block (by seed, as a string key) and ``rest``."""
    return {PER_SEED: {str(s): b for s, b in blocks.items()}, **rest}


def only_block(effect: Mapping[str, Json]) -> Optional[JsonObject]:
    """A paired effect over one seed: that seed's block (its own CI and p); over several: None."""
    blocks = seed_blocks(effect)
    return blocks[0][1] if len(blocks) == 1 else None


def seed_blocks(effect: Mapping[str, Json]) -> list[tuple[int, JsonObject]]:
    """A paired effect's (seed, block) per seed, by seed."""
    return sorted(((int(s), b) for s, b in effect[PER_SEED].items()), key=lambda sb: sb[0])


def combined_values(stage: Mapping[str, Json]) -> dict[str, Json]:
    """A stage block's metrics, one value each: a numeric metric's mean over its seeds, a
    non-numeric one's value where one seed has it (several seeds' are left out); blocks (counts,
    crossed, effect) and ``seeds`` are left out. What a tracker logs as one step."""
    out: dict[str, Json] = {}
    for key, value in stage.items():
        if not is_spread(value):
            continue
        one = only_seed(value)
        if "mean" in value:
            out[key] = value["mean"]
        elif not isinstance(one, (dict, type(None))):
            out[key] = one
    return out
