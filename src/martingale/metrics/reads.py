"""Both reads side by side (beliefs/forced.py): the verbal `P = X` and the forced next-token read."""
from __future__ import annotations

import numpy as np

from ..core.lazy import module
from ..stats import Block, Record, nan_array
from .core import DECLARED, StageColumns, put

stats = module("scipy.stats")   # imported on first use (martingale.core.lazy)

READ_KEYS = ("parse_rate", "n_pairs", "brier", "brier_ci", "mean_p", "ms", "ms_ci", "rho", "sigma_ratio")


def _mean_of(values: list[float | None]) -> float:
    arr = nan_array(values)
    return float(np.nanmean(arr)) if np.isfinite(arr).any() else float("nan")


def read_metrics(records: list[Record], n_bootstrap: int, level: float, seed: int,
                 undefined: dict[str, str] | None = None) -> Block:
    """Both reads side by side (beliefs/forced.py), for a stage whose records carry them: per read
    ``verbal_<k>`` / ``forced_<k>`` for k in READ_KEYS (parse_rate of the forced read = the share
    of answers whose valid tokens held at least prompts.forced_min_mass); ``forced_mass`` = mean
    share of the next-token mass on valid answer tokens (stated P), ``forced_prior_mass`` the
    same for the prior; ``read_coherence`` = mean |verbal stated P − forced stated P| over the
    answers both reads parsed, ``n_read_pairs`` of them."""
    out: Block = {}
    for read in ("verbal", "forced"):
        cols = [{**r, "prior": r[f"prior_{read}"], "posterior": r[f"posterior_{read}"],
                 "stated": r[f"stated_{read}"]} for r in records]
        s = StageColumns.from_records(cols, n_bootstrap, level, seed)
        block: Block = {}
        why: dict[str, str] = {}
        for metric in (d.metric for d in DECLARED.values()):
            if metric.applies(s) and set(metric.keys) & set(READ_KEYS):
                put(metric, s, block, why)
        out.update({f"{read}_{k}": block[k] for k in READ_KEYS if k in block})
        if undefined is not None:
            undefined.update({f"{read}_{k}": why[k] for k in READ_KEYS if k in why})
    out["forced_mass"] = _mean_of([r.get("stated_forced_mass") for r in records])
    out["forced_prior_mass"] = _mean_of([r.get("prior_forced_mass") for r in records])
    verbal = nan_array([r["stated_verbal"] for r in records])
    forced = nan_array([r["stated_forced"] for r in records])
    both = np.isfinite(verbal) & np.isfinite(forced)
    out["n_read_pairs"] = int(both.sum())
    out["read_coherence"] = float(np.abs(verbal[both] - forced[both]).mean()) if both.any() else float("nan")
    if undefined is not None and not both.any():
        undefined["read_coherence"] = "no answer parsed under both reads"
    return out
