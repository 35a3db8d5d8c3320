"""Same-mode belief readers: the belief a reasoning trace has reached after its first k clues.

A reader is ``fn(ctx, questions, traces, k) -> list[float | None]`` registered with
``@reader(name, needs_judge=...)``; ``elicit.judge`` names one of ``READERS``, and a reader that
needs a judge gets the run's judge model (a generation backend) in ``ctx.judge``.
- ``self``: a judge model (the run's start model) continues ``<prompt> judge <trace cut at k> read P =``.
- ``trace``: the running log-odds the trace itself writes at step k (exact, no extra model call).
- ``oracle``: the exact Bayes belief after the first k clues — the world's answer, not the model's
  (MS ≈ 0 by construction; the reference a calibrated reasoner should match).
- ``api``: an OpenAI-compatible judge (``judge.base_url``, ``judge.model``; beliefs/api_judge.py)
  answers the same query as ``self``, the trace blinded, greedy and cached on disk.
A reader that needs a client of its own opens it with ``ctx.service(name, make)``: one per stage,
closed with the stage, its ``stats()`` written to the stage's metrics.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, TypeVar

from ..core.jsonvalue import Json, JsonObject
from ..core.registry import Registry
from ..core.settings import Section
from ..core.typed import section_of
from ..world import traces as fmt
from .api_judge import ApiJudge, JudgeConfig, blind
from .forced import forced_reads
from .parse import parse_p, parse_totals
from .prompts import Prompts, is_embedded
from .section import prompts_section

S = TypeVar("S")

if TYPE_CHECKING:   # the plan imports this module at parse time (schema.choices): no numpy here
    from ..model.backend import Backend
    from ..world.synthetic import Question, SyntheticWorld

ReadFn = Callable[["ReadContext", "list[Question]", list[str], int], list[float | None]]


@dataclass
class ReadContext:
    """What a belief reader may use: the world (its oracle), the judge model, the run's config, the services it opened."""
    world: SyntheticWorld
    judge: Optional[Backend] = None   # the judge model's backend (model.backend), for readers that need one
    batch_size: int = 512
    config: object = field(default_factory=dict)    # the stage's config, typed or a mapping (readers with settings: judge.*)
    services: dict = field(default_factory=dict)    # clients readers opened (ctx.service)

    def section(self, key: str) -> Json:
        """The stage config's section ``key`` (a typed slice's attribute, or a mapping's key); None
        where the config has none."""
        return section_of(self.config, key)

    def service(self, name: str, make: Callable[[], S]) -> S:
        """The stage's one ``name`` client, made on first use."""
        if name not in self.services:
            self.services[name] = make()
        return self.services[name]

    def stats(self) -> JsonObject:
        """Each opened client's ``stats()`` by name (e.g. judge calls, cache hits, failures)."""
        return {name: svc.stats() for name, svc in sorted(self.services.items()) if hasattr(svc, "stats")}

    def judge_model(self) -> Backend:
        """The judge model's backend, for a reader that needs one (Reader checks it was loaded)."""
        if self.judge is None:
            raise ValueError("this reader needs a judge model, none was loaded")
        return self.judge

    def close(self) -> None:
        for svc in self.services.values():
            if hasattr(svc, "close"):
                svc.close()


@dataclass(frozen=True)
class Reader:
    """A registered reader: its function, whether it reads through a judge model, its settings."""
    name: str
    fn: ReadFn
    needs_judge: bool = False
    section: Optional[Section] = None   # its own config section, in a stage's slice where it reads

    def __call__(self, ctx: ReadContext, questions: list[Question], texts: list[str],
                 k: int) -> list[float | None]:
        if self.needs_judge and ctx.judge is None:
            raise ValueError(f"elicit.judge={self.name}: this reader needs a judge model, none was loaded")
        return self.fn(ctx, questions, texts, k)


READERS: Registry[Reader] = Registry("reader")
# modules of beliefs/ that declare no reader (tests/test_imports.py checks)
HELPERS = ("api_judge", "elicit", "forced", "parse", "prompts", "section")


def reader(name: str, needs_judge: bool = False, section: Optional[Section] = None) -> Callable[[ReadFn], ReadFn]:
    """Register the decorated function as reader ``name`` (see the module docstring); its settings,
    if it has any, are ``section`` (a top-level key, read typed as ``ctx.section(section.key)``)."""
    def register(fn: ReadFn) -> ReadFn:
        READERS.add(name, Reader(name, fn, needs_judge, section))
        return fn
    return register


def readers() -> dict[str, Reader]:
    """Every reader: this module's and each one-file reader of beliefs/ (imported once)."""
    return READERS.discover(__package__, [str(Path(__file__).parent)], HELPERS)


def get_reader(name: str) -> Reader:
    """The reader ``elicit.judge`` names."""
    if name not in readers():
        raise ValueError(f"elicit.judge: unknown reader {name!r} (known: {', '.join(READERS)})")
    return READERS[name]


def _judge_queries(ctx: ReadContext, questions: list[Question], texts: list[str], k: int):
    """(the prompt set, each trace's judge query after step k, the indices that have one): only a
    trace that reached step k in the expected shape can be cut there."""
    ask = Prompts(ctx.section("prompts"), getattr(ctx.judge, "tokenizer", None))
    queries = [ask.judge(q, text, k, ctx.world.n_clues) for q, text in zip(questions, texts)]
    return ask, queries, [i for i, s in enumerate(queries) if s is not None]


@reader("self", needs_judge=True)
def read_self(ctx: ReadContext, questions: list[Question], texts: list[str], k: int) -> list[float | None]:
    """The judge model's greedy answer to the prompt set's judge prompt after the trace cut at k
    (the embedded format: one token after ``… read P =``)."""
    ask, queries, todo = _judge_queries(ctx, questions, texts, k)
    out: list[float | None] = [None] * len(texts)
    for start in range(0, len(todo), ctx.batch_size):
        idx = todo[start:start + ctx.batch_size]
        answers = ctx.judge_model().greedy_next([queries[i] for i in idx], max_new_tokens=ask.judge_tokens())
        for i, a in zip(idx, answers):
            out[i] = ask.read_answer(a)
    return out


def read_self_forced(ctx: ReadContext, questions: list[Question], texts: list[str],
                     k: int) -> list[tuple[float | None, float | None]]:
    """The self judge's forced read (beliefs/forced.py): its answer to the same judge prompt
    prefilled with ``prompts.judge_forced_prefix``, (P, mass); (None, None) where the trace cannot
    be cut at k or the prompt set has no judge prefix."""
    ask, queries, todo = _judge_queries(ctx, questions, texts, k)
    out: list[tuple[float | None, float | None]] = [(None, None)] * len(texts)
    if not ask.judge_forced_prefix:
        return out
    reads = forced_reads(ctx.judge_model(), [queries[i] for i in todo], ask.judge_forced_prefix,
                         ask.forced_min_mass) if todo else []
    for i, read in zip(todo, reads):
        out[i] = read
    return out


# Readers whose belief is a model's answer, and so has a forced read: name → fn(ctx, questions,
# texts, k) -> [(P, mass)]. A reader not here (oracle, trace) gives the same belief under either read.
FORCED_READERS: dict[str, Callable[..., list[tuple[float | None, float | None]]]] = {"self": read_self_forced}


@reader("trace")
def read_trace(ctx: ReadContext, questions: list[Question], texts: list[str], k: int) -> list[float | None]:
    """The belief of the running total the trace writes at step k (the embedded format only)."""
    if not is_embedded(ctx.section("prompts")):
        return [None] * len(texts)
    out: list[float | None] = []
    for text in texts:
        totals = parse_totals(text)
        out.append(fmt.units_to_p(totals[k], ctx.world.unit) if totals and len(totals) > k else None)
    return out


@reader("oracle")
def read_oracle(ctx: ReadContext, questions: list[Question], texts: list[str], k: int) -> list[float | None]:
    """The exact Bayes belief after the question's first k clues."""
    return [ctx.world.bayes(q, k) for q in questions]


@reader("api", section=Section("judge", JudgeConfig, in_every_run=True))
def read_api(ctx: ReadContext, questions: list[Question], texts: list[str], k: int) -> list[float | None]:
    """``judge.model`` behind ``judge.base_url`` answers the prompt set's judge prompt after the
    trace cut at k, every probability the trace states hidden (api_judge.blind); a failed call is
    None. The server applies its own chat template (judge.chat), never the evaluated model's."""
    client = ctx.service("api_judge", lambda: ApiJudge(ctx.section("judge")))
    ask = Prompts(dataclasses.replace(prompts_section(ctx.section("prompts")), chat=False))
    queries = [ask.judge(q, blind(text), k, ctx.world.n_clues) for q, text in zip(questions, texts)]
    todo = [i for i, s in enumerate(queries) if s is not None]
    out: list[float | None] = [None] * len(texts)
    for i, answer in zip(todo, client.ask_all([s for s in queries if s is not None])):
        if answer is not None:   # a completion continues "P ="; a chat judge answers on its own
            out[i] = parse_p(answer, bare=True) if client.chat else ask.read_answer(answer)
    return out
