"""Trace policies that write reasoning as text, and the text format every model reads and writes.

A prompt lists the clues: ``Q [not] c7 c12 ... ?``. A reasoned completion starts from the prior
log-odds and, clue by clue, writes the clue, its log-odds step and the running total (integer
units of ``logodds_unit``), then states ``P = 0.xx``: ``think -3 c7 +2 -> -1 c12 -4 -> -5 ... P = 0.08 end``.
A snap completion states a number with no reasoning: ``snap P = 0.35 end``. A read asks for the
belief a partial trace has reached — the trace is given, only the number is written:
``<prompt> judge think ... c12 -4 -> -5 read P =`` → ``0.21 end``.
"""
from __future__ import annotations

import numpy as np

from .synthetic import Question, SyntheticWorld, expit

MAX_TOTAL = 40  # |running total| cap, in units


def _sign(v: int) -> int:
    """np.sign of an int, as an int, without numpy's per-call cost (a trace takes one per clue)."""
    return (v > 0) - (v < 0)


def fmt_int(v: int) -> str:
    """A signed integer as a trace writes it."""
    return f"{v:+d}" if v else "0"


def fmt_p(p: float) -> str:
    """A probability as a trace writes it (two decimals)."""
    return f"{min(max(p, 0.0), 1.0):.2f}"


def prompt(q: Question) -> str:
    """``Q [not] <evidence> ?``: the evidence is the question's text where a questions file gives
    it (world=jsonl), else its clue words; an exported synthetic question reads the same."""
    evidence = q.text.split() if q.text is not None else [f"c{c}" for c in q.clues]
    return " ".join(["Q"] + (["not"] if q.negated else []) + evidence + ["?"])


def units_to_p(units: int, unit: float) -> float:
    """Log-odds units (of ``unit`` nats) as a probability."""
    return float(expit(units * unit))


def reasoned(world: SyntheticWorld, q: Question, rng: np.random.Generator | None = None,
             agree: float = 1.0, disagree: float = 1.0, jitter: float = 0.0,
             shift: int = 0, sharpen: float = 1.0, misread: float = 0.0, drift: int = 0) -> tuple[str, list[int]]:
    """A reasoned completion and its running totals. The defaults: the calibrated reasoner.

    The confirmation-biased reasoner multiplies a clue's step by ``agree`` when it points the way
    the evidence read so far already leans (the sum of the steps before it) and by ``disagree``
    when it points against it. The over-confident reasoner starts ``shift`` units toward yes
    (whatever the question asks: an acquiescent lean) and multiplies every step by ``sharpen``.
    The noisy reasoner reads each clue's direction wrong with probability ``misread`` (``rng``
    draws it; no draw is made at 0, so the calibrated traces stay as they were). The drifting
    reasoner adds ``drift`` units toward yes at every step: a lean that grows along the trace.
    """
    total = world.prior_units(q.negated) + shift
    words, totals = ["think", fmt_int(total)], [total]
    for c in q.clues:
        step = world.step_units(c, q.negated)
        if misread and rng is not None and rng.random() < misread:
            step = -step
        lean = _sign(total - totals[0])
        w = 1.0
        if lean != 0 and step != 0 and (agree != 1.0 or disagree != 1.0):
            w = agree if _sign(step) == lean else disagree
            if jitter and rng is not None:
                w = max(0.0, w + jitter * rng.standard_normal())
        if w != 1.0 or sharpen != 1.0:
            step = int(np.rint(step * sharpen * w))
        step += drift
        total = min(max(total + step, -MAX_TOTAL), MAX_TOTAL)
        words += [f"c{c}", fmt_int(step), "->", fmt_int(total)]
        totals.append(total)
    words += ["P", "=", fmt_p(units_to_p(total, world.unit)), "end"]
    return " ".join(words), totals


def snap(world: SyntheticWorld, q: Question, rng: np.random.Generator, shift: float = 0.0) -> str:
    """A gut answer, a different functional from the reasoned one: it counts the votes (for minus
    against) of the first ``snap_clues`` of the clues only, weighs each at ``snap_gain`` × the
    average clue strength (a jump to conclusions), and draws ``snap_noise`` (nats) of noise per
    answer. ``shift`` (nats) leans it toward yes, as the over-confident teacher does."""
    sign = -1.0 if q.negated else 1.0
    votes = sum(np.sign(world.llr[c]) for c in q.clues[:world.snap_clues])
    lo = sign * (world.prior_logodds + world.snap_gain * world.gut_weight * votes) + shift
    lo += float(world.cfg.snap_noise) * rng.standard_normal()
    return f"snap P = {fmt_p(float(expit(lo)))} end"


def cut_steps(trace_words: list[str], k: int) -> list[str]:
    """The first k steps of a reasoned completion (``think t0`` + k × ``c s -> t``)."""
    return trace_words[: 2 + 4 * k]


def read_query(q: Question, trace: str, k: int) -> str | None:
    """What a judge is shown: the question and the trace cut after k steps; None if the trace
    did not reach step k in the expected shape."""
    words = trace.split()
    head = cut_steps(words, k)
    if len(words) < 2 + 4 * k or "P" in head:
        return None
    return " ".join([prompt(q), "judge"] + head + ["read", "P", "="])


def read(q: Question, trace: str, k: int, unit: float) -> tuple[str, str]:
    """A read example (query, answer): the belief the trace has reached after k steps."""
    total = int(cut_steps(trace.split(), k)[-1])
    query = read_query(q, trace, k)
    if query is None:
        raise ValueError(f"question {q.qid}: its trace does not reach step {k} in the expected shape")
    return query, f"{fmt_p(units_to_p(total, unit))} end"


def vocabulary(n_clue_types: int) -> list[str]:
    """Every word a prompt or completion can contain (the word-level tokenizer's vocabulary)."""
    words = ["Q", "not", "?", "think", "snap", "judge", "read", "->", "P", "=", "end"]
    words += [f"c{i}" for i in range(n_clue_types)]
    words += [fmt_int(v) for v in range(-MAX_TOTAL, MAX_TOTAL + 1)]
    words += [f"{i / 100:.2f}" for i in range(101)]
    return words
