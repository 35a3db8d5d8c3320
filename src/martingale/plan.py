"""The run plan: every run (and seed) as a chain of content-addressed stages.

A stage's id is ``<kind>-<12 hex>``, the sha256 of the canonical JSON of its kind, the config slice
that affects it and its upstream ids (a Merkle chain). Two runs with a common prefix therefore share
the ids of that prefix, and Snakemake builds each distinct stage once in
``results/_store/<kind>/<id>/``.

Kinds, and the slice that defines each:

- ``weights``  {model}: local weights (model.path set) linked into the store; no training.
- ``pretrain`` {world, model, pretrain}: the embedded model (model.path null).
- ``distill``  {world, model, distill} + base model: the biased start model D (start == "D").
- ``train``    {world, model, elicit, stage, seed} + start model + judge, for s1, s2 with a reward.
- ``eval``     {world, model, elicit, eval, seed} + model + judge, for s0 and each train stage.

The judge is the run's s0 model. ``model.resources`` (scheduling only) is not hashed: asking for
more memory does not invalidate a model. ``wandb`` is in no slice.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Optional

from .config.runs import RunTree
from .io import canonical_json, write_text

STORE = "results/_store"
KINDS = ("weights", "pretrain", "distill", "train", "eval")
TRAIN_STAGES = ("s1", "s2")
ID_PATTERN = "[0-9a-f]{12}"


@dataclass(frozen=True)
class Stage:
    kind: str
    id: str
    cfg: dict                          # the slice passed to the stage body (and hashed)
    inputs: dict[str, str]             # role (base_model, start_model, judge_model, model) -> stage id
    resources: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def upstream(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.inputs.values()))

    @property
    def dir(self) -> str:
        return stage_dir(self.id)


class RunStage(NamedTuple):
    stage: str          # s0, s1, s2
    seed: int
    model_stage: str    # id of the stage that made the model (weights/pretrain/distill/train)
    eval_stage: str     # id of its eval stage


def stage_dir(stage_id: str) -> str:
    """``results/_store/<kind>/<id>`` (relative to the project root)."""
    return f"{STORE}/{stage_id.split('-', 1)[0]}/{stage_id}"


def stage_id(kind: str, cfg: dict, inputs: dict[str, str]) -> str:
    """``<kind>-<first 12 hex of sha256>`` of the canonical (sorted-key, compact) JSON."""
    blob = json.dumps({"kind": kind, "slice": cfg, "upstream": inputs}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False, allow_nan=True)
    return f"{kind}-{hashlib.sha256(blob.encode('utf-8')).hexdigest()[:12]}"


def _model_slice(model: dict) -> dict:
    return {k: v for k, v in model.items() if k != "resources"}


def _resources(model: dict) -> dict[str, Any]:
    r = model.get("resources") or {}
    out: dict[str, Any] = {
        "threads": int(r.get("cpus", 1)),
        "mem_mb": int(r.get("mem_mb", 1000)),
        "runtime": int(r.get("runtime_min", 60)),
        "gpu": int(r.get("gpus", 0)),
    }
    if r.get("gpu_model"):
        out["gpu_model"] = r["gpu_model"]
    return out


class Plan:
    """Runs → stages. ``stages``: id → Stage; ``run_stages(run)``: the run's (stage, seed, ids)."""

    def __init__(self, tree: RunTree, root: Path | str = "."):
        self.root = Path(root)
        self.tree = tree
        self.stages: dict[str, Stage] = {}
        self._runs: dict[str, list[RunStage]] = {}
        self._chains: dict[str, list[str]] = {}
        for run_id in tree.ids():
            self._plan_run(run_id)

    @classmethod
    def load(cls, root: Path | str = ".") -> "Plan":
        """Validate conf/runs under root (composing every run once) and plan every run."""
        root = Path(root)
        return cls(RunTree.load(root / "conf"), root)

    # ---------------------------------------------------------------- building
    def _add(self, kind: str, cfg: dict, inputs: dict[str, str], resources: dict) -> str:
        sid = stage_id(kind, cfg, inputs)
        if sid not in self.stages:
            self.stages[sid] = Stage(kind, sid, cfg, dict(inputs), resources)
        return sid

    def _plan_run(self, run_id: str) -> None:
        cfg = self.tree._resolve(run_id)  # cached, validated; not mutated here
        world, model, elicit = cfg["world"], cfg["model"], cfg["elicit"]
        mslice = _model_slice(model)
        res = _resources(model)
        chain: list[str] = []
        if model.get("path"):
            s0 = self._add("weights", {"model": mslice}, {}, res)
        else:
            s0 = self._add("pretrain", {"world": world, "model": mslice, "pretrain": cfg["pretrain"]}, {}, res)
        chain.append(s0)
        if cfg["start"] == "D":
            s0 = self._add("distill", {"world": world, "model": mslice, "distill": cfg["distill"]},
                           {"base_model": s0}, res)
            chain.append(s0)
        rows: list[RunStage] = []
        for seed in cfg["seeds"]:
            def evaluate(model_id: str) -> str:
                return self._add("eval", {"world": world, "model": mslice, "elicit": elicit,
                                          "eval": cfg["eval"], "seed": seed},
                                 {"model": model_id, "judge_model": s0}, res)
            ev = evaluate(s0)
            rows.append(RunStage("s0", seed, s0, ev))
            chain.append(ev)
            current = s0
            for name in TRAIN_STAGES:
                stage_cfg = cfg["stages"][name]
                if stage_cfg.get("reward") is None:
                    continue
                current = self._add("train", {"world": world, "model": mslice, "elicit": elicit,
                                              "stage": stage_cfg, "seed": seed},
                                    {"start_model": current, "judge_model": s0}, res)
                ev = evaluate(current)
                rows.append(RunStage(name, seed, current, ev))
                chain += [current, ev]
        self._runs[run_id] = rows
        self._chains[run_id] = list(dict.fromkeys(chain))

    # ---------------------------------------------------------------- queries
    def run_ids(self) -> list[str]:
        return list(self._runs)

    def active_run_ids(self) -> list[str]:
        """Runs to build: every run not marked ``invalid``."""
        return [r for r in self._runs if not self.tree.specs[r].invalid]

    def run_stages(self, run_id: str) -> list[RunStage]:
        return list(self._runs[run_id])

    def run_chain(self, run_id: str) -> list[str]:
        """Every stage id a run needs, upstream first, each once."""
        return list(self._chains[run_id])

    def stages_for(self, run_ids: list[str]) -> list[str]:
        """Distinct stage ids the runs need, in first-needed order."""
        return list(dict.fromkeys(s for r in run_ids for s in self._chains[r]))

    def naive_count(self, run_ids: list[str]) -> int:
        """Stages if every run built its own chain (no sharing)."""
        return sum(len(self._chains[r]) for r in run_ids)

    def stage(self, sid: str) -> Stage:
        return self.stages[sid]

    def resolved_config(self, run_id: str) -> dict:
        return self.tree.resolved_config(run_id)

    def lineage(self, run_id: str) -> list[dict]:
        return [{"run_id": s.run_id, "parent": s.parent, "knob": s.knob} for s in self.tree.lineage(run_id)]

    def evals(self, run_id: str) -> list[dict]:
        """What aggregate gets: one entry per (stage, seed), with the eval folder."""
        return [{"stage": r.stage, "seed": r.seed, "dir": stage_dir(r.eval_stage),
                 "model_stage": r.model_stage, "eval_stage": r.eval_stage}
                for r in self._runs[run_id]]

    def index(self) -> dict[str, list[str]]:
        """run-id → every stage id it needs (for the runs table's crash detection)."""
        return {r: list(self._chains[r]) for r in sorted(self._runs)}

    def write_index(self, path: Path | str | None = None) -> Path:
        """Write ``results/_store/index.json`` (only when its content changed)."""
        path = Path(path) if path is not None else self.root / STORE / "index.json"
        text = canonical_json(self.index())
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            write_text(path, text)
        return path


def read_index(root: Path | str) -> Optional[dict[str, list[str]]]:
    path = Path(root) / STORE / "index.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
