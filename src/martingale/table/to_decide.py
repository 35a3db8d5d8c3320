"""What would decide an open finding, and what it costs: more seeds, or more held-out questions (a
redraw, ``world.heldout_draw``, rebuilds the evaluations and no training stage), each priced from
the store's stage timings (plan/cost.py) and projected from the finding's crossed variance
components at its current estimate (stats/crossed.py)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from ..plan import Plan, cost
from ..stats import crossed
from ..stats.replicates import Combined
from ..world import worlds
from . import findings, fmt
from .findings import Finding, Result
from .rows import Row, TableError


@dataclass(frozen=True)
class Routes:
    """A finding's two ways to narrow its CI. ``*_gain``: the half-width one more seed, or one more
    redraw (as many questions again), takes off per stage-hour; ``seeds``/``questions``: how many
    would decide it (None: that route alone cannot, or more than it looks), with the stage-hours to
    get there. Where no redraw is priced, ``no_questions`` says why."""
    half_width: float
    seed_hours: float
    seed_gain: float
    seeds: Optional[int]
    seeds_cost: Optional[float]
    redraw_hours: Optional[float] = None
    question_gain: Optional[float] = None
    questions: Optional[int] = None
    questions_cost: Optional[float] = None
    no_questions: Optional[str] = None

    @property
    def cheaper(self) -> str:
        """Which route decides it for fewer stage-hours ("seeds", "questions"), else which narrows
        the CI more per stage-hour; "neither" where neither route can say."""
        costs = {"seeds": self.seeds_cost, "questions": self.questions_cost}
        known = {k: v for k, v in costs.items() if v is not None}
        if known:
            return min(known, key=lambda k: known[k])
        each = {"seeds": self.seed_gain, "questions": self.question_gain}
        gains = {k: v for k, v in each.items() if v is not None and v > 0}
        return max(gains, key=lambda k: gains[k]) if gains else "neither"


def finding_runs(plan: Plan, f: Finding) -> list[str]:
    """The runs a finding reads: its run, and its parent for a paired effect."""
    parent = plan.tree.specs[f.run].parent
    return [f.run] + ([parent] if f.metric.startswith("effect.") and parent else [])


def _per_hour(gain: float, hours: float) -> float:
    return gain / hours if hours > 0 else float("inf") if gain > 0 else 0.0


def routes(plan: Plan, root: Path | str, f: Finding, r: Result) -> Optional[Routes]:
    """The two routes for a finding over several seeds (None for one seed: its spread is unknown)."""
    c = r.combined
    if c is None or not c.crossed:
        return None
    runs = finding_runs(plan, f)
    per_seed = cost.seed_hours(plan, runs, root)
    parts = c.parts()
    now = crossed.half_width(*parts, c.k, c.n_questions, c.level)
    seeds = Routes(now, per_seed, _per_hour(now - crossed.half_width(*parts, c.k + 1, c.n_questions, c.level), per_seed),
                   r.needed, None if r.needed is None else max(0, r.needed - c.k) * per_seed)
    if c.n_questions is None:
        return replace(seeds, no_questions="no records: the question count is unknown")
    if any(worlds()[plan.resolved(run).world.name].one_split for run in runs):
        return replace(seeds, no_questions="the questions are a file's (world=jsonl): a redraw retrains")
    redraw = cost.redraw_hours(plan, runs, root)
    gain = _per_hour(now - crossed.half_width(*parts, c.k, c.n_questions, c.level, scale=2.0), redraw)
    n = r.questions_needed
    return replace(seeds, redraw_hours=redraw, question_gain=gain, questions=n,
                   questions_cost=None if n is None else max(0, n - c.n_questions) / c.n_questions * redraw)


def describe(way: Routes, c: Combined, digits: int) -> list[str]:
    """A finding's two routes to a decision, in two lines: what each narrows per stage-hour, and
    how many of each would decide it at its current estimate (a redraw where ``routes`` priced one:
    no ``no_questions``, so the question count and its hours are known)."""
    lines = [f"half-width now {fmt.num(way.half_width, digits)}; per stage-hour one more seed takes off "
             f"{fmt.num(way.seed_gain, digits)} ({cost.hours(way.seed_hours)} h a seed)"]
    n, redraw = c.n_questions or 0, way.redraw_hours or 0.0
    if way.no_questions:
        lines[0] += f"; no redraw ({way.no_questions})"
    else:
        lines[0] += (f", {n:,} more held-out questions {fmt.num(way.question_gain, digits)} "
                     f"({cost.hours(redraw)} h a redraw)")
    seeds_text = "no number of seeds up to 100 (the questions' shared noise)" if way.seeds is None else \
        f"{way.seeds} seeds (+{max(0, way.seeds - c.k)}, ≈ {cost.hours(way.seeds_cost or 0.0)} h)"
    if way.no_questions:
        questions_text = "no redraw"
    elif way.questions is None:
        questions_text = "no number of questions up to 100× (the seeds' spread)"
    else:
        questions_text = (f"{way.questions:,} questions (+{max(0, way.questions - n):,}, "
                          f"≈ {cost.hours(way.questions_cost or 0.0)} h)")
    lines.append(f"to decide at this estimate: {seeds_text}, or {questions_text}; cheaper: {way.cheaper}")
    return lines


def open_findings(root: Path | str, rows: list[Row]) -> list[str]:
    """``martingale status``'s lines: the inconclusive findings and the cheaper way to decide each."""
    try:
        found, results, _ = findings.evaluate(root, rows)
    except TableError as e:
        return [f"findings: {e}"]
    shut = [f for f in found or () if results[f.id].verdict == findings.INCONCLUSIVE]
    if not shut:
        return []
    plan = Plan.load(root)
    lines = [f"open findings ({len(shut)} inconclusive; martingale seeds <finding> for both routes, "
             "martingale decide to take them):"]
    for f in shut:
        r = results[f.id]
        if r.stopped:
            lines.append(f"  {f.id}: {r.stopped}")
            continue
        way = routes(plan, root, f, r)
        if way is None:
            lines.append(f"  {f.id}: {r.detail or 'no crossed interval'}")
            continue
        d = 4 if "brier" in f.metric else 3
        c = r.combined
        if c is None:              # routes returned a way: never None here
            continue
        lines.append(f"  {f.id}: {findings.components_text(c, d)}; " + describe(way, c, d)[1])
    return lines
