"""The run plan: every run (and seed) as a chain of content-addressed stages.

A stage's id is ``<kind>-<12 hex>``, the sha256 of the canonical JSON of its kind, the config slice
that affects it and its upstream ids (a Merkle chain). Two runs with a common prefix therefore share
the ids of that prefix, and Snakemake builds each distinct stage once in
``results/_store/<kind>/<id>/``.

The kinds and where they go come from the stage-kind registry (``martingale.stages``): a source
makes the start model (pretrain, or local weights), a start kind may turn it into D (distill), each
step s1, s2 … with a reward trains from the model before it (``stages.<name>.kind``), and a measure
(``eval.kind``) reads every model stage for each seed. The judge (``elicit.judge_model``) is the
natural model — the source stage, one judge fixed across a campaign — or the run's start model; a
two-agent episode's human is always the start model.
What of a setting enters a stage's id, and a run's identity, is declared at the setting
(``settings.setting(in_id=...)``: one rule, settings.identity): ``model.resources`` (scheduling only)
is not hashed, so asking for more memory does not invalidate a model. ``wandb`` is in no slice.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional

from ..config import sections as core
from ..config.checks import QUESTIONS_CHECKED
from ..config.digest import code_and_versions, conf_files, env_digest, tree_digest
from ..config.runs import RunTree
from ..config.schema import declared_sections
from ..core.settings import identity
from ..rewards import reward_settings, rewards
from ..stages import StageKind, kinds, uses_key
from ..store import STORE, read_index, stage_dir
from ..store.files import canonical_json, read_pickle, write_pickle, write_text_if_changed
from ..training import ranks_of
from .needs import Need, stage_needs, unmet


@dataclass(frozen=True)
class Stage:
    """A planned stage: its kind, id, config slice (what its id hashes), input stage ids and resources."""
    kind: str
    id: str
    cfg: dict                          # the slice passed to the stage body (and hashed)
    inputs: dict[str, str]             # role (base_model, start_model, judge_model, human_model, model) -> stage id
    resources: dict[str, Any] = field(default_factory=dict, compare=False)


class RunStage(NamedTuple):
    """One stage of a run for one seed: its model stage and the eval that reads it."""
    stage: str          # s0, s1, s2
    seed: int
    model_stage: str    # id of the stage that made the model (weights/pretrain/distill/train)
    eval_stage: str     # id of its eval stage


def sha256_json(obj: Any) -> str:
    """sha256 hex of an object's compact sorted-key JSON (the C encoder: thousands per second)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def stage_id(kind: str, cfg: dict, inputs: dict[str, str]) -> str:
    """``<kind>-<first 12 hex of sha256>`` of the canonical (sorted-key, compact) JSON."""
    return f"{kind}-{sha256_json({'kind': kind, 'slice': cfg, 'upstream': inputs})[:12]}"


def backend_sections(model: dict) -> dict[str, bool]:
    """Each backend's section under ``model`` (its key) → whether this model uses it: its backend is
    the one that declared it, or the section was in every generating stage's id before backends
    declared sections (``in_every_run``: vllm's)."""
    return {key: always or model.get("backend") == name for key, name, always in _backend_sections()}


def _backend_sections() -> tuple[tuple[str, str, bool], ...]:
    """(key, backend, in_every_run) of each backend's section."""
    return tuple((d.section.key, d.name, d.section.in_every_run) for d in declared_sections() if d.by == "backend")


def section_class(key: str) -> Optional[type]:
    """The dataclass of a top-level section (a core one, or the one an extension declares): whose
    settings declare what of them enters an id (settings.identity)."""
    return CORE_SECTIONS.get(key) or next((d.section.schema for d in declared_sections() if d.path == key), None)


CORE_SECTIONS: dict[str, type] = {"world": core.WorldConfig, "model": core.ModelConfig, "elicit": core.ElicitConfig,
                                  "eval": core.EvalConfig, "prompts": core.PromptsConfig}


def _model_slice(model: dict, kind: Optional[StageKind]) -> dict:
    """The model as its settings declare it enters an id (settings.identity: where and how it is served,
    the batch sizes only where set), a backend's section only where the stage generates with that
    backend (backend_sections), and a training kind's thread count."""
    used = backend_sections(model)
    out = {k: v for k, v in identity(core.ModelConfig, model, kind).items()
           if used.get(k, True) and (k not in used or kind is None or kind.serves)}
    threads = compute_threads(model, kind) if kind is not None else None
    if threads is not None:
        out["threads"] = threads
    return out


def compute_threads(model: dict, kind: StageKind) -> Optional[int]:
    """The torch threads a training kind computes with on a CPU model (``resources.cpus``), part of
    what it computes: its gradient's sums are split by thread. None: any count gives the same bytes
    (a kind that only reads the model, measured for evaluate) or the model is on GPUs."""
    r = model.get("resources") or {}
    if not kind.trains or int(r.get("gpus") or 0) > 0:
        return None
    return kind_cpus(r, kind.name)


def kind_cpus(resources: dict, kind: str) -> int:
    """The CPUs a stage of this kind asks for: ``resources.cpus``, or ``pretrain_cpus`` for pretrain."""
    if kind == "pretrain" and resources.get("pretrain_cpus"):
        return int(resources["pretrain_cpus"])
    return int(resources.get("cpus", 1))


def step_config(stage: dict) -> dict:
    """A step's own config (``stages.<s>``) without the keys other rewards bring (reward_settings):
    a reward's new key is in a stage's id only where that stage's reward declares it."""
    mine = rewards()[stage["reward"]].settings if stage.get("reward") in rewards() else {}
    others = [k for k in reward_settings() if k not in mine]
    return {k: v for k, v in stage.items() if k not in others}


def section_identity(key: str, value: Any, kind: Optional[StageKind]) -> Any:
    """A top-level section as a stage of ``kind`` (None: the run) hashes it."""
    if key == "model":
        return _model_slice(value, kind)
    cls = section_class(key)
    return identity(cls, value, kind) if cls is not None and isinstance(value, dict) else value


# Core keys a stage sees only where they are used, so a run that does not keeps its ids whatever
# they say: prompts.* where the prompt set is not the embedded model's own format. A reader's own
# section is seen the same way (reader_section): where the run reads beliefs with that reader.
USED_WHEN: dict[str, Callable[[dict], bool]] = {
    "prompts": lambda cfg: cfg.get("prompts", {}).get("name", "embedded") != "embedded",
}


def reader_section(cfg: dict) -> Optional[str]:
    """The key of the section of the reader the run reads beliefs with (``elicit.judge``), if it
    declares one (the api reader's ``judge``: its address too, like a generating stage's serving
    keys; a rebuild at a new address reads the same answers from the cache)."""
    judge = (cfg.get("elicit") or {}).get("judge")
    return next((d.path for d in declared_sections() if d.by == "reader" and d.name == judge), None)


def stage_slice(kind: StageKind, cfg: dict, step: Optional[str] = None, seed: Optional[int] = None) -> dict:
    """The config a stage of this kind sees (and its id hashes): the kind's keys, each section as its
    settings declare they enter an id (section_identity; its own section is one of them), the
    section of the reader it reads beliefs with (a kind that reads ``elicit``), the step's own
    config as ``stage``, the seed for a per-seed kind."""
    keys = [*kind.keys]
    if "elicit" in kind.keys and reader_section(cfg) is not None:
        keys.append(reader_section(cfg))
    out = {key: section_identity(key, cfg[key], kind) for key in keys if key not in USED_WHEN or USED_WHEN[key](cfg)}
    if step is not None:
        out["stage"] = step_config(cfg["stages"][step])
    if kind.per_seed:
        out["seed"] = seed
    return out


def run_seeds(cfg: dict) -> list[int]:
    """The seeds a run's chains are built on: ``seeds``, each plus ``seed_offset`` (a reseed)."""
    return [int(s) + int(cfg.get("seed_offset") or 0) for s in cfg["seeds"]]


def _one_kind(place: str, cfg: dict, name: Optional[str] = None) -> StageKind:
    """The kind for a place: the one named, else the one whose ``when`` holds for this run."""
    candidates = [k for k in kinds().values() if k.place == place and
                  (k.name == name if name is not None else (k.when is None or k.when(cfg)))]
    if len(candidates) != 1:
        raise ValueError(f"no single {place} stage kind for this run ({name or 'by when'}): "
                         f"{[k.name for k in candidates]}")
    return candidates[0]


RESOURCE_KEYS = ("threads", "mem_mb", "runtime", "gpu", "gpu_model", "device", "nodes")   # what _resources may set


def _resources(model: dict, kind: Optional[StageKind] = None) -> dict[str, Any]:
    """What a stage on this model asks a scheduler for, as Snakemake resources: ``threads``,
    ``mem_mb``, ``runtime`` (minutes) always; ``gpu`` (count) and ``gpu_model`` only when the model
    needs GPUs (``gpus`` > 0), so a CPU stage carries no GPU resource at all. ``gpu``/``gpu_model``
    are the names snakemake-executor-plugin-slurm turns into ``sbatch --gpus=<model>:<n>``.
    ``device`` (model.device) is where the job puts its model: a string resource, so it reaches
    the job (smk.run_stage) without being in the stage's id. A ranked kind on N ranks over M nodes
    asks, on each node, for N/M times the CPUs and memory of one (``gpus`` is a node's, already),
    and ``nodes`` where M > 1. A stage that takes no ranked steps on a vLLM-served model asks for
    its server's GPUs (``vllm.tensor_parallel_size``) where that is fewer than the node's."""
    r = model.get("resources") or {}
    per_node = 1
    nodes = 1
    if kind is not None and kind.ranked:
        ranks, _, nodes = ranks_of(model)
        per_node = ranks // nodes
    out: dict[str, Any] = {
        "device": str(model.get("device", "auto")),
        "threads": kind_cpus(r, kind.name if kind is not None else "") * per_node,
        "mem_mb": int(r.get("mem_mb", 1000)) * per_node,
        "runtime": int(r.get("runtime_min", 60)),
    }
    gpus = int(r.get("gpus") or 0)
    if gpus > 0 and kind is not None and not kind.ranked and model.get("backend") == "vllm":
        gpus = min(gpus, int((model.get("vllm") or {}).get("tensor_parallel_size") or gpus))
    if gpus > 0:
        out["gpu"] = gpus
        if r.get("gpu_model"):
            out["gpu_model"] = str(r["gpu_model"])
    if nodes > 1:
        out["nodes"] = nodes
    return out


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
        self._runs_info: dict[str, dict] = {}  # run id -> model, start, stage chain, seeds, hash
        self._chain_lengths: Optional[dict[str, int]] = None
        self._priorities: Optional[dict[str, int]] = None
        self._kind_resources: Optional[dict[str, dict[str, Any]]] = None
        self._identity: dict[str, dict] = {}          # run id -> run_identity of its config (the aggregate's param)
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
    def _add(self, kind: StageKind, cfg: dict, inputs: dict[str, str], label: str,
             step: Optional[str] = None, seed: Optional[int] = None) -> str:
        """Plan one stage: ``inputs`` maps ``model`` (the model upstream), ``judge`` and ``human``
        to ids; the kind's input roles pick from them (``judge_model`` = the judge, ``human_model``
        = the episodes' human, any other the model)."""
        pick = {"judge_model": "judge", "human_model": "human"}
        roles = {role: inputs[pick.get(role, "model")] for role in kind.inputs}
        slice_ = stage_slice(kind, cfg, step, seed)
        sid = stage_id(kind.name, slice_, roles)
        if sid not in self.stages:
            self.stages[sid] = Stage(kind.name, sid, slice_, roles, _resources(cfg["model"], kind))
            self._labels[sid] = label
        return sid

    def _plan_run(self, run_id: str) -> None:
        cfg = self.tree.resolve(run_id)  # cached, validated; not mutated here
        source = _one_kind("source", cfg)
        natural = self._add(source, cfg, {}, source.name)
        chain, steps = [natural], [source.name]
        starts = [k for k in kinds().values() if k.place == "start" and k.when(cfg)]
        steps += [f"{kind.name}:{cfg['start']}" for kind in starts]
        trained = [name for name, st in cfg["stages"].items() if st.get("reward") is not None]
        steps += [f"{name}:{cfg['stages'][name]['reward']}" for name in trained]
        measure = _one_kind("measure", cfg, cfg["eval"]["kind"])
        rows: list[RunStage] = []
        reference: dict[int, str] = {}
        for seed in run_seeds(cfg):
            s0 = natural
            for kind in starts:          # a start kind (D's distill) per seed where it is per_seed
                s0 = self._add(kind, cfg, {"model": s0}, f"{kind.name}-{cfg['start']}",
                               seed=seed if kind.per_seed else None)
                chain.append(s0)
            judge = natural if cfg["elicit"].get("judge_model", "base") == "base" else s0
            current = s0
            for name in ["s0", *trained]:
                if name != "s0":
                    step = _one_kind("step", cfg, cfg["stages"][name]["kind"])
                    current = self._add(step, cfg, {"model": current, "judge": judge, "human": s0},
                                        f"{step.name}-{name}", step=name, seed=seed)
                    chain.append(current)
                ev = self._add(measure, cfg, {"model": current, "judge": judge, "human": s0}, f"eval-{name}", seed=seed)
                rows.append(RunStage(name, seed, current, ev))
                chain.append(ev)
            # the natural model read the same way: "beats the natural base" (its s0 where start=base)
            reference[int(seed)] = self._add(measure, cfg, {"model": natural, "judge": judge, "human": natural},
                                             "eval-natural", seed=seed)
            chain.append(reference[int(seed)])
        self._natural[run_id] = reference
        self._runs[run_id] = rows
        self._chains[run_id] = list(dict.fromkeys(chain))
        model = cfg["model"]
        self._runs_info[run_id] = {
            "model": model.get("name"), "start": cfg["start"], "elicit": cfg["elicit"].get("mode"),
            "stage_chain": steps, "seeds": run_seeds(cfg),
            "config_hash": "sha256:" + sha256_json(self.run_identity(run_id)), "wandb": dict(cfg.get("wandb") or {}),
            "needs": [n.tag for n in self.run_needs(run_id)],
        }

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

    def kind_resources(self, kind: str) -> dict[str, Any]:
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

    def resolved_config(self, run_id: str) -> dict:
        return self.tree.resolved_config(run_id)

    def run_identity(self, run_id: str) -> dict:
        """run_identity of the run's resolved config, computed once (read-only: it shares the
        tree's cached config; resolved_config gives a copy to modify)."""
        if run_id not in self._identity:
            self._identity[run_id] = run_identity(self.tree.resolve(run_id))
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

    def index(self) -> dict[str, Any]:
        """What readers outside the parse need, without composing configs again: per run its
        stage ids (``chain``), model, start, stage chain, seeds, config hash and lineage group;
        per stage its owner run and role. ``conf_hash`` says which conf/ tree it was made from (the
        one the plan was made from, not conf/ as it is when the index is written)."""
        owners = self.stage_owners()
        runs = {r: {"chain": list(self._chains[r]), "group": self.group(r), **self._runs_info[r]}
                for r in sorted(self._runs)}
        stages = {sid: {"owner": owners[sid], "job_type": self._labels[sid]} for sid in sorted(self.stages)}
        return {"conf_hash": self.conf_digest, "runs": runs, "stages": stages}

    def write_index(self, path: Path | str | None = None) -> dict[str, Any]:
        """Write ``results/_store/index.json`` (only when its content changed); returns the index."""
        path = Path(path) if path is not None else self.root / STORE / "index.json"
        index = self.index()
        write_text_if_changed(path, canonical_json(index))
        return index


NOT_RUN_IDENTITY = ("budget",)   # what a build may cost, not what a run is: never makes a run stale


def unused_sections(cfg: dict) -> list[str]:
    """The top-level sections extensions declare that this run does not use: a stage kind's where
    no kind of its chain reads it, a reader's where the run reads with another (none of them a
    section that was in every run's identity before extensions declared theirs)."""
    judge = (cfg.get("elicit") or {}).get("judge")
    out = []
    for d in declared_sections():
        if d.by == "backend" or d.section.in_every_run:
            continue
        used = uses_key(cfg, d.path) if d.by == "stage kind" else judge == d.name
        if not used:
            out.append(d.path)
    return out


def run_identity(cfg: dict) -> dict:
    """A resolved config without the keys that say nothing about the run (NOT_RUN_IDENTITY), nor
    what it does not use — the sections extensions declare (``simulate`` where it plays no episode,
    ``instructor`` where it trains none: unused_sections; a backend's section off that backend), a
    reward's key where the stage's reward is another — so a new key there leaves every other run
    fresh; nor ``prompts.episode`` or a role's model where null (chat episodes' keys)."""
    unused = unused_sections(cfg)
    out = {k: section_identity(k, v, None) for k, v in cfg.items() if k not in (*NOT_RUN_IDENTITY, *unused)}
    if "stages" in out:
        out["stages"] = {name: step_config(st) for name, st in out["stages"].items()}
    return out


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


def config_hash(cfg: dict) -> str:
    """``sha256:<hex>`` of a resolved config's run identity (sha256_json): equal configs, equal hashes."""
    return "sha256:" + sha256_json(run_identity(cfg))


def conf_hash(conf_dir: Path | str) -> str:
    """sha256 over every file under conf/ (relative path + bytes): tells a stale index."""
    return tree_digest(conf_files(Path(conf_dir)))


def current_index(root: Path | str) -> dict[str, Any]:
    """The index for conf/ as it is now: the stored one if its conf_hash matches, else computed in
    memory (composing every run). Reading never writes: the Snakefile's onstart is the one writer
    of index.json."""
    root = Path(root)
    index = read_index(root)
    # an index from before runs had needs is of an older format: computed again, never read as "none"
    if index is not None and index.get("conf_hash") == conf_hash(root / "conf") \
            and all("needs" in r for r in index["runs"].values()):
        return index
    return Plan.load(root).index()
