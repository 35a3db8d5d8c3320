"""Two-agent episodes (C2/C3): an instructor talks to a human who states P after every turn.
``synthetic``: on the embedded world, its modes a registry (``MODES``); ``chat``: chat models in both
roles, any backend (``CHAT_MODES``). Above world, beliefs and model; below stages."""
from __future__ import annotations

from typing import Optional

from ..beliefs.section import elicit_section, prompts_section
from ..core.typed import section_of
from ..world.section import world_section
from .chat import CHAT_MODES, NO_INSTRUCTOR
from .section import simulate_section
from .synthetic import MODES, uses_pool


def episode_problem(cfg: object) -> Optional[tuple[str, str]]:
    """What two-agent episodes cannot play with this config, as (key, why), or None: checked by the
    schema (``martingale check``) and again by the stages that play them (a slice handed over
    directly). Chat episodes need a prompt set with episode prompts, a chat mode with its instructor
    prompt and, on the R scale, the verbal read; the embedded ones the embedded format, an embedded
    mode and evidence enough for the instructor to list a new clue every turn."""
    prompts, sim = prompts_section(section_of(cfg, "prompts")), simulate_section(section_of(cfg, "simulate"))
    name, episode, mode = prompts.name, prompts.episode, sim.mode
    if episode:
        if episode.scale == "r" and elicit_section(section_of(cfg, "elicit")).read == "forced":
            return ("elicit.read", f"forced with prompts={name}: the human states R = X on [−1, 1], and the forced "
                    "read reads P = 0.<digits> (use elicit.read=verbal)")
        if mode not in CHAT_MODES:
            return ("simulate.mode", f"{mode!r} is not a chat episode's mode ({', '.join(CHAT_MODES)})")
        if mode not in NO_INSTRUCTOR and not (episode.instructor or {}).get(mode):
            return ("prompts.episode.instructor", f"prompts={name} has no instructor prompt for simulate.mode={mode}")
        return None
    if name != "embedded":
        return ("prompts.name", f"prompts={name}: two-agent episodes (eval.kind=simulate, an instructor stage) need "
                "the embedded format or a prompt set with episode prompts (prompts.episode, e.g. prompts=c2)")
    if mode not in MODES:
        return ("simulate.mode", f"{mode!r} is a chat episode's mode: the embedded episodes have {', '.join(MODES)}")
    need = int(world_section(section_of(cfg, "world")).clues_per_question) + int(sim.turns) - 1
    if uses_pool(mode) and int(sim.pool) < need:
        return ("simulate.pool", f"{sim.pool} clues < clues_per_question + turns − 1 = {need}: "
                "the instructor would run out of evidence to list")
    return None
