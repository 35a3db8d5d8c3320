"""Stage eval: roll the stage's model out on the held-out questions and score every belief.

Writes records.jsonl (one row per question: y, prior, posterior, stated P, snap P, the trace's own
beliefs, the Bayes oracle's, the completions) and metrics.json (metrics.stage_metrics).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import io
from ..beliefs.elicit import cut_index, rollout
from ..beliefs.readers import ReadContext
from ..metrics import stage_metrics
from ..model.load import load
from .common import log, make_world, seed_everything


def _r(v: float | None) -> float | None:
    return None if v is None else round(float(v), 6)


def evaluate_model(model, tok, judge, cfg: dict[str, Any], questions) -> list[dict[str, Any]]:
    world = make_world(cfg["world"])
    ctx = ReadContext(world=world, judge=judge)
    seed = int(cfg["seed"])
    ro = rollout(model, tok, questions, ctx, cfg["elicit"], seed, float(cfg["eval"]["temperature"]))
    k = cut_index(world, cfg["elicit"])
    rows = []
    for i, q in enumerate(questions):
        rows.append({
            "qid": q.qid, "y": q.y, "seed": seed,
            "prior": _r(ro.prior[i]), "posterior": _r(ro.posterior[i]), "stated": _r(ro.stated[i]),
            "snap": _r(ro.snap_p[i]), "trace_cut": _r(ro.trace_cut[i]), "trace_last": _r(ro.trace_last[i]),
            "bayes_cut": _r(world.bayes(q, k)), "bayes_end": _r(world.bayes(q)),
            "completion": ro.trace.texts[i],
            **({"snap_completion": ro.snap.texts[i]} if ro.snap is not None else {}),
        })
    return rows


def run(cfg: dict[str, Any], model: Path, judge_model: Path, out_dir: Path) -> None:
    seed = int(cfg["seed"])
    seed_everything(seed)
    world = make_world(cfg["world"])
    _, heldout = world.splits()
    policy, tok = load(model, cfg["model"])
    judge = load(judge_model, cfg["model"]) if cfg["elicit"].get("judge") == "self" else None
    records = evaluate_model(policy, tok, judge, cfg, heldout)
    metrics = stage_metrics(records, int(cfg["eval"]["n_bootstrap"]), float(cfg["eval"]["ci"]), seed)
    log.info("eval: %s", {k: metrics.get(k) for k in ("brier", "ms", "ms_trace", "parse_rate")})
    with io.atomic_dir(out_dir) as tmp:
        io.write_jsonl(tmp / "records.jsonl", records)
        io.write_json(tmp / "metrics.json", metrics)
