"""Two-agent episodes: the human's entrenchment, ΔBrier first → last, the Bayes human's MS."""
from __future__ import annotations

import warnings

import numpy as np
from numpy.typing import ArrayLike

from ..core.lazy import module
from ..stats import Block, MetricError, Record, nan_array, nan_matrix
from .calibration import brier
from .martingale import delta_brier_ci, martingale_fit

stats = module("scipy.stats")   # imported on first use (martingale.core.lazy)

def entrenched(first: ArrayLike, last: ArrayLike) -> np.ndarray:
    """Per episode: did the human move further to the side of ½ it started on, (last − first)·
    sign(first − ½) > 0 (the research log's "30/48 entrenched")."""
    a, b = np.asarray(first, dtype=float), np.asarray(last, dtype=float)
    return (b - a) * np.sign(a - 0.5) > 0


def _ms_bayes(records: list[Record]) -> float:
    """The Bayes human's MS first → last; a real question (a chat episode) has no oracle."""
    if any(r.get("bayes_turns") is None for r in records):
        raise MetricError("ms_bayes: real questions have no Bayes oracle (a chat episode)")
    return martingale_fit([r["bayes_turns"][0] for r in records], [r["bayes_turns"][-1] for r in records])["ms"]


def episode_metrics(records: list[Record], n_bootstrap: int = 1000, level: float = 0.95,
                    seed: int = 0) -> Block:
    """A simulate stage's episode block, over episodes whose first and last P both parsed:
    entrenched share (k of n), Brier of the first P, ΔBrier = Brier(last) − Brier(first) with its
    CI, the Bayes human's MS (the exact belief of the evidence the human held, first → last: what a
    Bayesian hearing the same utterances would show), and the mean stated P per turn by lean."""
    first = nan_array([r["prior"] for r in records])
    last = nan_array([r["posterior"] for r in records])
    y = np.array([r["y"] for r in records], dtype=float)
    ok = np.isfinite(first) & np.isfinite(last)
    out: Block = {"n_episodes": len(records), "n_entrenched": int(entrenched(first[ok], last[ok]).sum())}
    undefined: dict[str, str] = {}
    def entrenched_share() -> float:
        if not ok.any():
            raise MetricError("entrenched_share: no episode with a parsed first and last P")
        return float(entrenched(first[ok], last[ok]).mean())

    steps = [
        ("entrenched_share", entrenched_share),
        ("brier_first", lambda: brier(first[ok], y[ok])),
        ("delta_brier", lambda: brier(last[ok], y[ok]) - brier(first[ok], y[ok])),
        ("delta_brier_ci", lambda: list(delta_brier_ci(first[ok], last[ok], y[ok], n_bootstrap, level, seed))),
        ("ms_bayes", lambda: _ms_bayes(records)),
    ]
    for key, fn in steps:
        try:
            out[key] = fn()
        except MetricError as e:
            out[key] = [float("nan")] * 2 if key.endswith("_ci") else float("nan")
            undefined[key] = str(e)
    traj = nan_matrix([r["trajectory"] for r in records])
    lean = np.array([r["lean"] for r in records])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)     # a turn where no human's P parsed: NaN
        out["p_by_turn"] = {side: [None if np.isnan(v) else round(float(v), 6)
                                   for v in np.nanmean(traj[lean == sign], axis=0)]
                            for side, sign in (("lean_yes", 1), ("lean_no", -1)) if (lean == sign).any()}
    if undefined:
        out["undefined_episode"] = undefined
    return out
