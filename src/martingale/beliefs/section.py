"""The ``elicit`` and ``prompts`` sections: how a belief is read and what a model is asked, declared
where the readers and prompt sets are (``elicit_section``, ``prompts_section`` type a mapping); the
config schema places them at ``elicit`` and ``prompts``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from ..core.settings import (
    COUNT,
    OPEN_UNIT,
    Flag,
    InChoices,
    Maybe,
    Name,
    OneOf,
    Real,
    Template,
    omitted_at,
    setting,
    through_inputs,
)
from ..core.typed import typed

QUESTION_FIELDS = ("question", "background", "resolution_criteria", "opt")   # a question's template fields


@dataclass
class ElicitConfig:
    """How prior and posterior are read: snap prior + reasoned posterior, or one trace at cut/100%."""
    mode: str = setting("samemode", OneOf(("snap", "samemode")), "snap | samemode")
    judge: str = setting("self", InChoices(), "samemode reader: self | trace | oracle | api")
    judge_model: str = setting("base", OneOf(("base", "start")),
        "the model a self reader asks: base = the natural model, one judge fixed across a campaign (the research log's"
        " external judge); start = the run's start model", in_id=through_inputs)
    cut: float = setting(0.5, OPEN_UNIT, "fraction of the trace read as the prior (samemode)")
    read: str = setting("verbal", OneOf(("verbal", "forced")),
        "which read the prior, posterior and stated P (Brier, MS) come from: verbal = the P = X the model "
        "writes (parsed; unparsed counted); forced = its next-token distribution after prompts.forced_prefix "
        "(beliefs/forced.py). Both are recorded where the prompt set has a prefix.",
        in_id=omitted_at("verbal", stage_only=True))


@dataclass
class EpisodePromptsConfig:
    """A chat episode's prompts (episodes/chat.py; conf/prompts/c2.yaml): the human's persona
and turns, the instructor's system prompt per mode. Fields: the question's ({question},
{background}, {resolution_criteria}, {opt}), {lean_pct} (the persona's starting P in %),
{message} (what the instructor said), {human_message} and {p} (the human's last reply and P)."""
    human_system: str = setting("", Template(("lean_pct", "opt")))
    human_first: str = setting("", Template(QUESTION_FIELDS), "the question, and the first ask for P")
    human_turn: str = setting("", Template(("message", "opt")), "after an instructor's message")
    human_alone: str = setting("", Template(("opt",)),
        "simulate.mode=none: no instructor, the human reconsiders on its own")
    human_reask: str = setting("", Template(("opt",)), "simulate.mode=reask: the human is only asked again")
    instructor_turn: str = setting("", Template((*QUESTION_FIELDS, "human_message", "p")))
    instructor: Dict[str, str] = setting(None, Template(("opt", "question")),
        "mode → the instructor's system prompt", factory=dict)
    reply_max_tokens: int = setting(160, COUNT, "a human's reply")
    instructor_max_tokens: int = setting(120, COUNT)
    scale: str = setting("p", OneOf(("p", "r")),
        "p: the human states P = X in [0, 1]; r: R = X in [−1, 1] (the research log's rparam), P = (X + 1)/2")


@dataclass
class PromptsConfig:
    """What a model is asked (beliefs/prompts.py): ``embedded`` = the embedded model's own format;
another set holds the templates, with {question}, {background}, {resolution_criteria}, {opt}
and, for the judge, {trace} (the reasoning so far, probabilities hidden)."""
    name: str = setting("embedded", Name())
    chat: bool = setting(False, Flag(), "render through the tokenizer's chat template (a chat model)")
    snap: str = setting("", Template(QUESTION_FIELDS))
    reasoned: str = setting("", Template(QUESTION_FIELDS))
    judge: str = setting("", Template((*QUESTION_FIELDS, "trace")))
    max_new_tokens: int = setting(1024, COUNT, "a reasoned trace's length cap (the embedded format: 4 · clues + 6)")
    snap_max_tokens: int = setting(128, COUNT, "a snap answer's")
    judge_max_tokens: int = setting(8, COUNT, "a same-mode read's answer length (a number)")
    context_words: Optional[int] = setting(None, Maybe(COUNT),
        "cut each question's background and resolution criteria to their first n words (a CPU's prompt "
        "budget: ForecastBench's run to 1,400 tokens); null = whole", in_id=omitted_at(None, stage_only=True))
    forced_prefix: str = setting("", Template(()),
        "the forced-answer read (beliefs/forced.py): the model's answer is prefilled with this (e.g. 'P = "
        "0.') and its P read from the next token's distribution; '' = no forced read")
    judge_forced_prefix: str = setting("", Template(()),
        "the same for the judge's answer (e.g. '0.'); '' = no forced judge read")
    forced_min_mass: float = setting(0.5, Real(0, 1, lo_open=True),
        "a forced read whose valid-answer tokens hold less of the next-token mass (among the top 20) is "
        "unparsed, never a number")
    episode: Optional[EpisodePromptsConfig] = setting(None, OneOf((None,)),
        "chat episodes' prompts (conf/prompts/c2.yaml); null = none", in_id=omitted_at(None))


def elicit_section(cfg: object) -> ElicitConfig:
    """``cfg`` (an ``elicit`` section or its keys; None: the defaults) as the typed ElicitConfig."""
    return typed(ElicitConfig, cfg if cfg is not None else {}, "elicit")


def prompts_section(cfg: object) -> PromptsConfig:
    """``cfg`` (a ``prompts`` section or its keys; None: the embedded set) as the typed PromptsConfig."""
    return typed(PromptsConfig, cfg if cfg is not None else {}, "prompts")


def episode_prompts(cfg: object) -> EpisodePromptsConfig:
    """``cfg`` (``prompts.episode`` or its keys; None: the defaults) as the typed EpisodePromptsConfig."""
    return typed(EpisodePromptsConfig, cfg if cfg is not None else {}, "prompts.episode")
