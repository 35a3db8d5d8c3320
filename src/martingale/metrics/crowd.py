"""The crowd as a bar: where the questions carry a forecast from elsewhere (``crowd_p``: ForecastBench's
market or crowd probability at its freeze date, or any source a user fills), its Brier on the same
questions and the model's paired ΔBrier against it. Questions without a crowd value are counted,
never guessed."""
from __future__ import annotations

import numpy as np

from ..stats import Block, MetricError, bootstrap_ci, too_few_for_ci
from ..stats.effects import brier_effect
from . import Column, stage_metric

CROWD_KEYS = ("crowd_brier", "crowd_brier_ci", "crowd_n", "crowd_missing")
VERSUS_KEYS = ("crowd_delta_brier", "crowd_delta_brier_ci", "crowd_n_paired", "crowd_p_t", "crowd_p_wilcoxon",
               "crowd_share_model_wins")


@stage_metric(*CROWD_KEYS, reads=("crowd", "y"), column=Column("crowd Brier", 4))
def crowd_brier(s) -> Block:
    """crowd_brier = mean (y − crowd P)² over the questions with a crowd value (crowd_n; crowd_missing
    without one), with its bootstrap CI."""
    has = ~np.isnan(s.crowd)
    crowd, y = s.crowd[has], s.y[has]
    if not has.any():
        raise MetricError("crowd_brier: no question has a crowd value")
    undefined: dict[str, str] = {}
    out: Block = {"crowd_n": int(has.sum()), "crowd_missing": int((~has).sum()),
                  "crowd_brier": float(np.mean((y - crowd) ** 2)), "undefined": undefined}
    if (why := too_few_for_ci(len(y))):
        out["crowd_brier_ci"] = [float("nan")] * 2
        undefined["crowd_brier_ci"] = f"crowd_brier_ci: {why}"
    else:
        lo, hi = bootstrap_ci((y, crowd), lambda a, b: np.mean((a - b) ** 2), s.n_bootstrap, s.level, s.seed)
        out["crowd_brier_ci"] = [float(lo), float(hi)]
    return out


@stage_metric(*VERSUS_KEYS, reads=("crowd", "stated", "y"), column=Column("ΔBrier vs crowd", 4, signed=True))
def model_vs_crowd(s) -> Block:
    """crowd_delta_brier = mean over questions with a stated P and a crowd value of (y − stated P)² −
    (y − crowd P)², with the paired battery (bootstrap CI, paired t, Wilcoxon, share the model wins)."""
    both = s.ok & ~np.isnan(s.crowd)
    e = brier_effect(s.y[both], s.stated[both], s.crowd[both], s.n_bootstrap, s.level, s.seed)
    undefined = {f"crowd_delta_brier{k[5:]}" if k.startswith("delta") else f"crowd_{k}": v
                 for k, v in e["undefined"].items()}
    return {"crowd_delta_brier": e["delta"], "crowd_delta_brier_ci": e["ci"], "crowd_n_paired": e["n"],
            "crowd_p_t": e.get("p_t"), "crowd_p_wilcoxon": e.get("p_wilcoxon"),
            "crowd_share_model_wins": e["share_child_wins"], "undefined": undefined}
