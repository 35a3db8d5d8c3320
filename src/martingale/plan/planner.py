"""The run plan: every run (and seed) as a chain of content-addressed stages.

A stage's id hashes what of the run's config it reads (identity.py), so two runs with a common
prefix share the ids of that prefix, and Snakemake builds each distinct stage once in
``results/_store/<kind>/<id>/``. What each stage asks the scheduler for is resources.py's.

The kinds and where they go come from the stage-kind registry (``martingale.stages``): a source
makes the start model (pretrain, or local weights), a start kind may turn it into D (distill), each
step s1, s2 … with a reward trains from the model before it (``stages.<name>.kind``), and a measure
(``eval.kind``) reads every model stage for each seed. The judge (``elicit.judge_model``) is the
natural model — the source stage, one judge fixed across a campaign — or the run's start model; a
two-agent episode's human is always the start model.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Optional

from ..config.checks import QUESTIONS_CHECKED
from ..config.digest import code_and_versions, conf_files, env_digest, tree_digest
from ..config.runs import RunTree
from ..config.sections import RunConfig
from ..core.jsonvalue import JsonObject
from ..stages import StageKind, kinds
from ..store import STORE, read_index, stage_dir
from ..store.files import canonical_json, read_pickle, write_pickle, write_text_if_changed
from ..store.plan_index import IndexedRun, IndexedStage, PlanIndex
from .identity import as_json, run_identity, sha256_json, stage_id, stage_slice
from .needs import Need, stage_needs, unmet
from .resources import RESOURCE_KEYS, _resources


@dataclass(frozen=True)
class Stage:
    """A planned stage: its kind, id, config slice (what its id hashes), input stage ids and resources."""
    kind: str
    id: str
    cfg: JsonObject                # the slice passed to the stage body (and hashed)
    inputs: dict[str, str]             # role (base_model, start_model, judge_model, human_model, model) -> stage id
    resources: JsonObject = field(default_factory=dict, compare=False)


class RunStage(NamedTuple):
    """One stage of a run for one seed: its model stage and the eval that reads it."""
    stage: str          # s0, s1, s2
    seed: int
    model_stage: str    # id of the stage that made the model (weights/pretrain/distill/train)
    eval_stage: str     # id of its eval stage



def _one_kind(place: str, cfg: RunConfig, name: Optional[str] = None) -> StageKind:
    """The kind for a place: the one named, else the one whose ``when`` holds for this run."""
    candidates = [k for k in kinds().values() if k.place == place and
                  (k.name == name if name is not None else (k.when is None or k.when(cfg)))]
    if len(candidates) != 1:
        raise ValueError(f"no single {place} stage kind for this run ({name or 'by when'}): "
                         f"{[k.name for k in candidates]}")
    return candidates[0]


class Plan:
    """Runs → stages. ``stages``: id → Stage; ``run_stages(run)``: the run's (stage, seed, ids)."""

    def __init__(self, tree: RunTree, root: Path | str = ".", conf_digest: Optional[str] = None):
        self.root = Path(root)
        self.tree = tree
        self.conf_digest = conf_digest or conf_hash(self.root / "conf")   # the conf/ tree planned from
        self.stages: dict[str, Stage] = {}
        self._runs: dict[str, list[RunStage]] = {}
        self._chains: dict[str, list[str]] = {}
        self._natural: dict[str, dict[int, str]] = {}   # run id -> seed -> the natural model's eval
        self._labels: dict[str, str] = {}      # stage id -> its role, e.g. "train-s1", "eval-s0"
        self._runs_info: dict[str, IndexedRun] = {}  # run id -> its chain, model, start, seeds, hash …
        self._chain_lengths: Optional[dict[str, int]] = None
        self._priorities: Optional[dict[str, int]] = None
        self._kind_resources: Optional[dict[str, JsonObject]] = None
        self._identity: dict[str, JsonObject] = {}   # run id -> run_identity of its config (the aggregate's param)
        self._stage_needs: dict[str, set[Need]] = {}   # stage id -> its needs, found once (a stage is in many chains)
        for run_id in tree.ids():
            self._plan_run(run_id)

    @classmethod
    def load(cls, root: Path | str = ".") -> "Plan":
        """Validate conf/runs under root (composing every run once) and plan every run.

        The plan is cached on disk (``.cache/plan/``) by all it follows from (plan_cache_path):
        a fresh process with nothing changed (every `snakemake` call) unpickles it instead of
        reading, composing and planning each run, and re-checks only the questions files. A plan
        whose key changed while it was made (conf/ edited meanwhile) is cached under neither key."""
        root = Path(root)
        digest, path = plan_key(root)
        cached = read_pickle(path)     # (plan, checks.QUESTIONS_CHECKED as it was written)
        if isinstance(cached, tuple) and len(cached) == 2 and isinstance(cached[0], Plan):
            plan, checked = cached
            QUESTIONS_CHECKED.update(checked)
            plan.tree.check_questions()
            return plan
        plan = cls(RunTree.load(root / "conf"), root, digest)
        if plan_cache_path(root) != path:
            return plan
        composer, plan.tree._composer = plan.tree._composer, None   # OmegaConf objects: every config is resolved
        try:
            write_pickle(path, (plan, dict(QUESTIONS_CHECKED)), PLANS_KEPT)
        finally:
            plan.tree._composer = composer
        return plan

    # ---------------------------------------------------------------- building
    def _add(self, kind: StageKind, cfg: RunConfig, inputs: dict[str, str], label: str,
             step: Optional[str] = None, seed: Optional[int] = None) -> str:
        """Plan one stage: ``inputs`` maps ``model`` (the model upstream), ``judge`` and ``human``
        to ids; the kind's input roles pick from them (``judge_model`` = the judge, ``human_model``
        = the episodes' human, any other the model)."""
        pick = {"judge_model": "judge", "human_model": "human"}
        roles = {role: inputs[pick.get(role, "model")] for role in kind.inputs}
        slice_ = stage_slice(kind, cfg, step, seed)
        sid = stage_id(kind.name, slice_, roles)
        if sid not in self.stages:
            self.stages[sid] = Stage(kind.name, sid, slice_, roles, _resources(cfg.model, kind))
            self._labels[sid] = label
        return sid

    def _plan_run(self, run_id: str) -> None:
        run = cfg = self.tree.resolved(run_id)  # cached, validated; never mutated: what the ids hash
        source = _one_kind("source", cfg)
        natural = self._add(source, cfg, {}, source.name)
        chain, steps = [natural], [source.name]
        starts = [k for k in kinds().values() if k.place == "start" and k.when is not None and k.when(cfg)]
        steps += [f"{kind.name}:{run.start}" for kind in starts]
        trained = {name: st for name, st in run.stages.steps().items() if st.reward is not None}
        steps += [f"{name}:{st.reward}" for name, st in trained.items()]
        measure = _one_kind("measure", cfg, run.eval.kind)
        rows: list[RunStage] = []
        reference: dict[int, str] = {}
        for seed in run.run_seeds():
            s0 = natural
            for kind in starts:          # a start kind (D's distill) per seed where it is per_seed
                s0 = self._add(kind, cfg, {"model": s0}, f"{kind.name}-{run.start}",
                               seed=seed if kind.per_seed else None)
                chain.append(s0)
            judge = natural if run.elicit.judge_model == "base" else s0
            current = s0
            for name in ["s0", *trained]:
                if name != "s0":
                    step = _one_kind("step", cfg, trained[name].kind)
                    current = self._add(step, cfg, {"model": current, "judge": judge, "human": s0},
                                        f"{step.name}-{name}", step=name, seed=seed)
                    chain.append(current)
                ev = self._add(measure, cfg, {"model": current, "judge": judge, "human": s0}, f"eval-{name}", seed=seed)
                rows.append(RunStage(name, seed, current, ev))
                chain.append(ev)
            # the natural model read the same way: "beats the natural base" (its s0 where start=base)
            reference[seed] = self._add(measure, cfg, {"model": natural, "judge": judge, "human": natural},
                                             "eval-natural", seed=seed)
            chain.append(reference[seed])
        self._natural[run_id] = reference
        self._runs[run_id] = rows
        self._chains[run_id] = list(dict.fromkeys(chain))
        self._runs_info[run_id] = IndexedRun(
            chain=list(self._chains[run_id]), group=self.group(run_id), model=run.model.name, start=run.start,
            elicit=run.elicit.mode, stage_chain=steps, seeds=run.run_seeds(),
            config_hash="sha256:" + sha256_json(self.run_identity(run_id)), wandb=as_json(run.wandb),
            needs=[n.tag for n in self.run_needs(run_id)])

    # ---------------------------------------------------------------- queries
    def run_ids(self) -> list[str]:
        return list(self._runs)

    def active_run_ids(self) -> list[str]:
        """Runs to build: every run not marked ``invalid``."""
        return [r for r in self._runs if not self.tree.specs[r].invalid]

    def run_needs(self, run_id: str) -> list[Need]:
        """What the run's stages need from the machine (martingale.plan.needs), sorted."""
        return sorted({n for sid in self._chains[run_id] for n in self._needs_of(sid)})

    def _needs_of(self, sid: str) -> set[Need]:
        """What one stage needs (martingale.plan.needs.stage_needs), computed once per stage."""
        if sid not in self._stage_needs:
            st = self.stages[sid]
            self._stage_needs[sid] = stage_needs(kinds()[st.kind], st.cfg, st.resources)
        return self._stage_needs[sid]

    def buildable_run_ids(self, cluster: bool = False) -> tuple[list[str], dict[str, list[Need]]]:
        """The active runs whose needs this machine meets, and the others with what they lack:
        what `snakemake all` builds and what it names instead."""
        build, skip = [], {}
        for run_id in self.active_run_ids():
            missing = unmet(self.run_needs(run_id), self.root, cluster=cluster)
            if missing:
                skip[run_id] = missing
            else:
                build.append(run_id)
        return build, skip

    def run_stages(self, run_id: str) -> list[RunStage]:
        return list(self._runs[run_id])

    def run_chain(self, run_id: str) -> list[str]:
        """Every stage id a run needs, upstream first, each once."""
        return list(self._chains[run_id])

    def chain_lengths(self) -> dict[str, int]:
        """Stage id → the stages on the longest chain from it to the end of any run, itself
        included: the job's Snakemake priority, so long chains start first and every core stays
        fed to the end (a short eval left for last runs beside the others, not alone)."""
        if self._chain_lengths is None:
            depth = dict.fromkeys(self.stages, 1)
            for sid in reversed(list(self.stages)):   # a stage is planned after its inputs
                for upstream in self.stages[sid].inputs.values():
                    depth[upstream] = max(depth[upstream], depth[sid] + 1)
            self._chain_lengths = depth
        return self._chain_lengths

    def priorities(self) -> dict[str, int]:
        """Stage id → its Snakemake priority: its chain length (chain_lengths), plus n × the longest
        chain for a stage asking for n > 1 threads, which so outranks any n one-thread stages
        together: it starts only when n cores are free at once, and Snakemake fills a core the
        moment it frees, so ranked by chain length alone it would wait for the end."""
        if self._priorities is None:
            depth = self.chain_lengths()
            longest = max(depth.values(), default=1)
            self._priorities = {sid: depth[sid] + (n * longest if (n := st.resources["threads"]) > 1 else 0)
                                for sid, st in self.stages.items()}
        return self._priorities

    def kind_resources(self, kind: str) -> JsonObject:
        """The resources every stage of this kind asks for alike (key → value; ``None``: no stage
        has that resource). A key whose value differs between the kind's stages is absent: the
        rule looks it up per job. Constants spare Snakemake a function call per job and key.
        Computed for every kind in one pass over the stages, once."""
        if self._kind_resources is None:
            values: dict[str, dict[str, set]] = {}
            for stage in self.stages.values():
                by_key = values.setdefault(stage.kind, {})
                for key in RESOURCE_KEYS:
                    by_key.setdefault(key, set()).add(stage.resources.get(key))
            self._kind_resources = {k: {key: next(iter(vals)) for key, vals in by_key.items() if len(vals) == 1}
                                    for k, by_key in values.items()}
        return dict(self._kind_resources.get(kind, {}))

    def stages_for(self, run_ids: list[str]) -> list[str]:
        """Distinct stage ids the runs need, in first-needed order."""
        return list(dict.fromkeys(s for r in run_ids for s in self._chains[r]))

    def naive_count(self, run_ids: list[str]) -> int:
        """Stages if every run built its own chain (no sharing)."""
        return sum(len(self._chains[r]) for r in run_ids)

    def resolved(self, run_id: str) -> RunConfig:
        """The run's resolved config, typed (shared: never modified)."""
        return self.tree.resolved(run_id)

    def resolved_config(self, run_id: str) -> JsonObject:
        """The run's resolved config as its JSON (a copy: safe to modify)."""
        return self.tree.resolved_config(run_id)

    def run_identity(self, run_id: str) -> JsonObject:
        """run_identity of the run's resolved config, computed once."""
        if run_id not in self._identity:
            self._identity[run_id] = run_identity(self.tree.resolved(run_id))
        return self._identity[run_id]

    def lineage(self, run_id: str) -> list[dict]:
        return [{"run_id": s.run_id, "parent": s.parent, "knob": s.knob} for s in self.tree.lineage(run_id)]

    def evals(self, run_id: str) -> list[dict]:
        """What aggregate gets: one entry per (stage, seed), with the eval folder."""
        return [{"stage": r.stage, "seed": r.seed, "dir": stage_dir(r.eval_stage),
                 "model_stage": r.model_stage, "eval_stage": r.eval_stage}
                for r in self._runs[run_id]]

    def natural_evals(self, run_id: str) -> list[dict]:
        """The natural (source) model measured as the run measures, per seed: what "beats the
        natural base" compares with (the run's own s0 eval where it starts from base)."""
        return [{"stage": "natural", "seed": seed, "dir": stage_dir(sid), "eval_stage": sid}
                for seed, sid in sorted(self._natural[run_id].items())]

    def group(self, run_id: str) -> str:
        """The run's lineage as ``root/…/run`` (the wandb group of its stages)."""
        return "/".join(s.run_id for s in self.tree.lineage(run_id))

    def stage_owners(self) -> dict[str, str]:
        """Stage id → the run that introduced it: of the runs needing it, the one nearest the root
        (then by run-id). A shared stage is logged once, under that run's name."""
        order = sorted(self._runs, key=lambda r: (len(self.tree.lineage(r)), r))
        owners: dict[str, str] = {}
        for run_id in order:
            for sid in self._chains[run_id]:
                owners.setdefault(sid, run_id)
        return owners

    def index(self) -> PlanIndex:
        """What readers outside the parse need, without composing configs again: per run its
        stage ids (``chain``), model, start, stage chain, seeds, config hash and lineage group;
        per stage its owner run and role. ``conf_hash`` says which conf/ tree it was made from (the
        one the plan was made from, not conf/ as it is when the index is written)."""
        owners = self.stage_owners()
        return PlanIndex(conf_hash=self.conf_digest, runs={r: self._runs_info[r] for r in sorted(self._runs)},
                         stages={sid: IndexedStage(owner=owners[sid], job_type=self._labels[sid])
                                 for sid in sorted(self.stages)})

    def write_index(self, path: Path | str | None = None) -> PlanIndex:
        """Write ``results/_store/index.json`` (only when its content changed); returns the index."""
        path = Path(path) if path is not None else self.root / STORE / "index.json"
        index = self.index()
        write_text_if_changed(path, canonical_json(index.to_json()))
        return index

PLAN_CACHE = Path(".cache") / "plan"
PLANS_KEPT = 4   # the newest cached plans kept: a conf/ edit and back plans nothing


def plan_key(root: Path) -> tuple[str, Path]:
    """(conf_hash of conf/ now, the cached plan's file): the file is keyed by every file under
    conf/ (run files included, as bytes), the environment variables they read, the package's code,
    Hydra's and OmegaConf's versions and the root as given and resolved (the plan holds its paths)."""
    files = conf_files(root / "conf")
    digest = tree_digest(files)
    key = json.dumps([digest, env_digest(files), *code_and_versions(), str(root), str(root.resolve())])
    return digest, root / PLAN_CACHE / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.pkl"


def plan_cache_path(root: Path) -> Path:
    """The cached plan's file for conf/, the environment and the code as they are now (plan_key)."""
    return plan_key(root)[1]


def conf_hash(conf_dir: Path | str) -> str:
    """sha256 over every file under conf/ (relative path + bytes): tells a stale index."""
    return tree_digest(conf_files(Path(conf_dir)))


def current_index(root: Path | str) -> PlanIndex:
    """The index for conf/ as it is now: the stored one if its conf_hash matches, else computed in
    memory (composing every run). Reading never writes: the Snakefile's onstart is the one writer
    of index.json."""
    root = Path(root)
    index = read_index(root)
    # an index of an older format (runs without needs …) reads as None: computed again, never as "none"
    if index is not None and index.conf_hash == conf_hash(root / "conf"):
        return index
    return Plan.load(root).index()
