"""Rules across keys: a value can be in its domain and still impossible beside another
(world.splits draws distinct held-out questions; a Llama splits hidden_size evenly over its heads;
an episode reward needs an episode). ``relation_problem`` names the first broken one as (key, why),
checked when a run is composed, after each key's domain (config/schema.py).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Callable, Optional

from ..core.jsonvalue import Json
from ..core.settings import InChoices
from ..episodes import episode_problem
from ..episodes.section import simulate_section
from ..model.backend import backends
from ..model.serving import tensor_parallel_size
from ..rewards import rewards
from ..stages import uses_key
from ..world import worlds
from ..world.questions import config_problem
from ..world.section import WorldConfig
from .schema import ROLE_MODELS, domain_key, domains, model_class, run_config
from .sections import ModelConfig, RunConfig

# Rules across keys, each (the key named in the error, what must hold of the typed config, why).
RELATIONS: tuple[tuple[str, Callable[[RunConfig], bool], str], ...] = (
    ("world.n_heldout",
     lambda c: c.world.n_train + c.world.n_heldout <= c.world.n_clue_types ** c.world.clues_per_question,
     "n_train + n_heldout is more than the n_clue_types ** clues_per_question distinct questions"),
    ("model.num_heads",
     lambda c: c.model.hidden_size % c.model.num_heads == 0,
     "does not divide model.hidden_size (a Llama splits it evenly over its heads)"),
    ("model.distributed.nodes",
     lambda c: c.model.distributed.ranks % c.model.distributed.nodes == 0,
     "does not divide model.distributed.ranks (every node runs as many ranks)"),
    ("model.distributed.ranks",
     lambda c: _gpus_needed(c.model) <= c.model.resources.gpus or _gpus_needed(c.model) == 0,
     "a node's ranks (one GPU each) and, with backend vllm, its server's tensor_parallel_size on the first node "
     "need more GPUs than model.resources.gpus (a node's)"),
)


def _gpus_needed(model: ModelConfig) -> int:
    """GPUs a ranked stage on a GPU model needs on its first node (0: a CPU model or one rank)."""
    ranks, nodes = model.distributed.ranks, model.distributed.nodes
    if ranks == 1 or not model.resources.gpus:
        return 0
    server = model.backend == "vllm" and not model.server_url
    return ranks // nodes + (tensor_parallel_size(model) if server else 0)


def questions_file_problem(w: WorldConfig, root: Optional[Path]) -> Optional[str]:
    """world=jsonl: the file must exist, be valid and hold the questions the splits ask for (a
    relative path is read from the project ``root``, as the stages read it)."""
    known = worlds().get(w.name)
    if known is None or not known.reads_file:
        return None
    if not w.questions_file:
        return "world=jsonl needs a questions file (world.questions_file)"
    path = Path(w.questions_file)
    if root is not None and not path.is_absolute():
        path = root / path
    try:
        st = path.stat()
    except OSError:
        return f"{path}: file: not found (`martingale questions export-synthetic` writes one)"
    return _cached_questions_problem(str(path), st.st_mtime_ns, st.st_size, w.n_train, w.n_heldout)


# (path, mtime_ns, size, n_train, n_heldout) -> the problem found (None: fine). The cached plan
# carries it (Plan.load), so a fresh process only stats the files.
QUESTIONS_CHECKED: dict[tuple[str, int, int, int, int], Optional[str]] = {}


def _cached_questions_problem(path: str, mtime_ns: int, size: int, n_train: int, n_heldout: int) -> Optional[str]:
    """One read of a questions file per version of it (every run of a campaign shares it)."""
    key = (path, mtime_ns, size, n_train, n_heldout)
    if key not in QUESTIONS_CHECKED:
        QUESTIONS_CHECKED[key] = config_problem({"questions_file": path, "n_train": n_train, "n_heldout": n_heldout})
    return QUESTIONS_CHECKED[key]


def _episode_reward_problem(run: RunConfig, root: Optional[Path]) -> Optional[tuple[str, str]]:
    """A reward that reads an episode's trajectory (rewards.EPISODE_INPUTS) belongs on an instructor
    stage: a train stage's rollouts have no episode."""
    for name, st in run.stages.steps().items():
        r = rewards().get(st.reward) if st.reward is not None else None
        if r is not None and r.episodic and st.kind != "instructor":
            return (f"stages.{name}.reward", f"{r.name} scores a two-agent episode: only an instructor stage "
                    f"has one (stages.{name}.kind is {st.kind})")
    return None


def _episodes_prompts_problem(run: RunConfig, root: Optional[Path]) -> Optional[tuple[str, str]]:
    """Two-agent episodes run in the embedded format, or between chat models with a prompt set's
    episode prompts (conf/prompts/c2.yaml): each mode needs its instructor prompt; a trained
    instructor is a local model; each role's model keys must be model keys;
    an api role plays with the verbal read (an endpoint gives no prefilled next-token log-probs),
    and a run's own model is never an api (it is read and trained through token log-probs)."""
    episode, sim = run.prompts.episode, simulate_section(run.extension("simulate"))
    if run.model.backend == "api":
        return ("model.backend", "api plays a two-agent episode's role only (simulate.human_model / "
                "instructor_model): a run's own model is read and trained through token log-probs (hf or vllm)")
    roles = [r for r in ROLE_MODELS if getattr(sim, r.split(".")[1]) is not None]
    plays = uses_key(run, "simulate")   # a kind in its chain plays episodes: simulate, instructor
    if roles and (not episode or not plays):
        return (roles[0], "a role's model plays chat episodes only (eval.kind=simulate with a prompt set that "
                "has episode prompts, e.g. prompts=c2)")
    for role in roles:
        over = getattr(sim, role.split(".")[1])
        if not isinstance(over, dict):
            return (role, f"a mapping of model keys to change for this role, got {over!r}")
        problem = _model_override_problem(role, over)
        if problem:
            return problem
        if over.get("backend") == "api" and run.elicit.read == "forced" and role.endswith("human_model"):
            return ("elicit.read", "forced with an api human (simulate.human_model.backend=api): an endpoint "
                    "returns text, not a next-token distribution (use elicit.read=verbal)")
    if not plays:
        return None
    over = sim.instructor_model or {}
    if episode and uses_key(run, "instructor") and over.get("backend", run.model.backend) == "api":
        return ("simulate.instructor_model", "an instructor stage trains a local model (hf or vllm, LoRA): "
                "an api instructor returns text, not token log-probs")
    return episode_problem(run)


def _model_override_problem(role: str, over: dict) -> Optional[tuple[str, str]]:
    """A role's model keys: each a key of the model schema, its value in the key's domain."""
    from omegaconf import OmegaConf
    try:
        OmegaConf.merge(OmegaConf.structured(model_class()), over)
    except Exception as e:   # an unknown key or a wrong type: OmegaConf says which
        key = getattr(e, "full_key", None) or ""
        return (f"{role}.{key}" if key else role, str(e).splitlines()[0])

    def leaves(d: dict, prefix: str) -> list[tuple[str, Json]]:
        out = []
        for k, v in d.items():
            out += leaves(v, f"{prefix}.{k}") if isinstance(v, dict) else [(f"{prefix}.{k}", v)]
        return out
    for key, value in leaves(over, role):
        if key == f"{role}.backend" and value not in backends():
            return (key, f"{value!r} is not one of: {', '.join(backends())}")
        domain = domains().get(domain_key(key))
        problem = domain.problem(value) if domain is not None and not isinstance(domain, InChoices) else None
        if problem:
            return (key, problem)
    return None


def _forced_read_problem(run: RunConfig, root: Optional[Path]) -> Optional[tuple[str, str]]:
    """elicit.read=forced reads the answer's next-token distribution after the prompt set's
    prefix: the prompt set must have one (for a judge read too), and an api judge gives none."""
    if run.elicit.read != "forced":
        return None
    prompts, elicit = run.prompts, run.elicit
    if run.eval.prior_draws and elicit.mode == "snap":
        return ("eval.prior_draws", "the forced snap prior is one deterministic read (no draws to "
                "de-attenuate): set eval.prior_draws=0 or elicit.read=verbal")
    if not prompts.forced_prefix:
        return ("elicit.read", f"forced needs a forced-answer prefix: prompts={prompts.name} has no "
                "prompts.forced_prefix (the research log's prompts: \"P = 0.\")")
    if elicit.mode == "samemode" and elicit.judge == "self" and not prompts.judge_forced_prefix:
        return ("elicit.read", f"forced with the self judge needs prompts.judge_forced_prefix "
                f"(prompts={prompts.name} has none)")
    if elicit.mode == "samemode" and elicit.judge == "api":
        return ("elicit.read", "forced with elicit.judge=api: the api judge returns text, not a next-token "
                "distribution (use elicit.read=verbal)")
    return None


# Checks whose message depends on what they find: (key, check(typed config, project root)
# -> why, (key, why) or None).
Check = Callable[[RunConfig, Optional[Path]], "str | tuple[str, str] | None"]
CHECKS: tuple[tuple[str, Check], ...] = (
    ("world.questions_file", lambda run, root: questions_file_problem(run.world, root)),
    ("stages.*.reward", _episode_reward_problem),
    ("prompts.name", _episodes_prompts_problem),
    ("elicit.read", _forced_read_problem),
)


def relation_problem(cfg: RunConfig | Mapping[str, object], root: Optional[Path] = None) -> tuple[str, str] | None:
    """The first cross-key rule (RELATIONS, then CHECKS) the resolved config breaks: (key, why), else None."""
    run = run_config(cfg, "config")
    for key, holds, why in RELATIONS:
        if not holds(run):
            return key, why
    for key, check in CHECKS:
        found = check(run, root)
        if found:
            return found if isinstance(found, tuple) else (key, found)   # a check may name the exact key
    return None

