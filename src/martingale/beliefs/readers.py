"""Same-mode belief readers: the belief a reasoning trace has reached after its first k clues.

A reader is ``fn(ctx, questions, traces, k) -> list[float | None]``. Add one by writing a
function and registering it in READERS.
- ``self``: a judge model (the run's start model) continues ``<prompt> judge <trace cut at k> read P =``.
- ``trace``: the running log-odds the trace itself writes at step k (exact, no extra model call).
- ``oracle``: the exact Bayes belief after the first k clues — the world's answer, not the model's
  (MS ≈ 0 by construction; the reference a calibrated reasoner should match).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..world import traces as fmt
from ..world.synthetic import Question, SyntheticWorld
from .parse import parse_p, parse_totals


@dataclass
class ReadContext:
    world: SyntheticWorld
    judge: Any = None            # (model, tokenizer) for the self reader
    batch_size: int = 512


def read_self(ctx: ReadContext, questions: list[Question], texts: list[str], k: int) -> list[float | None]:
    from ..model.generate import greedy_next
    model, tok = ctx.judge
    # Only a trace that reached step k in the expected shape can be cut there.
    queries = [fmt.read_query(q, text, k) for q, text in zip(questions, texts)]
    todo = [i for i, s in enumerate(queries) if s is not None]
    out: list[float | None] = [None] * len(texts)
    for start in range(0, len(todo), ctx.batch_size):
        idx = todo[start:start + ctx.batch_size]
        answers = greedy_next(model, tok, [queries[i] for i in idx], max_new_tokens=1)
        for i, a in zip(idx, answers):
            out[i] = parse_p("P = " + a.strip())
    return out


def read_trace(ctx: ReadContext, questions: list[Question], texts: list[str], k: int) -> list[float | None]:
    out: list[float | None] = []
    for text in texts:
        totals = parse_totals(text)
        out.append(fmt.units_to_p(totals[k], ctx.world.unit) if totals and len(totals) > k else None)
    return out


def read_oracle(ctx: ReadContext, questions: list[Question], texts: list[str], k: int) -> list[float | None]:
    return [ctx.world.bayes(q, k) for q in questions]


READERS: dict[str, Callable[..., list[float | None]]] = {
    "self": read_self,
    "trace": read_trace,
    "oracle": read_oracle,
}
