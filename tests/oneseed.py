"""A one-seed run's eval.json read in tests: each metric's value and the paired effect's block,
from the one shape eval.json has whatever the seed count (martingale.stats.seeds)."""
from __future__ import annotations

from typing import Any

from martingale.stats.seeds import is_spread, only_block, only_seed


def metrics(stage: dict[str, Any]) -> dict[str, Any]:
    """A one-seed stage block's metrics as that seed's values (counts, crossed, effect as they are)."""
    return {k: only_seed(v) if is_spread(v) else v for k, v in stage.items()}


def effect(eff: dict[str, Any]) -> dict[str, Any]:
    """A one-seed paired effect's block: its own n_paired, brier and ms with CI and p."""
    block = only_block(eff)
    assert block is not None, f"not one seed's effect: seeds {eff.get('seeds')}"
    return block
