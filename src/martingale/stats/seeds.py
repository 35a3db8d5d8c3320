"""A value over seeds, in the one shape eval.json writes it, and each seed's read back.

A metric over k > 1 seeds is ``{mean, sd, per_seed: [v₁ … v_k]}`` (seed_spread; a non-numeric
one ``{per_seed: [...]}``); a paired effect over k > 1 seeds keeps each seed's block under
``per_seed: {seed: block}`` beside its spread (with_seed_blocks). One seed: the value, or the
block, itself. Readers never branch on the shape: seed_values and seed_blocks give every seed's
whatever k is. The one module that knows the key.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from . import nan_array

PER_SEED = "per_seed"


def seed_spread(values: Sequence[Any]) -> dict[str, Any]:
    """Across seeds: mean, sd (ddof 1; NaN for one seed) and each seed's value (None where it has
    none). One rule: a seed without a value makes mean and sd NaN, never a spread over the seeds
    that happened to give one passing for the run's."""
    arr = nan_array(values)
    whole = len(arr) > 0 and not np.isnan(arr).any()
    return {"mean": float(np.mean(arr)) if whole else float("nan"),
            "sd": float(np.std(arr, ddof=1)) if whole and len(arr) > 1 else float("nan"),
            PER_SEED: [None if np.isnan(v) else float(v) for v in arr]}


def combine_seeds(per_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """A stage's metrics over its seeds: one seed's as they are; several, ``seeds`` and every
    numeric metric as its seed_spread (NaN where a seed has none), any other as its seeds' list."""
    if len(per_seed) == 1:
        return dict(next(iter(per_seed.values())))
    seeds = sorted(per_seed)
    keys = sorted(set().union(*(m.keys() for m in per_seed.values())))
    out: dict[str, Any] = {"seeds": seeds}
    for key in keys:
        values = [per_seed[s].get(key) for s in seeds]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            out[key] = seed_spread(values)
        else:
            out[key] = {PER_SEED: values}
    return out


def is_spread(value: Any) -> bool:
    """Whether a metric's value is several seeds' (``{…, per_seed: [...]}``)."""
    return isinstance(value, dict) and isinstance(value.get(PER_SEED), list)


def seed_values(value: Any) -> list[Any]:
    """A metric's value per seed: several seeds' list, else ``[value]``."""
    return list(value[PER_SEED]) if is_spread(value) else [value]


def with_seed_blocks(blocks: dict[int, dict[str, Any]], **rest: Any) -> dict[str, Any]:
    """A paired effect over several seeds: each seed's block (by seed, as a string key) and ``rest``."""
    return {PER_SEED: {str(s): b for s, b in blocks.items()}, **rest}


def has_seed_blocks(effect: Any) -> bool:
    """Whether a paired effect is several seeds' (with_seed_blocks)."""
    return isinstance(effect, dict) and isinstance(effect.get(PER_SEED), dict)


def seed_blocks(effect: dict[str, Any]) -> list[tuple[Optional[int], dict[str, Any]]]:
    """A paired effect's (seed, block) per seed, by seed; one seed's: ``[(None, effect)]``."""
    if not has_seed_blocks(effect):
        return [(None, effect)]
    return sorted(((int(s) if str(s).isdigit() else 0, b) for s, b in effect[PER_SEED].items()),
                  key=lambda sb: sb[0])
