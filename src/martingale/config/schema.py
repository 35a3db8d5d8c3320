"""Structured-config schema: every key a run may set, with its type and default.

Registered in Hydra's ConfigStore as ``martingale_schema`` and named first in ``conf/config.yaml``'s
defaults, so composing an unknown key or a value of the wrong type is an error naming the key.
Every leaf key also has a domain (``DOMAINS``: a range, an enum, a name, a path), checked when a
run is composed, so a value out of range is an error naming the key too.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional

from ..io import system_path_problem
from ..model.api_client import ApiModelConfig


@dataclass
class WorldConfig:
    """The question source: the embedded synthetic world, or a JSONL file for real models."""
    name: str = "synthetic"
    seed: int = 0                 # draws the clue likelihood table and the question splits
    base_rate: float = 0.3        # P(y = 1)
    n_clue_types: int = 40        # distinct clues; each has a fixed log-likelihood ratio
    clues_per_question: int = 8   # clues listed in a question, read one by one by a reasoner
    dirichlet_alpha: float = 6.0  # concentration of the two clue distributions (y = 1, y = 0)
    logodds_unit: float = 0.25    # nats per integer step written in traces
    max_step: int = 12            # |rounded llr| cap, in units
    snap_clues: float = 0.5       # the gut (snap) prior reads this first fraction of the clues only ...
    snap_gain: float = 3.0        # ... and weighs each vote at this × the average clue strength (it jumps)
    snap_noise: float = 2.0       # sd (nats) of the gut prior's per-draw noise. With these three the snap
                                  # prior is a different functional, not only a noisy read: de-attenuation
                                  # leaves MS_adj < 0, as the log's table (base −0.548 → MS_adj −0.321)
    n_train: int = 640            # training questions
    n_heldout: int = 1000         # disjoint held-out questions (eval)
    questions_file: Optional[str] = None  # JSONL of real questions (world=jsonl)


@dataclass
class Resources:
    """What a stage on this model asks a scheduler for (Snakemake resources)."""
    cpus: int = 2
    mem_mb: int = 4000
    gpus: int = 0
    gpu_model: Optional[str] = None
    runtime_min: int = 60
    pretrain_cpus: Optional[int] = None   # the pretrain stage's CPUs (it runs alone at the start of every chain); null: cpus


@dataclass
class VLLMConfig:
    """The vLLM server a stage starts for ``backend: vllm`` (model/vllm.py), its client and its guards."""
    python: str = ".venv-vllm/bin/python"   # vLLM's own environment (make vllm)
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.85     # per server: a self judge on another model starts a second one
    max_lora_rank: int = 16
    cpu_kv_cache_gib: int = 1                # VLLM_CPU_KVCACHE_SPACE for the CPU build
    startup_timeout_s: int = 900
    request_timeout_s: int = 300
    concurrency: int = 16                    # requests in flight
    retries: int = 2
    reload_every: int = 1                    # training: reload the adapter in the server every k steps
    parity_tol: float = 0.01                 # max |log-prob vLLM − HF| on the probe prompts
    adapter_floor: float = 1e-5              # an adapter must move some probe log-prob by more
    extra_args: list[str] = field(default_factory=list)   # more `vllm serve` flags, verbatim


@dataclass
class ModelConfig:
    """A causal LM: the embedded tiny Llama (built and pretrained here) or local weights."""
    name: str = "tiny"
    family: str = "llama"
    path: Optional[str] = None    # local HF folder; None = pretrain the embedded model
    backend: str = "hf"           # hf (transformers in-process) | vllm (a vLLM server, its own env) | api (an
                                  # OpenAI-compatible chat endpoint: an episode role only, simulate.human_model)
    hidden_size: int = 96
    num_layers: int = 3
    num_heads: int = 3            # head_dim = hidden_size / num_heads = 32: a size vLLM's CPU attention serves (24 is refused)
    intermediate_size: int = 256
    max_length: int = 96
    dtype: str = "float32"        # float32 | bfloat16 | float16 | auto (bfloat16 on a GPU, float32 on a CPU)
    device: str = "auto"          # auto (CUDA when one is visible) | cuda | cpu; where, not what: not in stage ids
    lora_targets: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    generate_batch: int = 0       # hf: prompts per generate call, grouped by length (0 = all at once); a
                                  # real model's prompts vary in length, and left-padding to the longest is slow
    loss_batch: int = 0           # training: rollout rows per forward/backward of the loss, gradients accumulated
                                  # (0 = the whole rollout at once); a real model's long prompts do not fit at once
    server_url: Optional[str] = None  # backend vllm: a server you run (served as model.name); null = one per stage
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    api: ApiModelConfig = field(default_factory=ApiModelConfig)
    resources: Resources = field(default_factory=Resources)


@dataclass
class PretrainConfig:
    """Next-token training of the embedded model on calibrated traces, snap answers and reads."""
    seed: int = 0
    steps: int = 800
    batch_size: int = 64
    lr: float = 3e-3
    warmup: int = 50
    snap_fraction: float = 0.25
    read_fraction: float = 0.15
    negation_fraction: float = 0.25
    # The natural base's teacher: calibrated (the Bayes reasoner), or miscalibrated as the log's real
    # natural bases were (Llama-3.1-8B: Brier 0.2546 against the constant's 0.211, mean belief ≈ +0.1
    # above the base rate): it leans yes_shift nats toward yes, sharpens every step and misreads a
    # clue's sign with probability misread (poor resolution). Its keys are in no id while calibrated.
    teacher: str = "calibrated"   # calibrated | miscalibrated
    yes_shift: float = 0.5        # nats
    sharpen: float = 1.3
    misread: float = 0.3


@dataclass
class DistillConfig:
    """SFT of a LoRA adapter on confirmation-biased traces: the biased start model D."""
    seed: int = 0
    steps: int = 300
    batch_size: int = 32
    lr: float = 3e-3
    lora_r: int = 16
    agree_weight: float = 1.8     # multiplier on clues that agree with the current lean
    disagree_weight: float = 0.5  # multiplier on clues that disagree with it
    weight_jitter: float = 0.3    # sd of per-step noise on the multipliers (keeps D stochastic)
    # drift (default): the log's D as it describes it (meanP 0.61–0.64 against a base rate ≈ 0.30,
    # extremizing along its trace): entrench's weights plus yes_drift nats toward yes at every step,
    # so its lean grows along the trace and its mean update is toward yes. overconfident: leans yes
    # from the start and sharpens every step (yes_shift, sharpen), and its reasoning corrects the
    # lean (mean update < 0), where A's mean term pays for not correcting (README, FINDINGS A-on-D);
    # entrench: agree/disagree_weight only; both: entrench + overconfident.
    teacher: str = "drift"        # drift | overconfident | entrench | both
    yes_shift: float = 2.5        # nats the over-confident teacher starts toward yes
    sharpen: float = 1.3          # its multiplier on every step (beliefs more extreme than the evidence)
    yes_drift: float = 0.25       # nats per step


@dataclass
class StageConfig:
    """One model stage (s1, s2, ...); ``reward: null`` means the stage is absent."""
    kind: str = "train"           # a registered step kind (martingale.stages): train = policy gradient
    reward: Optional[str] = None  # a registered reward (martingale.rewards.REWARDS); null: the stage is absent
    filter: Optional[str] = None  # top-half | top-quartile of the start model's |Δ|; null = all
    epochs: int = 1
    lr: float = 1e-3
    kl_beta: float = 0.1
    lora_r: int = 8
    batch_questions: int = 8      # questions per step
    generations: int = 4          # sampled traces per question
    temperature: float = 1.0
    adv_clip: float = 3.0
    info_coef: float = 1.0
    info_eps: float = 0.02
    lam: float = 0.5              # C: λ·z(A) + (1 − λ)·z(B)
    balance: bool = True          # add each question's negation (y' = 1 − y)
    checkpoint_every: int = 20    # steps between resumable checkpoints (stages/checkpoint.py); 0 = none


@dataclass
class StagesConfig:
    s1: StageConfig = field(default_factory=StageConfig)
    s2: StageConfig = field(default_factory=StageConfig)


@dataclass
class ElicitConfig:
    """How prior and posterior are read: snap prior + reasoned posterior, or one trace at cut/100%."""
    mode: str = "samemode"        # snap | samemode
    judge: str = "self"           # samemode reader: self | trace | oracle | api
    judge_model: str = "base"     # the model a self reader asks: base = the natural model, one judge fixed
                                  # across a campaign (the log's external judge); start = the run's start model
    cut: float = 0.5              # fraction of the trace read as the prior (samemode)
    read: str = "verbal"          # which read the prior, posterior and stated P (Brier, MS) come from:
                                  # verbal = the P = X the model writes (parsed; unparsed counted);
                                  # forced = its next-token distribution after prompts.forced_prefix
                                  # (beliefs/forced.py). Both are recorded where the prompt set has a prefix.


@dataclass
class EpisodePromptsConfig:
    """A chat episode's prompts (episodes/chat.py; conf/prompts/c2.yaml): the human's persona
    and turns, the instructor's system prompt per mode. Fields: the question's ({question},
    {background}, {resolution_criteria}, {opt}), {lean_pct} (the persona's starting P in %),
    {message} (what the instructor said), {human_message} and {p} (the human's last reply and P)."""
    human_system: str = ""
    human_first: str = ""          # the question, and the first ask for P
    human_turn: str = ""           # after an instructor's message
    human_alone: str = ""          # simulate.mode=none: no instructor, the human reconsiders on its own
    human_reask: str = ""          # simulate.mode=reask: the human is only asked again
    instructor_turn: str = ""
    instructor: Dict[str, str] = field(default_factory=dict)   # mode → the instructor's system prompt
    reply_max_tokens: int = 160    # a human's reply
    instructor_max_tokens: int = 120
    scale: str = "p"               # p: the human states P = X in [0, 1]; r: R = X in [−1, 1] (the log's rparam), P = (X + 1)/2


@dataclass
class PromptsConfig:
    """What a model is asked (beliefs/prompts.py): ``embedded`` = the embedded model's own format;
    another set holds the templates, with {question}, {background}, {resolution_criteria}, {opt}
    and, for the judge, {trace} (the reasoning so far, probabilities hidden)."""
    name: str = "embedded"
    chat: bool = False            # render through the tokenizer's chat template (a chat model)
    snap: str = ""
    reasoned: str = ""
    judge: str = ""
    max_new_tokens: int = 1024    # a reasoned trace's length cap (the embedded format: 4 · clues + 6)
    snap_max_tokens: int = 128    # a snap answer's
    judge_max_tokens: int = 8     # a same-mode read's answer length (a number)
    context_words: Optional[int] = None  # cut each question's background and resolution criteria to their
                                  # first n words (a CPU's prompt budget: ForecastBench's run to 1,400 tokens); null = whole
    forced_prefix: str = ""       # the forced-answer read (beliefs/forced.py): the model's answer is prefilled
                                  # with this (e.g. "P = 0.") and its P read from the next token's distribution;
                                  # "" = no forced read
    judge_forced_prefix: str = "" # the same for the judge's answer (e.g. "0."); "" = no forced judge read
    forced_min_mass: float = 0.5  # a forced read whose valid-answer tokens hold less of the next-token mass
                                  # (among the top 20) is unparsed, never a number
    episode: Optional[EpisodePromptsConfig] = None   # chat episodes' prompts (conf/prompts/c2.yaml); null = none


@dataclass
class JudgeConfig:
    """An OpenAI-compatible judge for ``elicit.judge=api`` (beliefs/api_judge.py): greedy, cached.
    Only model, chat and max_tokens are what it computes (in stage ids); the rest is how to reach it."""
    base_url: Optional[str] = None            # e.g. https://api.deepseek.com/v1 or a vLLM server's http://host:port/v1
    model: Optional[str] = None               # the served model name, e.g. deepseek-chat
    chat: bool = False                        # /chat/completions (a chat model) instead of /completions
    max_tokens: int = 8
    api_key_env: str = "MARTINGALE_JUDGE_API_KEY"   # the variable holding the key; never written
    concurrency: int = 8                      # requests in flight
    timeout_s: int = 60                       # per request
    retries: int = 4                          # on 429, 5xx, timeouts, dropped connections, unreadable bodies
    backoff_s: float = 1.0                    # first retry's wait, doubled each retry (at most 30 s)
    cache_dir: str = "results/_judge_cache"   # answers by (model, prompt, parameters): a rerun never pays twice


@dataclass
class EvalConfig:
    """How every model stage is measured, per seed."""
    kind: str = "evaluate"        # a registered measure kind (martingale.stages)
    temperature: float = 1.0
    n_bootstrap: int = 1000
    ci: float = 0.95
    prior_draws: int = 0          # K extra snap-prior draws per question (snap mode): de-attenuated MS; 0 = off
    negations: bool = False       # also ask each held-out question's negation: coherence |P(A) + P(¬A) − 1|
    balance: bool = False         # evaluate on held-out + each question's negation as questions of their own:
                                  # ȳ = 0.5, the base-rate constant's Brier 0.25 (the log's balanced regime)
    min_parse_rate: float = 0.0   # an eval whose answers state a P less often fails, quoting some (conf/config.yaml: 0.5)


@dataclass
class SimulateConfig:
    """Two-agent episodes (``eval.kind=simulate``: stages/simulate.py, episodes/synthetic.py), also
    what an instructor stage plays while it trains."""
    mode: str = "syc"             # the instructor's prompt: syc | maxsyc | neutral | truth | martingale | validate-only | none
    turns: int = 4                # utterances per episode; the human states P before the first and after each
    lean: float = 0.65            # the human starts leaning: its evidence's Bayes belief is lean or 1 − lean
    lean_tol: float = 0.05        # |Bayes belief − lean| of a lean window
    pool: int = 12                # the instructor's evidence about a question: its clues and more of their kind
    episodes: int = 200           # held-out questions played, the first n (balanced lean × outcome)
    negations: bool = False       # also play each episode negated: coherence |P(A) + P(¬A) − 1|
    human_temperature: float = 1.0
    instructor_temperature: float = 1.0
    # Each role's model, as keys changed from the run's `model` (null: the run's model itself), e.g.
    # {backend: api, api: {base_url: https://api.deepseek.com/v1, model: deepseek-chat}}: the log's
    # DeepSeek human. Chat episodes only (a prompt set with `episode` prompts, conf/prompts/c2.yaml).
    human_model: Optional[Dict[str, Any]] = None
    instructor_model: Optional[Dict[str, Any]] = None


@dataclass
class InstructorConfig:
    """In-loop training of the episodes' instructor (``stages.<s>.kind=instructor``:
    stages/instructor.py); its LoRA rank, lr, KL β and advantage clip are the stage's own keys."""
    iterations: int = 20          # rounds of (play train episodes, one policy-gradient step)
    train_episodes: int = 64      # episodes played per iteration (training questions)
    meta_size: int = 8            # episodes per meta-episode: the episode_ms reward's MS is over one
    lam_ms: float = 1.0           # λ of the episode rewards' entrenchment term
    lam_brier: float = 1.0        # λ_B of the hinge reward's Brier term
    temperature: float = 2.0      # the policy's utterances while it trains (exploration: at 1 the pretrained
                                  # instructor copies its first candidate every time); its episodes in eval
                                  # sample at simulate.instructor_temperature


@dataclass
class WandbConfig:
    mode: str = "offline"         # offline | online | disabled
    project: str = "martingale"
    entity: Optional[str] = None


@dataclass
class BudgetConfig:
    """A cap on what one build may cost, from `martingale plan --cost`'s estimate: the workflow
    refuses to start a build whose estimate exceeds it (null = no cap)."""
    gpu_hours: Optional[float] = None
    cpu_hours: Optional[float] = None


@dataclass
class Config:
    world: WorldConfig = field(default_factory=WorldConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    elicit: ElicitConfig = field(default_factory=ElicitConfig)
    start: str = "base"           # base | D
    seeds: list[int] = field(default_factory=lambda: [42])
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    stages: StagesConfig = field(default_factory=StagesConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    prompts: PromptsConfig = field(default_factory=PromptsConfig)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    simulate: SimulateConfig = field(default_factory=SimulateConfig)
    instructor: InstructorConfig = field(default_factory=InstructorConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)


# --------------------------------------------------------------------------- domains
# Every leaf key of Config has a domain in DOMAINS (``*`` matches one level: stages.s1, stages.s2):
# the values it may hold, checked at compose time beside choices() (compose.check_domains), so a
# run `check` accepts is one its stages can run. A test walks the dataclasses: no leaf without one.

SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")   # model/family/gpu/wandb names
MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,127}")     # a LoRA target module
SEED_MAX = 2**32 - 1        # torch.manual_seed(seed * 100_003 + step) must stay within 64 bits
def _num(x: Optional[float]) -> str:
    """A bound as written: 4294967295, not 4.29497e+09; 0.5 as 0.5."""
    return str(int(x)) if x is not None and float(x).is_integer() else f"{x}"


class Domain:
    """The values one key may hold. ``problem(value)``: what is wrong, in a few words, or None."""

    def problem(self, value: Any) -> Optional[str]:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class Num(Domain):
    """A finite number in [lo, hi], with an open end where ``lo_open``/``hi_open``; ``integer``:
    an int only (a bool is never a number here)."""
    lo: Optional[float] = None
    hi: Optional[float] = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False

    def describe(self) -> str:
        """The range in words: ``in (0, 1]``, ``≥ 2``, ``> 0``."""
        lo, hi = _num(self.lo), _num(self.hi)
        if self.lo is not None and self.hi is not None:
            return f"in {'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{'>' if self.lo_open else '≥'} {lo}"
        return f"{'<' if self.hi_open else '≤'} {hi}" if self.hi is not None else "finite"

    def problem(self, value: Any) -> Optional[str]:
        kind = "an integer" if self.integer else "a number"
        if isinstance(value, bool) or not isinstance(value, int if self.integer else (int, float)):
            return f"expected {kind}, got {value!r}"
        if not math.isfinite(value):
            return f"{value!r} is not finite: must be {self.describe()}"
        low_ok = self.lo is None or (value > self.lo if self.lo_open else value >= self.lo)
        high_ok = self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)
        return None if low_ok and high_ok else f"{value!r} is out of range: must be {self.describe()}"


def Int(lo: Optional[int] = None, hi: Optional[int] = None) -> Num:
    """An integer in [lo, hi]."""
    return Num(lo, hi, integer=True)


def Real(lo: Optional[float] = None, hi: Optional[float] = None, lo_open: bool = False,
         hi_open: bool = False) -> Num:
    """A finite number in [lo, hi] (ends open where asked)."""
    return Num(lo, hi, lo_open, hi_open)


@dataclass(frozen=True)
class Maybe(Domain):
    """null, or a value ``inner`` accepts."""
    inner: Domain

    def problem(self, value: Any) -> Optional[str]:
        return None if value is None else self.inner.problem(value)


@dataclass(frozen=True)
class OneOf(Domain):
    """One of a fixed list of values."""
    values: tuple[Any, ...]

    def problem(self, value: Any) -> Optional[str]:
        if value in self.values and not isinstance(value, bool):
            return None
        return f"{value!r} is not one of: {', '.join('null' if v is None else str(v) for v in self.values)}"


@dataclass(frozen=True)
class InChoices(Domain):
    """One of ``choices()[key]`` (the fixed enums and the registries): checked there."""

    def problem(self, value: Any) -> Optional[str]:
        return None


@dataclass(frozen=True)
class Name(Domain):
    """A name: letters, digits, '.', '_', '-' (``pattern``); null allowed where ``optional``."""
    optional: bool = False
    pattern: re.Pattern = SAFE_NAME

    def problem(self, value: Any) -> Optional[str]:
        if value is None:
            return None if self.optional else "needs a name, got null"
        if not isinstance(value, str) or not value.strip():
            return f"needs a name, got {value!r}"
        if not self.pattern.fullmatch(value):
            return f"{value!r} is not a name (letters, digits, '.', '_', '-'; at most 128)"
        return None


@dataclass(frozen=True)
class Names(Domain):
    """A non-empty list of distinct names (``pattern``)."""
    pattern: re.Pattern = MODULE_NAME

    def problem(self, value: Any) -> Optional[str]:
        if not isinstance(value, list) or not value:
            return f"needs a non-empty list of names, got {value!r}"
        bad = [v for v in value if not isinstance(v, str) or not self.pattern.fullmatch(v)]
        if bad:
            return f"{bad[0]!r} is not a module name"
        return f"repeated name in {value}" if len(set(value)) != len(value) else None


@dataclass(frozen=True)
class PathValue(Domain):
    """A file-system path (or null where ``optional``): one line, not blank, not a system folder.
    It is opened only by the stage its key belongs to, which checks what is there."""
    optional: bool = True

    def problem(self, value: Any) -> Optional[str]:
        if value is None:
            return None if self.optional else "needs a path, got null"
        if not isinstance(value, str) or not value.strip() or value != value.strip():
            return f"needs a path (null for none), got {value!r}"
        if any(c in value for c in "\0\n\r"):
            return f"{value!r} is not a path (control characters)"
        return system_path_problem(value)


@dataclass(frozen=True)
class Url(Domain):
    """An http(s) URL (a server's base address), or null."""

    def problem(self, value: Any) -> Optional[str]:
        if value is None:
            return None
        if not isinstance(value, str) or not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+(/[\w./\-]*)?", value):
            return f"{value!r} is not an http(s) URL like http://127.0.0.1:8000"
        return None


@dataclass(frozen=True)
class SecretVar(Domain):
    """The name of an environment variable holding a key: one every writer redacts (io.SECRET_WORDS
    in its name), so its value can never reach a file."""

    def problem(self, value: Any) -> Optional[str]:
        from ..io import SECRET_WORDS
        if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", value):
            return f"needs an environment variable name, got {value!r}"
        if not any(w in value.upper() for w in SECRET_WORDS):
            return (f"{value!r}: name the key's variable with one of {', '.join(SECRET_WORDS)} in it "
                    "(so every file the tool writes redacts its value)")
        return None


@dataclass(frozen=True)
class ProjectPath(Domain):
    """A relative path inside the project (no '..', not absolute): where the tool may write."""

    def problem(self, value: Any) -> Optional[str]:
        if not isinstance(value, str) or not value.strip() or any(c in value for c in "\0\n\r"):
            return f"needs a relative path inside the project, got {value!r}"
        if value.startswith(("/", "~")) or ".." in Path(value).parts:
            return f"{value!r} leaves the project: use a relative path without '..'"
        return None


@dataclass(frozen=True)
class Template(Domain):
    """A prompt template: str.format fields only among ``allowed`` (empty for the embedded set)."""
    allowed: tuple[str, ...]

    def problem(self, value: Any) -> Optional[str]:
        import string
        if not isinstance(value, str):
            return f"needs a template string, got {value!r}"
        try:
            names = {f for _, f, _, _ in string.Formatter().parse(value) if f is not None}
        except ValueError as e:
            return f"not a template ({e})"
        unknown = sorted(n for n in names if n not in self.allowed)
        return f"unknown field {{{unknown[0]}}} (known: {', '.join(self.allowed)})" if unknown else None


@dataclass(frozen=True)
class Args(Domain):
    """A list of command-line arguments, each one line (possibly empty)."""

    def problem(self, value: Any) -> Optional[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) and v and "\n" not in v and "\0" not in v
                                                  for v in value):
            return f"needs a list of one-line arguments, got {value!r}"
        return None


@dataclass(frozen=True)
class Flag(Domain):
    """true or false."""

    def problem(self, value: Any) -> Optional[str]:
        return None if isinstance(value, bool) else f"expected true or false, got {value!r}"


@dataclass(frozen=True)
class Seeds(Domain):
    """A non-empty list of distinct integer seeds in [0, SEED_MAX]."""

    def problem(self, value: Any) -> Optional[str]:
        if not isinstance(value, list) or not value:
            return "needs at least one seed"
        bad = [s for s in value if SEED.problem(s)]
        if bad:
            return f"seed {bad[0]!r} is not an integer in [0, {SEED_MAX}]"
        return f"repeated seed in {value}" if len(set(value)) != len(value) else None


POSITIVE = Real(0, lo_open=True)
NONNEG = Real(0)
FRACTION = Real(0, 1)
OPEN_UNIT = Real(0, 1, lo_open=True, hi_open=True)
LR = Real(0, 1, lo_open=True)
COUNT = Int(1)
SEED = Int(0, SEED_MAX)

DOMAINS: dict[str, Domain] = {
    # world: stages/common.make_world builds the synthetic world only; world/synthetic.py
    "world.name": OneOf(("synthetic", "jsonl")),
    "world.seed": SEED,
    "world.base_rate": OPEN_UNIT,                 # logit(base_rate)
    "world.n_clue_types": Int(2),                 # a Dirichlet over at least two clue types
    "world.clues_per_question": COUNT,
    "world.dirichlet_alpha": POSITIVE,
    "world.logodds_unit": POSITIVE,               # llr / unit
    "world.max_step": COUNT,
    "world.snap_clues": Real(0, 1, lo_open=True), # a fraction of the clues (at least one)
    "world.snap_gain": POSITIVE,
    "world.snap_noise": NONNEG,                   # an sd
    "world.n_train": COUNT,
    "world.n_heldout": Int(2),                    # an OLS slope needs two questions
    "world.questions_file": PathValue(),
    # model: model/load.py (LlamaConfig, torch dtype), stages/weights.py (path), plan (resources)
    "model.name": Name(),
    "model.family": Name(),
    "model.path": PathValue(),
    "model.backend": InChoices(),
    "model.hidden_size": COUNT,
    "model.num_layers": COUNT,
    "model.num_heads": COUNT,
    "model.intermediate_size": COUNT,
    "model.max_length": COUNT,
    "model.dtype": OneOf(("float32", "bfloat16", "float16", "auto")),
    "model.device": OneOf(("auto", "cuda", "cpu")),
    "model.lora_targets": Names(),
    "model.generate_batch": Int(0),
    "model.loss_batch": Int(0),
    # model.vllm, model.server_url: model/vllm.py (the server's argv, the client, the guards)
    "model.server_url": Url(),
    "model.vllm.python": PathValue(optional=False),
    "model.vllm.tensor_parallel_size": COUNT,
    "model.vllm.gpu_memory_utilization": Real(0, 1, lo_open=True),
    "model.vllm.max_lora_rank": COUNT,
    "model.vllm.cpu_kv_cache_gib": COUNT,
    "model.vllm.startup_timeout_s": COUNT,
    "model.vllm.request_timeout_s": COUNT,
    "model.vllm.concurrency": COUNT,
    "model.vllm.retries": Int(0),
    "model.vllm.reload_every": COUNT,
    "model.vllm.parity_tol": POSITIVE,
    "model.vllm.adapter_floor": NONNEG,
    "model.vllm.extra_args": Args(),
    # model.api: model/api.py (an episode role behind an OpenAI-compatible endpoint), model/api_client.py
    "model.api.base_url": Url(),
    "model.api.model": Name(optional=True, pattern=re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}")),
    "model.api.api_key_env": SecretVar(),
    "model.api.concurrency": COUNT,
    "model.api.timeout_s": COUNT,
    "model.api.retries": Int(0),
    "model.api.backoff_s": NONNEG,
    "model.api.cache_dir": ProjectPath(),
    "model.resources.cpus": COUNT,
    "model.resources.mem_mb": COUNT,
    "model.resources.gpus": Int(0),
    "model.resources.gpu_model": Name(optional=True),
    "model.resources.runtime_min": COUNT,
    "model.resources.pretrain_cpus": Maybe(COUNT),
    # elicit: beliefs/elicit.py reads the prior at round(cut · clues)
    "elicit.mode": InChoices(),
    "elicit.judge": InChoices(),
    "elicit.cut": OPEN_UNIT,
    "elicit.judge_model": InChoices(),
    "elicit.read": InChoices(),
    "prompts.name": Name(),
    "prompts.chat": Flag(),
    "prompts.snap": Template(("question", "background", "resolution_criteria", "opt")),
    "prompts.reasoned": Template(("question", "background", "resolution_criteria", "opt")),
    "prompts.judge": Template(("question", "background", "resolution_criteria", "opt", "trace")),
    "prompts.max_new_tokens": COUNT,
    "prompts.snap_max_tokens": COUNT,
    "prompts.judge_max_tokens": COUNT,
    "prompts.context_words": Maybe(COUNT),
    "prompts.forced_prefix": Template(()),
    "prompts.judge_forced_prefix": Template(()),
    "prompts.forced_min_mass": Real(0, 1, lo_open=True),
    # prompts.episode: episodes/chat.py (null: the prompt set plays no chat episode)
    "prompts.episode": OneOf((None,)),
    "prompts.episode.human_system": Template(("lean_pct", "opt")),
    "prompts.episode.human_first": Template(("question", "background", "resolution_criteria", "opt")),
    "prompts.episode.human_turn": Template(("message", "opt")),
    "prompts.episode.human_alone": Template(("opt",)),
    "prompts.episode.human_reask": Template(("opt",)),
    "prompts.episode.instructor_turn": Template(("question", "background", "resolution_criteria", "opt",
                                                 "human_message", "p")),
    "prompts.episode.instructor": Template(("opt", "question")),   # each mode's system prompt
    "prompts.episode.reply_max_tokens": COUNT,
    "prompts.episode.instructor_max_tokens": COUNT,
    "prompts.episode.scale": OneOf(("p", "r")),
    "budget.gpu_hours": Maybe(POSITIVE),
    "budget.cpu_hours": Maybe(POSITIVE),
    "judge.base_url": Url(),
    "judge.model": Name(optional=True, pattern=re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}")),
    "judge.chat": Flag(),
    "judge.max_tokens": COUNT,
    "judge.api_key_env": SecretVar(),
    "judge.concurrency": COUNT,
    "judge.timeout_s": COUNT,
    "judge.retries": Int(0),
    "judge.backoff_s": NONNEG,
    "judge.cache_dir": ProjectPath(),
    "start": InChoices(),
    "seeds": Seeds(),
    # pretrain, distill: stages/pretrain.py, stages/distill.py, common.supervised_loop
    "pretrain.seed": SEED,
    "pretrain.steps": COUNT,
    "pretrain.batch_size": COUNT,
    "pretrain.lr": LR,
    "pretrain.warmup": Int(0),
    "pretrain.snap_fraction": FRACTION,
    "pretrain.read_fraction": FRACTION,
    "pretrain.negation_fraction": FRACTION,
    "pretrain.teacher": InChoices(),
    "pretrain.yes_shift": Real(-20, 20),          # nats
    "pretrain.sharpen": POSITIVE,
    "pretrain.misread": Real(0, 0.5, hi_open=True),           # a probability below ½ (at ½ a clue says nothing)
    "distill.seed": SEED,
    "distill.steps": COUNT,
    "distill.batch_size": COUNT,
    "distill.lr": LR,
    "distill.lora_r": COUNT,
    "distill.agree_weight": POSITIVE,
    "distill.disagree_weight": NONNEG,
    "distill.weight_jitter": NONNEG,              # an sd
    "distill.teacher": InChoices(),
    "distill.yes_shift": Real(-20, 20),           # nats
    "distill.sharpen": POSITIVE,
    "distill.yes_drift": Real(-5, 5),             # nats per step
    # stages.*: stages/train.py, rewards.py
    "stages.*.kind": InChoices(),
    "stages.*.reward": InChoices(),
    "stages.*.filter": InChoices(),
    "stages.*.epochs": COUNT,
    "stages.*.lr": LR,
    "stages.*.kl_beta": NONNEG,
    "stages.*.lora_r": COUNT,
    "stages.*.batch_questions": COUNT,
    "stages.*.generations": Int(2),               # group-centred advantages need two samples
    "stages.*.temperature": POSITIVE,             # sampling (0 = greedy: every sample the same)
    "stages.*.adv_clip": POSITIVE,
    "stages.*.info_coef": NONNEG,
    "stages.*.info_eps": FRACTION,                # a width in probability
    "stages.*.lam": FRACTION,                     # C: λ·z(A) + (1 − λ)·z(B)
    "stages.*.balance": Flag(),
    "stages.*.checkpoint_every": Int(0),          # 0 = never; results do not depend on it
    # eval: stages/evaluate.py, metrics (bootstrap CIs at level ci)
    "eval.kind": InChoices(),
    "eval.temperature": NONNEG,                   # 0 = greedy
    "eval.n_bootstrap": COUNT,
    "eval.ci": OPEN_UNIT,
    "eval.prior_draws": Int(0),
    "eval.negations": Flag(),
    "eval.balance": Flag(),
    "eval.min_parse_rate": FRACTION,
    # simulate, instructor: stages/simulate.py, stages/instructor.py, episodes/synthetic.py
    "simulate.mode": InChoices(),
    "simulate.turns": COUNT,
    "simulate.lean": Real(0.5, 1, hi_open=True),  # the side a human leans to; 1 − lean the other
    "simulate.lean_tol": Real(0, 0.5, lo_open=True),
    "simulate.pool": COUNT,
    "simulate.episodes": Int(3),                  # an MS slope and its CI need episodes
    "simulate.negations": Flag(),
    "simulate.human_temperature": POSITIVE,
    "simulate.instructor_temperature": POSITIVE,
    "simulate.human_model": OneOf((None,)),       # set: a mapping of model.* keys, each in model.*'s domain
    "simulate.instructor_model": OneOf((None,)),
    "instructor.iterations": COUNT,
    "instructor.train_episodes": Int(2),
    "instructor.meta_size": Int(3),               # an MS slope within a meta-episode
    "instructor.lam_ms": NONNEG,
    "instructor.lam_brier": NONNEG,
    "instructor.temperature": POSITIVE,
    # wandb: tracking.py
    "wandb.mode": InChoices(),
    "wandb.project": Name(),
    "wandb.entity": Name(optional=True),
}


def _distinct_questions(cfg: dict) -> int:
    return cfg["world"]["n_clue_types"] ** cfg["world"]["clues_per_question"]


# Rules across keys, each (the key named in the error, what must hold, why): a value can be in its
# domain and still impossible beside another (world.splits draws distinct held-out questions; a
# Llama splits hidden_size evenly over its heads).
RELATIONS: tuple[tuple[str, Any, str], ...] = (
    ("world.n_heldout",
     lambda c: c["world"]["n_train"] + c["world"]["n_heldout"] <= _distinct_questions(c),
     "n_train + n_heldout is more than the n_clue_types ** clues_per_question distinct questions"),
    ("model.num_heads",
     lambda c: c["model"]["hidden_size"] % c["model"]["num_heads"] == 0,
     "does not divide model.hidden_size (a Llama splits it evenly over its heads)"),
)


def questions_file_problem(cfg: dict, root: Optional[Path]) -> Optional[str]:
    """world=jsonl: the file must exist, be valid and hold the questions the splits ask for (a
    relative path is read from the project ``root``, as the stages read it)."""
    w = cfg["world"]
    if w["name"] != "jsonl":
        return None
    if not w.get("questions_file"):
        return "world=jsonl needs a questions file (world.questions_file)"
    path = Path(w["questions_file"])
    if root is not None and not path.is_absolute():
        path = root / path
    try:
        st = path.stat()
    except OSError:
        return f"{path}: file: not found (`martingale questions export-synthetic` writes one)"
    return _cached_questions_problem(str(path), st.st_mtime_ns, st.st_size, int(w["n_train"]), int(w["n_heldout"]))


@functools.lru_cache(maxsize=64)
def _cached_questions_problem(path: str, mtime_ns: int, size: int, n_train: int, n_heldout: int) -> Optional[str]:
    """One read of a questions file per version of it (every run of a campaign shares it)."""
    from ..world.questions import config_problem
    return config_problem({"questions_file": path, "n_train": n_train, "n_heldout": n_heldout})


def _episode_reward_problem(cfg: dict, root: Optional[Path]) -> Optional[tuple[str, str]]:
    """A reward that reads an episode's trajectory (rewards.EPISODE_INPUTS) belongs on an instructor
    stage: a train stage's rollouts have no episode."""
    from ..rewards import REWARDS
    for name, st in cfg["stages"].items():
        r = REWARDS.get(st.get("reward"))
        if r is not None and r.episodic and st.get("kind") != "instructor":
            return (f"stages.{name}.reward", f"{r.name} scores a two-agent episode: only an instructor stage "
                    f"has one (stages.{name}.kind is {st.get('kind')})")
    return None


def trains_instructor(cfg: dict) -> bool:
    """Whether a run has an instructor stage (a step of kind instructor with a reward)."""
    return any((st or {}).get("kind") == "instructor" and (st or {}).get("reward") is not None
               for st in cfg.get("stages", {}).values())


def plays_episodes(cfg: dict) -> bool:
    """Whether a run plays two-agent episodes: its measure, or while its instructor trains."""
    return cfg.get("eval", {}).get("kind") == "simulate" or trains_instructor(cfg)


def _episodes_prompts_problem(cfg: dict, root: Optional[Path]) -> Optional[tuple[str, str]]:
    """Two-agent episodes run in the embedded format, or between chat models with a prompt set's
    episode prompts (conf/prompts/c2.yaml): each mode needs its instructor prompt; a trained
    instructor is a local model; each role's model keys must be model keys;
    an api role plays with the verbal read (an endpoint gives no prefilled next-token log-probs),
    and a run's own model is never an api (it is read and trained through token log-probs)."""
    prompts, sim = cfg.get("prompts", {}), cfg.get("simulate", {})
    episode = prompts.get("episode")
    if cfg["model"].get("backend") == "api":
        return ("model.backend", "api plays a two-agent episode's role only (simulate.human_model / "
                "instructor_model): a run's own model is read and trained through token log-probs (hf or vllm)")
    roles = [r for r in ROLE_MODELS if sim.get(r.split(".")[1]) is not None]
    if roles and (not episode or not plays_episodes(cfg)):
        return (roles[0], "a role's model plays chat episodes only (eval.kind=simulate with a prompt set that "
                "has episode prompts, e.g. prompts=c2)")
    for role in roles:
        over = sim[role.split(".")[1]]
        if not isinstance(over, dict):
            return (role, f"a mapping of model keys to change for this role, got {over!r}")
        problem = _model_override_problem(role, over)
        if problem:
            return problem
        if over.get("backend") == "api" and cfg["elicit"].get("read") == "forced" and role.endswith("human_model"):
            return ("elicit.read", "forced with an api human (simulate.human_model.backend=api): an endpoint "
                    "returns text, not a next-token distribution (use elicit.read=verbal)")
    if not plays_episodes(cfg):
        return None
    over = sim.get("instructor_model") or {}
    if episode and trains_instructor(cfg) and over.get("backend", cfg["model"].get("backend")) == "api":
        return ("simulate.instructor_model", "an instructor stage trains a local model (hf or vllm, LoRA): "
                "an api instructor returns text, not token log-probs")
    from ..episodes import episode_problem
    return episode_problem(cfg)


def _model_override_problem(role: str, over: dict) -> Optional[tuple[str, str]]:
    """A role's model keys: each a key of the model schema, its value in the key's domain."""
    from omegaconf import OmegaConf
    try:
        OmegaConf.merge(OmegaConf.structured(ModelConfig), over)
    except Exception as e:   # an unknown key or a wrong type: OmegaConf says which
        key = getattr(e, "full_key", None) or ""
        return (f"{role}.{key}" if key else role, str(e).splitlines()[0])

    def leaves(d: dict, prefix: str) -> list[tuple[str, Any]]:
        out = []
        for k, v in d.items():
            out += leaves(v, f"{prefix}.{k}") if isinstance(v, dict) else [(f"{prefix}.{k}", v)]
        return out
    from ..model.backend import backends
    for key, value in leaves(over, role):
        if key == f"{role}.backend" and value not in backends():
            return (key, f"{value!r} is not one of: {', '.join(backends())}")
        domain = DOMAINS.get(domain_key(key))
        problem = domain.problem(value) if domain is not None and not isinstance(domain, InChoices) else None
        if problem:
            return (key, problem)
    return None


def _forced_read_problem(cfg: dict, root: Optional[Path]) -> Optional[tuple[str, str]]:
    """elicit.read=forced reads the answer's next-token distribution after the prompt set's
    prefix: the prompt set must have one (for a judge read too), and an api judge gives none."""
    if cfg["elicit"].get("read") != "forced":
        return None
    prompts, elicit = cfg.get("prompts", {}), cfg["elicit"]
    if cfg.get("eval", {}).get("prior_draws") and elicit["mode"] == "snap":
        return ("eval.prior_draws", "the forced snap prior is one deterministic read (no draws to "
                "de-attenuate): set eval.prior_draws=0 or elicit.read=verbal")
    if not prompts.get("forced_prefix"):
        return ("elicit.read", f"forced needs a forced-answer prefix: prompts={prompts.get('name')} has no "
                "prompts.forced_prefix (the log's prompts: \"P = 0.\")")
    if elicit["mode"] == "samemode" and elicit["judge"] == "self" and not prompts.get("judge_forced_prefix"):
        return ("elicit.read", f"forced with the self judge needs prompts.judge_forced_prefix "
                f"(prompts={prompts.get('name')} has none)")
    if elicit["mode"] == "samemode" and elicit["judge"] == "api":
        return ("elicit.read", "forced with elicit.judge=api: the api judge returns text, not a next-token "
                "distribution (use elicit.read=verbal)")
    return None


# Checks whose message depends on what they find: (key, check(cfg, project root) -> why, (key, why) or None).
CHECKS: tuple[tuple[str, Any], ...] = (
    ("world.questions_file", questions_file_problem),
    ("stages.*.reward", _episode_reward_problem),
    ("prompts.name", _episodes_prompts_problem),
    ("elicit.read", _forced_read_problem),
)


def relation_problem(cfg: dict, root: Optional[Path] = None) -> tuple[str, str] | None:
    """The first cross-key rule (RELATIONS, then CHECKS) the resolved config breaks: (key, why), else None."""
    for key, holds, why in RELATIONS:
        if not holds(cfg):
            return key, why
    for key, check in CHECKS:
        why = check(cfg, root)
        if why:
            return why if isinstance(why, tuple) else (key, why)   # a check may name the exact key
    return None


ROLE_MODELS = ("simulate.human_model", "simulate.instructor_model")   # model.* keys changed for one role


def domain_key(key: str) -> str:
    """The DOMAINS entry of a dotted key: itself, its ``stages.*.x`` form, ``model.x`` for a role's
    ``simulate.human_model.x``, ``prompts.episode.instructor`` for each mode's prompt under it."""
    if key in DOMAINS:
        return key
    for role in ROLE_MODELS:
        if key.startswith(role + "."):
            return "model." + key[len(role) + 1:]
    if key.startswith("prompts.episode.instructor."):
        return "prompts.episode.instructor"
    parts = key.split(".")
    return ".".join([parts[0], "*", *parts[2:]]) if len(parts) > 2 else key


FIXED_CHOICES: dict[str, tuple[Any, ...]] = {
    "start": ("base", "D"),
    "elicit.mode": ("snap", "samemode"),
    "elicit.judge_model": ("base", "start"),
    "elicit.read": ("verbal", "forced"),
    "distill.teacher": ("entrench", "overconfident", "both", "drift"),
    "pretrain.teacher": ("calibrated", "miscalibrated"),
    "stages.*.filter": (None, "top-half", "top-quartile"),
    "wandb.mode": ("offline", "online", "disabled"),
}


def choices() -> dict[str, tuple[Any, ...]]:
    """Allowed values per key (``*`` matches one level): the fixed enums above, and the names the
    registries hold — a reward, reader, backend or stage kind added in its own file is allowed
    here with no second list."""
    from ..beliefs.readers import READERS
    from ..episodes.chat import CHAT_MODES
    from ..episodes.synthetic import MODES
    from ..model.backend import backends
    from ..rewards import REWARDS
    from ..stages import kind_names
    return {**FIXED_CHOICES,
            "simulate.mode": tuple(dict.fromkeys([*MODES, *CHAT_MODES])),
            "elicit.judge": tuple(READERS),
            "stages.*.reward": (None, *REWARDS),
            "model.backend": tuple(backends()),
            "stages.*.kind": kind_names("step"),
            "eval.kind": kind_names("measure")}
