"""Two-agent episodes between chat models (claims C2/C3 as the research log ran them: DeepSeek-V3 or
gpt-3.5 as the simulated human, an instructor prompted into a mode), on real questions.

The human is a persona (``prompts.episode.human_system``) leaning moderately: it starts at
P ≈ ``simulate.lean`` for the option (lean +1) or 1 − lean (lean −1), lean × outcome balanced
(each outcome's questions split evenly between the leans, the research log's c2_groundtruth cells). It
states P = X after reading the question, and after every turn. Each turn the instructor, prompted
by its mode (``prompts.episode.instructor[mode]``: syc, maxsyc, neutral, truth, martingale,
validate-only), replies to the human's last message; the no-instructor baselines are ``none``
(the human reconsiders alone: rumination) and ``reask`` (it is only asked again).

Each stated P is read from the reply's text (verbal, ``parse_p``) and, where the human's backend
has next-token log-probs, by the forced read beside it (the reply cut at its last P statement,
then ``prompts.forced_prefix``); ``elicit.read`` says which one is the human's P. Every message and
every read is kept in the episode's transcript. The human's conversation grows with the episode:
a CPU's prompt budget is ``simulate.turns`` and ``prompts.context_words``.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional, Sequence, TypedDict

from ..beliefs.forced import answer_context, forced_reads
from ..beliefs.parse import parse_p, parse_r
from ..beliefs.section import episode_prompts
from ..core.errors import StageError
from ..core.jsonvalue import JsonObject
from ..model.backend import render_chat
from .section import simulate_section

if TYPE_CHECKING:
    from ..model.backend import Backend
    from ..model.generate import Batch
    from ..world.synthetic import Question

log = logging.getLogger("martingale.chat_episodes")

CHAT_MODES = ("syc", "maxsyc", "neutral", "truth", "martingale", "validate-only", "none", "reask")
NO_INSTRUCTOR = ("none", "reask")   # the human alone: the baselines
Messages = list[dict[str, str]]
Fields = Callable[["Question"], dict[str, str]]    # a question's words for the prompts' placeholders


class Reads(TypedDict):
    """The human's P read from one reply: the one the reader takes, and each read beside it."""
    p: Optional[float]
    p_verbal: Optional[float]
    p_forced: Optional[float]
    forced_mass: Optional[float]


@dataclass
class ChatEpisode:
    """One episode: the question as asked, the human's lean (+1 toward the option, −1 away), each
    agent's conversation, the transcript (every message with its reads) and the human's P per turn."""
    q: Question
    lean: int
    human: Messages
    instructor: Optional[Messages]
    transcript: list[JsonObject] = field(default_factory=list)
    p: list[Optional[float]] = field(default_factory=list)
    p_verbal: list[Optional[float]] = field(default_factory=list)
    p_forced: list[Optional[float]] = field(default_factory=list)
    forced_mass: list[Optional[float]] = field(default_factory=list)

    def instructor_talk(self) -> Messages:
        """The instructor's conversation (an episode of a mode with an instructor)."""
        if self.instructor is None:
            raise ValueError(f"question {self.q.qid}: this episode has no instructor")
        return self.instructor


def balanced(questions: list[Question], n: int) -> list[tuple[Question, int]]:
    """The first ``n`` (question, lean) pairs with lean × outcome balanced: within each outcome the
    questions alternate lean +1, −1, and the two outcomes interleave."""
    cells: list[list[tuple[Question, int]]] = []
    for y in (1, 0):
        qs = [q for q in questions if int(q.y) == y]
        cells.append([(q, +1 if i % 2 == 0 else -1) for i, q in enumerate(qs)])
    out: list[tuple[Question, int]] = []
    for i in range(max((len(c) for c in cells), default=0)):
        out += [c[i] for c in cells if i < len(c)]
    return out[:n]


def lean_pct(lean: int, level: float) -> int:
    """The persona's starting P for the option asked, in percent."""
    return round(100 * (level if lean > 0 else 1 - level))


def setup(pairs: list[tuple[Question, int]], ep: object, fields: Fields,
          mode: str, level: float) -> list[ChatEpisode]:
    """Each episode's opening: the human's persona and question; the instructor's system prompt."""
    out: list[ChatEpisode] = []
    prompts = episode_prompts(ep)
    for q, lean in pairs:
        f = fields(q)
        human = [{"role": "system", "content": prompts.human_system.format(lean_pct=lean_pct(lean, level), opt=f["opt"])},
                 {"role": "user", "content": prompts.human_first.format(**f)}]
        instructor = None if mode in NO_INSTRUCTOR else \
            [{"role": "system", "content": prompts.instructor[mode].format(opt=f["opt"], question=f["question"])}]
        out.append(ChatEpisode(q, lean, human, instructor))
    return out


def negated(pairs: list[tuple[Question, int]]) -> list[tuple[Question, int]]:
    """The same episodes asked the other way round: the negated question, the same belief (a human
    at P(A) ≈ 0.65 holds P(¬A) ≈ 0.35: the lean flips with the option)."""
    return [(q.negation(), -lean) for q, lean in pairs]


@dataclass
class Played:
    """What a batch of chat episodes produced, shaped as the embedded episodes' (stages/instructor.py
    trains on either): per episode the human's P per turn; per turn the instructor's sampled batch
    (its utterance tokens, for the policy gradient; None from an api instructor or without one);
    which episodes had a silent turn (``strict=False``)."""
    episodes: list[ChatEpisode]
    turns: list[Optional[Batch]] = field(default_factory=list)
    silent: list[bool] = field(default_factory=list)
    unreadable: int = 0            # a chat utterance is read as text: never unreadable

    @property
    def human_p(self) -> list[list[Optional[float]]]:
        return [e.p for e in self.episodes]


@dataclass
class Reader:
    """How the human's P is read from its reply: ``verbal`` (the text), ``forced`` (next-token
    distribution after the reply's reasoning and ``prefix``; None where the backend has no
    log-probs), and which one is the human's P (``read``)."""
    read: str
    prefix: str
    min_mass: float
    scale: str = "p"       # r: the human states R = X in [−1, 1] (parse_r), no forced read

    def reads(self, human: Backend, before: list[Messages], replies: list[Optional[str]]) -> list[Reads]:
        parse = parse_r if self.scale == "r" else parse_p
        verbal = [parse(r) if r else None for r in replies]
        forced: Sequence[tuple[Optional[float], Optional[float]]] = [(None, None)] * len(replies)
        tokenizer = getattr(human, "tokenizer", None)
        if self.prefix and self.scale == "p" and tokenizer is not None:
            texts = [answer_context(render_chat(tokenizer, m), r or "", False) for m, r in zip(before, replies)]
            forced = forced_reads(human, texts, self.prefix, self.min_mass)
        out: list[Reads] = []
        for v, (fp, mass) in zip(verbal, forced):
            out.append({"p": fp if self.read == "forced" else v, "p_verbal": v, "p_forced": fp, "forced_mass": mass})
        return out


def endpoint_failed(where: str, role: str, gen: object, turn: int, said: list[Optional[str]]) -> None:
    """Fail the stage when a role's endpoint failed every retry for any episode of a turn (its
    reply None): the episodes stop there, and the line names the role, its endpoint and why."""
    failed = sum(s is None for s in said)
    if failed:
        why = gen.failure() if hasattr(gen, "failure") else str(gen.stats()) if hasattr(gen, "stats") else repr(gen)
        raise StageError(f"{where}: the {role}'s endpoint failed every retry at turn {turn} in {failed} of "
                         f"{len(said)} episodes ({why}); no further calls were made")


def _human_turn(human: Backend, episodes: list[ChatEpisode], reader: Reader, turn: int, max_tokens: int,
                temperature: float, seed: int, where: str) -> None:
    """The human replies to its conversation's last message; its reply and reads are recorded. An
    endpoint that failed every retry stops the episodes here (endpoint_failed)."""
    before = [list(e.human) for e in episodes]
    replies = human.chat(before, max_tokens, temperature, seed)
    endpoint_failed(where, "human", human, turn, replies)
    for e, reply, r in zip(episodes, replies, reader.reads(human, before, replies)):
        e.human.append({"role": "assistant", "content": reply or ""})
        e.p.append(r["p"])
        e.p_verbal.append(r["p_verbal"])
        e.p_forced.append(r["p_forced"])
        e.forced_mass.append(r["forced_mass"])
        e.transcript.append({"turn": turn, "role": "human", "text": reply, "failed": reply is None, **r})


def _fmt_p(p: Optional[float], scale: str = "p") -> str:
    """The human's last belief as the instructor is told it: P, or R = 2P − 1 on the r scale."""
    if p is None:
        return "unknown"
    return f"{2 * p - 1:+.2f}" if scale == "r" else f"{p:.2f}"


def _instructor_says(instructor: Optional[Backend], conversations: list[Messages], max_tokens: int, temperature: float,
                     seed: int) -> tuple[list[Optional[str]], Optional[Batch]]:
    """The instructor's utterances and, from a local model, the sampled batch they came from."""
    if instructor is None:
        raise StageError("a chat episode's mode with an instructor was given none")
    tokenizer = getattr(instructor, "tokenizer", None)
    if tokenizer is None:
        return instructor.chat(conversations, max_tokens, temperature, seed), None
    batch = instructor.sample([render_chat(tokenizer, c) for c in conversations], max_tokens, temperature, seed)
    return list(batch.texts), batch


def play(human: Backend, instructor: Optional[Backend], episodes: list[ChatEpisode], ep: object, sim: object,
         fields: Fields, reader: Reader, seed: int,
         assert_spoke: Callable[[list[str], int, str, bool], None], where: str = "simulate",
         strict: bool = True) -> Played:
    """Play every episode for ``simulate.turns`` turns, all side by side (one batch per turn and
    agent). Turn t seeds the human with seed·1000 + 10t and the instructor with + 1 (as the
    embedded episodes do). ``strict``: an instructor utterance that is empty fails
    (``assert_spoke``); else (a policy exploring while it trains) the episode is marked silent and
    its human reconsiders alone that turn, and only a turn where every utterance is empty fails."""
    ep, sim = episode_prompts(ep), simulate_section(sim)
    mode, base = sim.mode, seed * 1000
    h_temp, i_temp = float(sim.human_temperature), float(sim.instructor_temperature)
    reply_tokens, instr_tokens = int(ep.reply_max_tokens), int(ep.instructor_max_tokens)
    out = Played(episodes, silent=[False] * len(episodes))
    t0, turns = time.perf_counter(), int(sim.turns)

    def progress(turn: int) -> None:   # one line a turn: a CPU's episodes take minutes
        read = sum(e.p[-1] is not None for e in episodes)
        log.info("%s: chat episodes (%s) turn %d/%d: the human's P read in %d of %d episodes (%.0f s)",
                 where, mode, turn, turns, read, len(episodes), time.perf_counter() - t0)
    _human_turn(human, episodes, reader, 0, reply_tokens, h_temp, base, where)
    progress(0)
    for turn in range(1, turns + 1):
        batch = None
        if mode in NO_INSTRUCTOR:
            ask = ep.human_alone if mode == "none" else ep.human_reask
            for e in episodes:
                e.human.append({"role": "user", "content": ask.format(opt=fields(e.q)["opt"])})
        else:
            for e in episodes:
                f = fields(e.q)
                e.instructor_talk().append({"role": "user", "content": ep.instructor_turn.format(
                    **f, human_message=e.human[-1]["content"], p=_fmt_p(e.p[-1], reader.scale))})
            said, batch = _instructor_says(instructor, [e.instructor_talk() for e in episodes], instr_tokens,
                                           i_temp, base + 10 * turn + 1)
            endpoint_failed(where, "instructor", instructor, turn, said)
            spoken = [text for text in said if text is not None]     # every one (endpoint_failed)
            assert_spoke(spoken, turn, where, strict)
            for i, (e, text) in enumerate(zip(episodes, spoken)):
                e.instructor_talk().append({"role": "assistant", "content": text})
                e.transcript.append({"turn": turn, "role": "instructor", "text": text})
                opt = fields(e.q)["opt"]
                if text.strip():
                    e.human.append({"role": "user", "content": ep.human_turn.format(message=text.strip(), opt=opt)})
                else:               # silence (strict=False): the human reconsiders alone
                    out.silent[i] = True
                    e.human.append({"role": "user", "content": ep.human_alone.format(opt=opt)})
        out.turns.append(batch)
        _human_turn(human, episodes, reader, turn, reply_tokens, h_temp, base + 10 * turn, where)
        progress(turn)
    return out


def records(episodes: list[ChatEpisode], seed: int, negations: Optional[list[ChatEpisode]] = None) -> list[JsonObject]:
    """One row per episode, as the embedded episodes' rows (prior = the human's first P, posterior
    = its last, stated = its last, the trajectory), with the transcript; a real question has no
    Bayes oracle (``bayes_turns`` null)."""
    def r6(v: Optional[float]) -> Optional[float]:
        return None if v is None else round(float(v), 6)
    rows = []
    for i, e in enumerate(episodes):
        row: JsonObject = {"qid": e.q.qid, "y": int(e.q.y), "seed": seed, "lean": e.lean,
               "prior": r6(e.p[0]), "posterior": r6(e.p[-1]), "stated": r6(e.p[-1]),
               "trajectory": [r6(x) for x in e.p], "trajectory_verbal": [r6(x) for x in e.p_verbal],
               "trajectory_forced": [r6(x) for x in e.p_forced], "bayes_turns": None, "bayes_end": None,
               "utterances": [m["text"] for m in e.transcript if m["role"] == "instructor"],
               "completion": e.human[-1]["content"], "transcript": e.transcript}
        if negations is not None:
            row["stated_neg"] = r6(negations[i].p[-1])
        rows.append(row)
    return rows


def parse_rates(episodes: list[ChatEpisode]) -> dict[str, list[float]]:
    """Per turn, the share of episodes whose human P parsed: as read, verbal and forced."""
    n = max(1, len(episodes))
    turns = len(episodes[0].p) if episodes else 0
    def rate(attr: str) -> list[float]:
        return [round(sum(getattr(e, attr)[t] is not None for e in episodes) / n, 6) for t in range(turns)]
    return {"parse_rate_by_turn": rate("p"), "verbal_parse_rate_by_turn": rate("p_verbal"),
            "forced_parse_rate_by_turn": rate("p_forced")}
