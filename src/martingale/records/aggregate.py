"""Aggregate a run: resolved config, lineage, eval.json (per stage, seeds as mean ± sd), records.

Everything under results/<run-id>/ is written atomically; eval.json is written last, so its
presence means the run's results are complete.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from .. import io


def _stage_order(name: str) -> tuple[int, str]:
    return (int(name[1:]) if name[1:].isdigit() else 10**6, name)


def combine_seeds(per_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """One seed: its metrics. Several: every numeric metric as {mean, sd, per_seed}."""
    if len(per_seed) == 1:
        return dict(next(iter(per_seed.values())))
    seeds = sorted(per_seed)
    keys = sorted(set().union(*(m.keys() for m in per_seed.values())))
    out: dict[str, Any] = {"seeds": seeds}
    for key in keys:
        values = [per_seed[s].get(key) for s in seeds]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            arr = np.array(values, dtype=float)
            out[key] = {"mean": float(np.mean(arr)), "sd": float(np.std(arr, ddof=1)),
                        "per_seed": [None if math.isnan(v) else v for v in arr.tolist()]}
        else:
            out[key] = {"per_seed": values}
    return out


def write_run_results(run_id: str, resolved_cfg: dict[str, Any], lineage: list[dict[str, Any]],
                      evals: list[dict[str, Any]], out_dir: Path | str) -> dict[str, Any]:
    """evals: [{stage, seed, dir, model_stage, eval_stage}] → results/<run-id>/{config.yaml,
    lineage.json, records.jsonl, eval.json}."""
    out = Path(out_dir)
    by_stage: dict[str, dict[int, dict[str, Any]]] = {}
    records: list[dict[str, Any]] = []
    provenance: dict[str, dict[str, Any]] = {}
    for e in sorted(evals, key=lambda e: (_stage_order(e["stage"]), int(e["seed"]))):
        d = Path(e["dir"])
        by_stage.setdefault(e["stage"], {})[int(e["seed"])] = io.read_json(d / "metrics.json")
        for row in io.read_jsonl(d / "records.jsonl"):
            rec = {k: v for k, v in row.items() if k not in ("completion", "snap_completion")}
            records.append({**rec, "stage": e["stage"], "seed": int(e["seed"])})
        provenance.setdefault(e["stage"], {})[str(e["seed"])] = {
            "model_stage": e["model_stage"], "eval_stage": e["eval_stage"]}
    stages = {name: combine_seeds(per_seed) for name, per_seed in sorted(by_stage.items(), key=lambda kv: _stage_order(kv[0]))}
    result = {
        "run_id": run_id,
        "parent": lineage[-1].get("parent") if lineage else None,
        "knob": lineage[-1].get("knob") if lineage else None,
        "seeds": sorted({int(e["seed"]) for e in evals}),
        "stage_order": sorted(by_stage, key=_stage_order),
        "stages": stages,
        "provenance": provenance,
    }
    io.write_yaml(out / "config.yaml", resolved_cfg)
    io.write_json(out / "lineage.json", lineage)
    io.write_jsonl(out / "records.jsonl", records)
    io.write_json(out / "eval.json", result)
    return result
