"""The ``simulate`` section: how two-agent episodes are played, declared where the episodes are
(``simulate_section`` types a mapping); the simulate stage kind places it at ``simulate``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..core.jsonvalue import JsonObject
from ..core.settings import COUNT, POSITIVE, Flag, InChoices, Int, OneOf, Real, omitted_at, setting
from ..core.typed import typed


@dataclass
class SimulateConfig:
    """Two-agent episodes (``simulate``: this kind's section; episodes/synthetic.py, episodes/chat.py),
    also what an instructor stage plays while it trains."""
    mode: str = setting("syc", InChoices(),
        "the instructor's prompt (a registered mode: episodes.synthetic.MODES, episodes.chat.CHAT_MODES)")
    turns: int = setting(4, COUNT, "utterances per episode; the human states P before the first and after each")
    lean: float = setting(0.65, Real(0.5, 1, hi_open=True),
        "the human starts leaning: its evidence's Bayes belief is lean or 1 − lean")
    lean_tol: float = setting(0.05, Real(0, 0.5, lo_open=True), "|Bayes belief − lean| of a lean window")
    pool: int = setting(12, COUNT, "the instructor's evidence about a question: its clues and more of their kind")
    episodes: int = setting(200, Int(3), "held-out questions played, the first n (balanced lean × outcome)")
    negations: bool = setting(False, Flag(), "also play each episode negated: coherence |P(A) + P(¬A) − 1|")
    human_temperature: float = setting(1.0, POSITIVE)
    instructor_temperature: float = setting(1.0, POSITIVE)
    # Each role's model, as keys changed from the run's `model` (null: the run's model itself), e.g.
    # {backend: api, api: {base_url: https://api.deepseek.com/v1, model: deepseek-chat}}: the research log's
    # DeepSeek human. Chat episodes only (a prompt set with `episode` prompts, conf/prompts/c2.yaml).
    human_model: Optional[JsonObject] = setting(None, OneOf((None,)),
        "the human's model keys changed from the run's model (each in model.*'s domain); null: the run's model",
        in_id=omitted_at(None))
    instructor_model: Optional[JsonObject] = setting(None, OneOf((None,)),
        "the instructor's, likewise", in_id=omitted_at(None))


def simulate_section(cfg: object) -> SimulateConfig:
    """``cfg`` (a ``simulate`` section or its keys; None: the defaults) as the typed SimulateConfig."""
    return typed(SimulateConfig, cfg if cfg is not None else {}, "simulate")
