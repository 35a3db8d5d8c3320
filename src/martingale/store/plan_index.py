"""The plan's index (``results/_store/index.json``) typed: per run its stage ids, model, start,
stage chain, seeds, config hash, lineage group and wandb settings; per stage its owner run and
role. What tracking and the table read without planning. The plan writes it; a reader gets these
types or None (no index, or one of another format: the plan computes it again)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

from ..core.jsonvalue import JsonObject


@dataclass(frozen=True)
class IndexedRun:
    """A run as the index holds it."""
    chain: list[str]            # its stage ids, upstream first
    group: str                  # its lineage, root/…/run (the wandb group of its stages)
    model: str
    start: str
    elicit: str
    stage_chain: list[str]      # its steps' names: s0, s1 …
    seeds: list[int]
    config_hash: str            # "sha256:…" of its identity (what eval.json records it was built with)
    wandb: JsonObject           # its wandb section, typed by tracking (WandbConfig)
    needs: list[str]            # the tags of what building it needs (vllm, a GPU …)


@dataclass(frozen=True)
class IndexedStage:
    """A stage as the index holds it: the run that introduced it and its role there."""
    owner: str
    job_type: str


@dataclass(frozen=True)
class PlanIndex:
    """The whole index; ``conf_hash`` names the conf/ tree the plan was made from."""
    conf_hash: str
    runs: dict[str, IndexedRun]
    stages: dict[str, IndexedStage]

    def to_json(self) -> JsonObject:
        """The index as index.json holds it (canonical JSON of this)."""
        return asdict(self)

    @classmethod
    def from_json(cls, raw: object) -> Optional["PlanIndex"]:
        """The index a parsed index.json holds, or None when it is of another format."""
        if not isinstance(raw, dict):
            return None
        try:
            return cls(conf_hash=str(raw["conf_hash"]),
                       runs={r: IndexedRun(**info) for r, info in raw["runs"].items()},
                       stages={s: IndexedStage(**info) for s, info in raw["stages"].items()})
        except (AttributeError, KeyError, TypeError):
            return None
