"""Aggregate a run: resolved config, lineage, eval.json (per stage, seeds as mean ± sd), records.

Everything under results/<run-id>/ is written atomically; eval.json is checked against its
schema (eval_schema.py) before anything is written and written last, so its presence means the
run's results are complete.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, NotRequired, Optional, TypedDict

from ..config.schema import run_config
from ..core.jsonvalue import Json, JsonObject
from ..plan import config_hash
from ..stages.section import EvalConfig
from ..stats import Block, Record
from ..stats.effects import EffectError, beat_counts, paired_effect, replicate_summary, undefined_effect
from ..stats.seeds import combine_seeds, only_block, seed_blocks, seed_values, with_seed_blocks
from ..store import files
from ..store import provenance as prov
from .crossed import effect_crossed, stage_crossed
from .eval_schema import check_eval
from .plots import write_plots


class EvalEntry(TypedDict):
    """One eval a run gathers: its stage and seed, its folder, the model stage it read, its own id."""
    stage: str
    seed: int
    dir: Path | str
    model_stage: NotRequired[Optional[str]]
    eval_stage: NotRequired[Optional[str]]


Key = tuple[str, int]      # (stage, seed)


def _stage_order(name: str) -> tuple[int, str]:
    return (int(name[1:]) if name[1:].isdigit() else 10**6, name)


def stage_block(per_seed: dict[int, JsonObject], records: dict[Key, list[Record]], stage: str,
                ev: EvalConfig) -> Block:
    """A stage's eval.json block: its seeds' metrics (combine_seeds) and, for several seeds, the
    ``crossed`` question covariance of the metrics a finding reads (records/crossed.py)."""
    crossed = stage_crossed({seed: records[(stage, seed)] for seed in per_seed}, per_seed, int(ev.n_bootstrap))
    return {**combine_seeds(per_seed), **({"crossed": crossed} if crossed else {})}


def _load(evals: list[EvalEntry]) -> tuple[dict[Key, JsonObject], dict[Key, list[Record]], dict[Key, Optional[str]]]:
    """(stage, seed) → metrics, (stage, seed) → records (completions dropped), (stage, seed) → eval id."""
    metrics: dict[Key, JsonObject] = {}
    records: dict[Key, list[Record]] = {}
    ids: dict[Key, Optional[str]] = {}
    for e in sorted(evals, key=lambda e: (_stage_order(e["stage"]), int(e["seed"]))):
        d, key = Path(e["dir"]), (e["stage"], int(e["seed"]))
        metrics[key] = files.read_json(d / "metrics.json")
        records[key] = [{k: v for k, v in row.items() if k not in ("completion", "snap_completion")}
                        for row in files.read_jsonl(d / "records.jsonl")]
        ids[key] = e.get("eval_stage")
    return metrics, records, ids


def _parent_seed(stage: str, seed: int, parent_keys: set[tuple[str, int]]) -> int | None:
    """The parent's eval to pair with: the same seed, else the parent's lowest seed of the stage
    (a seeds knob: every child seed against the parent's replicate, on the same questions)."""
    if (stage, seed) in parent_keys:
        return seed
    seeds = sorted(s for st, s in parent_keys if st == stage)
    return seeds[0] if seeds else None


def _delta(block: Block, part: str) -> object:
    """A seed's Δ of one part of its paired effect (None where the part is absent)."""
    value = block.get(part)
    return value.get("delta") if isinstance(value, dict) else None


def compare(child: dict[Key, list[Record]], parent: dict[Key, list[Record]], child_ids: dict[Key, Optional[str]],
            parent_ids: dict[Key, Optional[str]], stage: str, parent_stage: str,
            n_bootstrap: int, level: float) -> Block | None:
    """The paired effect of the child's ``stage`` against the parent's ``parent_stage`` (same seed,
    else the parent's replicate; see _parent_seed): each seed's block under per_seed beside the
    spread and the counts (stats/seeds.py). None when the parent has no such stage."""
    per_seed: dict[int, Block] = {}
    pseeds: dict[int, int] = {}
    for seed in sorted(s for st, s in child if st == stage):
        pseed = _parent_seed(parent_stage, seed, set(parent))
        if pseed is None:
            return None
        try:
            block = paired_effect(child[(stage, seed)], parent[(parent_stage, pseed)], n_bootstrap, level, seed)
        except EffectError as e:
            block = undefined_effect(str(e))
        eval_id = child_ids.get((stage, seed))
        block.update(stage=stage, parent_stage=parent_stage, parent_seed=pseed,
                     same_eval_stage=eval_id is not None and eval_id == parent_ids.get((parent_stage, pseed)))
        per_seed[seed] = block
        pseeds[seed] = pseed
    summary = replicate_summary(per_seed)
    seeds = sorted(per_seed)
    crossed = effect_crossed([child[(stage, s)] for s in seeds],
                             [parent[(parent_stage, pseeds[s])] for s in seeds],
                             {part: [_delta(per_seed[s], part) for s in seeds] for part in ("brier", "ms")},
                             seeds, n_bootstrap)
    return with_seed_blocks(per_seed, stage=stage, parent_stage=parent_stage,
                            same_eval_stage=all(b["same_eval_stage"] for b in per_seed.values()), **summary,
                            **({"crossed": crossed} if crossed else {}))


def compares(stage: str, parent_stage: str) -> str:
    """How an effect is labelled: ``s1 vs parent s0``."""
    return f"{stage} vs parent {parent_stage}"


def stage_effects(child: dict[Key, list[Record]], parent: dict[Key, list[Record]], child_ids: dict[Key, Optional[str]],
                  parent_ids: dict[Key, Optional[str]], stage_order: list[str],
                  n_bootstrap: int, level: float) -> dict[str, Block]:
    """Per stage both runs have: the child's stage against the parent's stage of the same name."""
    out: dict[str, Block] = {}
    for stage in stage_order:
        eff = compare(child, parent, child_ids, parent_ids, stage, stage, n_bootstrap, level)
        if eff is not None:
            out[stage] = eff
    return out


def headline(final: Mapping[str, Json] | None) -> Block | None:
    """The runs table's effect: the child's final stage against the parent's final stage — what
    the knob changed (effect, CI, p). None when it is undefined or both read the same eval (a knob
    that changes no stage: Δ ≡ 0 by construction is no finding)."""
    if not final or final.get("same_eval_stage"):
        return None
    label = {"stage": final["stage"], "parent_stage": final["parent_stage"],
             "compares": compares(final["stage"], final["parent_stage"])}
    only = only_block(final)
    if only is None:          # several seeds: their spread and counts
        if not any(v is not None for v in seed_values(final["brier_delta"])):
            return None
        return {**label, "seeds": final["seeds"], "brier_delta": final["brier_delta"]["mean"],
                "brier_delta_sd": final["brier_delta"]["sd"], "ms_delta": final["ms_delta"]["mean"],
                "ms_delta_sd": final["ms_delta"]["sd"], "beats_parent": final["beats_parent"],
                "beats_parent_ci": final["beats_parent_ci"]}
    b, m = only.get("brier") or {}, only.get("ms") or {}
    if not isinstance(b.get("delta"), float) or math.isnan(b["delta"]):
        return None
    return {**label, "n_paired": b["n"], "brier_delta": b["delta"], "brier_ci": b["ci"],
            "p_t": b["p_t"], "p_wilcoxon": b["p_wilcoxon"], "share_child_wins": b["share_child_wins"],
            "ms_delta": m.get("delta"), "ms_ci": m.get("ci"), "p_perm_ms": m.get("p_perm")}


def forest_rows(effects: Mapping[str, Block], final: Mapping[str, Json] | None) -> dict[str, Mapping[str, object]]:
    """The effect forest's rows, final-vs-final first (labelled ``s1 vs parent s0``), then every
    same-named stage not already shown."""
    rows: dict[str, Mapping[str, object]] = {}
    if final is not None:
        rows[compares(final["stage"], final["parent_stage"])] = final
    for stage, eff in effects.items():
        if final is None or (stage, stage) != (final["stage"], final["parent_stage"]):
            rows[stage] = eff
    return rows


def knob_effect(records: dict[Key, list[Record]], ids: dict[Key, Optional[str]], stage_order: list[str],
                parent_evals: list[EvalEntry], ev: EvalConfig) -> tuple[dict[str, Block], Block | None]:
    """(per-stage effects, final): every stage both runs have against the parent's stage of that
    name, and the child's final stage against the parent's final stage (what the knob changed)."""
    _, p_records, p_ids = _load(parent_evals)
    n_boot, level = int(ev.n_bootstrap), float(ev.ci)
    effects = stage_effects(records, p_records, ids, p_ids, stage_order, n_boot, level)
    last, p_last = stage_order[-1], max({st for st, _ in p_records}, key=_stage_order)
    final = effects.get(last) if last == p_last else \
        compare(records, p_records, ids, p_ids, last, p_last, n_boot, level)
    return effects, final


def _counts(by_stage: dict[str, dict[int, JsonObject]], stage: str, eff: Mapping[str, Json] | None,
            natural: dict[int, JsonObject] | None = None) -> dict[str, dict[str, int] | None]:
    """beats start / constant / the natural base, full deflation (k of n seeds), and beats parent
    from the stage's paired effect."""
    counts = beat_counts(by_stage[stage], by_stage.get("s0") if stage != "s0" else None, natural)
    if eff is not None:
        summary = replicate_summary(dict(seed_blocks(eff)))
        counts["beats_parent"] = summary["beats_parent"]
        counts["beats_parent_ci"] = summary["beats_parent_ci"]
    return counts


def _pooled(records: dict[Key, list[Record]]) -> tuple[dict[str, list[Record]], list[Record]]:
    """Records tagged with stage and seed: per stage (for the plots), and all in stage/seed order."""
    pooled: dict[str, list[Record]] = {}
    all_records: list[Record] = []
    for (stage, seed), rows in sorted(records.items(), key=lambda kv: (_stage_order(kv[0][0]), kv[0][1])):
        tagged = [{**r, "stage": stage, "seed": seed} for r in rows]
        pooled.setdefault(stage, []).extend(tagged)
        all_records.extend(tagged)
    return pooled, all_records


def transcripts(records: dict[Key, list[Record]]) -> dict[str, list[Block]]:
    """Chat episodes' transcripts per stage (seed, question, lean, outcome, every message with its
    reads), as the research log's transcript pages read; empty for runs without chat episodes."""
    out: dict[str, list[Block]] = {}
    for (stage, seed), rows in sorted(records.items(), key=lambda kv: (_stage_order(kv[0][0]), kv[0][1])):
        for r in rows:
            if "transcript" in r:
                out.setdefault(stage, []).append({"seed": seed, "qid": r["qid"], "lean": r.get("lean"),
                                                  "y": r["y"], "messages": r["transcript"]})
    return out


def stage_provenance(evals: list[EvalEntry]) -> dict[str, JsonObject]:
    """{stage id: its provenance.json} for each eval folder read and the folder of the model it
    evaluated (its store sibling ``<store>/<kind>/<model_stage>``), where one was recorded."""
    out: dict[str, JsonObject] = {}
    for e in evals:
        d = Path(e["dir"])
        folders = {e.get("eval_stage") or d.name: d}
        if e.get("model_stage") and len(d.parents) >= 2:
            sid = str(e["model_stage"])
            folders[sid] = d.parents[1] / sid.split("-", 1)[0] / sid
        for sid, folder in folders.items():
            if sid not in out:
                doc = prov.read(folder)
                if doc is not None:
                    out[sid] = doc
    return dict(sorted(out.items()))


def eval_provenance(evals: list[EvalEntry]) -> dict[str, dict[str, dict[str, Optional[str]]]]:
    """eval.json's ``provenance``: stage → seed → its model stage and eval stage ids."""
    out: dict[str, dict[str, dict[str, Optional[str]]]] = {}
    for e in evals:
        out.setdefault(e["stage"], {})[str(e["seed"])] = {"model_stage": e["model_stage"], "eval_stage": e["eval_stage"]}
    return out


def write_run_results(run_id: str, resolved_cfg: JsonObject, lineage: list[JsonObject],
                      evals: list[EvalEntry], out_dir: Path | str,
                      parent_evals: list[EvalEntry] | None = None, plots: bool = True,
                      natural_evals: list[EvalEntry] | None = None) -> Block:
    """evals: [{stage, seed, dir, model_stage, eval_stage}] → results/<run-id>/{config.yaml,
    lineage.json, records.jsonl, plots/*.png, eval.json}.

    parent_evals (same shape, the parent run's evals): the knob's paired effect (questions matched
    by qid; see martingale.stats.effects). eval.json's ``effect`` holds the parent, the knob, ``final`` —
    the child's final stage against the parent's final stage, what the knob changed (e.g.
    ``s1 vs parent s0`` for a knob that adds a stage) — and the headline drawn from it; every stage
    both runs have gains its own ``effect`` against the parent's stage of that name. Every stage
    gains ``counts`` (beats start / constant / parent, k of n seeds; with natural_evals, the natural
    model measured the same way per seed: beats the natural base, full deflation).
    ``provenance`` maps each stage and seed to its model and eval stage ids, and
    ``stage_provenance`` each of those stage ids (and the natural evals') to the provenance.json
    its folder holds (martingale.store.provenance: versions, vLLM server, weights' sha256), if any.
    Chat episodes add ``transcripts`` (per stage, every episode's messages).
    """
    out = Path(out_dir)
    ev = run_config(resolved_cfg, f"results/{run_id}/config.yaml").eval
    metrics, records, ids = _load(evals)
    stage_order = sorted({st for st, _ in metrics}, key=_stage_order)
    by_stage: dict[str, dict[int, JsonObject]] = {}
    for (stage, seed), m in metrics.items():
        by_stage.setdefault(stage, {})[seed] = m
    stages = {name: stage_block(by_stage[name], records, name, ev) for name in stage_order}
    ran_with = stage_provenance(evals + list(natural_evals or []))
    parent = lineage[-1].get("parent") if lineage else None
    knob = lineage[-1].get("knob") if lineage else None
    natural = {int(e["seed"]): files.read_json(Path(e["dir"]) / "metrics.json") for e in natural_evals or []} or None
    effects, final = knob_effect(records, ids, stage_order, parent_evals, ev) if parent_evals else ({}, None)
    for stage in stage_order:
        if stage in effects:
            stages[stage]["effect"] = effects[stage]
        own = effects.get(stage, final if stage == stage_order[-1] else None)
        stages[stage]["counts"] = _counts(by_stage, stage, own, natural)
    result = {
        "run_id": run_id, "parent": parent, "knob": knob, "config_hash": config_hash(resolved_cfg),
        "seeds": sorted({int(e["seed"]) for e in evals}),
        "stage_order": stage_order, "stages": stages, "provenance": eval_provenance(evals),
        "stage_provenance": ran_with,
        "effect": {"parent": parent, "knob": knob,
                   "compares": compares(str(final["stage"]), str(final["parent_stage"])) if final else None,
                   "final": final, "headline": headline(final)}
        if parent_evals else None,
    }
    said = transcripts(records)
    if said:                       # chat episodes (episodes/chat.py): the whole conversations
        result["transcripts"] = said
    check_eval(result, f"results/{run_id}/eval.json")   # before anything is written: nothing half-written
    pooled, all_records = _pooled(records)
    files.write_yaml(out / "config.yaml", resolved_cfg)
    files.write_json(out / "lineage.json", lineage)
    files.write_jsonl(out / "records.jsonl", all_records)
    if plots:
        write_plots(out / "plots", run_id, stage_order, pooled, stages, parent, knob,
                    forest_rows(effects, final) or None)
    files.write_json(out / "eval.json", result)
    return result
