"""What would decide an open finding, and what it costs: more seeds, or more held-out questions (a
redraw, ``world.heldout_draw``, rebuilds the evaluations and no training stage), each priced from
the store's stage timings (plan/cost.py) and projected from the finding's crossed variance
components at its current estimate (stats/crossed.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..plan import Plan, cost
from ..stats import crossed
from ..stats.replicates import Combined
from . import findings, fmt
from .findings import Finding, Result
from .rows import TableError


@dataclass(frozen=True)
class Routes:
    """A finding's two ways to narrow its CI. ``*_gain``: the half-width one more seed, or one more
    redraw (n more questions), takes off per stage-hour; ``seeds``/``questions``: how many would
    decide it (None: that route alone cannot, or more than it looks), with the stage-hours to get
    there. ``questions`` is None throughout where the world's questions are a file's (world=jsonl:
    its held-out set is fixed by the file's split)."""
    half_width: float
    seed_hours: float
    redraw_hours: Optional[float]
    seed_gain: float
    question_gain: Optional[float]
    seeds: Optional[int]
    seeds_cost: Optional[float]
    questions: Optional[int]
    questions_cost: Optional[float]

    @property
    def cheaper(self) -> str:
        """Which route decides it for fewer stage-hours ("seeds", "questions"), else which narrows
        the CI more per stage-hour; "neither" where neither route can say."""
        costs = {"seeds": self.seeds_cost, "questions": self.questions_cost}
        known = {k: v for k, v in costs.items() if v is not None}
        if known:
            return min(known, key=known.get)
        gains = {"seeds": self.seed_gain, "questions": self.question_gain}
        gains = {k: v for k, v in gains.items() if v is not None and v > 0}
        return max(gains, key=gains.get) if gains else "neither"


def finding_runs(plan: Plan, f: Finding) -> list[str]:
    """The runs a finding reads: its run, and its parent for a paired effect."""
    parent = plan.tree.specs[f.run].parent
    return [f.run] + ([parent] if f.metric.startswith("effect.") and parent else [])


def _per_hour(gain: float, hours: float) -> float:
    return gain / hours if hours > 0 else float("inf") if gain > 0 else 0.0


def routes(plan: Plan, root: Path | str, f: Finding, r: Result) -> Optional[Routes]:
    """The two routes for a finding with a crossed interval (None without one)."""
    c = r.combined
    if c is None or not c.crossed or c.n_questions is None:
        return None
    runs = finding_runs(plan, f)
    per_seed = cost.seed_hours(plan, runs, root)
    synthetic = all(plan.resolved_config(run)["world"]["name"] == "synthetic" for run in runs)
    redraw = cost.redraw_hours(plan, runs, root) if synthetic else None
    parts = (c.var_seed, c.var_shared, c.var_residual)
    now = crossed.half_width(*parts, c.k, c.n_questions, c.level)
    seed_gain = _per_hour(now - crossed.half_width(*parts, c.k + 1, c.n_questions, c.level), per_seed)
    question_gain = None if redraw is None else \
        _per_hour(now - crossed.half_width(*parts, c.k, c.n_questions, c.level, scale=2.0), redraw)
    seeds_cost = None if r.needed is None else max(0, r.needed - c.k) * per_seed
    questions = r.questions_needed if synthetic else None
    questions_cost = None if questions is None or redraw is None else \
        max(0, questions - c.n_questions) / c.n_questions * redraw
    return Routes(now, per_seed, redraw, seed_gain, question_gain, r.needed, seeds_cost, questions, questions_cost)


def describe(way: Routes, c: Combined, digits: int) -> list[str]:
    """A finding's two routes to a decision, in words (table/to_decide.py)."""
    hw = fmt.num(way.half_width, digits)
    lines = [f"half-width now {hw}; per stage-hour one more seed takes off {fmt.num(way.seed_gain, digits)} "
             f"({cost.hours(way.seed_hours)} h a seed)"]
    if way.question_gain is not None:
        lines[0] += (f", {c.n_questions:,} more held-out questions {fmt.num(way.question_gain, digits)} "
                     f"({cost.hours(way.redraw_hours)} h a redraw)")
    else:
        lines[0] += "; the questions are a file's (world=jsonl): no redraw"
    seeds_text = "no number of seeds up to 100 (the questions' shared noise)" if way.seeds is None else \
        f"{way.seeds} seeds (+{max(0, way.seeds - c.k)}, ≈ {cost.hours(way.seeds_cost)} h)"
    if way.question_gain is None:
        questions_text = "–"
    elif way.questions is None:
        questions_text = "no number of questions up to 100× (the seeds' spread)"
    else:
        questions_text = (f"{way.questions:,} questions (+{max(0, way.questions - c.n_questions):,}, "
                          f"≈ {cost.hours(way.questions_cost)} h)")
    lines.append(f"to decide at this estimate: {seeds_text}, or {questions_text}; cheaper: {way.cheaper}")
    return lines


def open_findings(root: Path | str, rows: list[dict]) -> list[str]:
    """``martingale status``'s lines: the inconclusive findings and the cheaper way to decide each."""
    try:
        found, results, _ = findings.evaluate(root, rows)
    except TableError as e:
        return [f"findings: {e}"]
    shut = [f for f in found or () if results[f.id].verdict == findings.INCONCLUSIVE]
    if not shut:
        return []
    plan = Plan.load(root)
    lines = [f"open findings ({len(shut)} inconclusive; martingale seeds <finding> for both routes):"]
    for f in shut:
        r = results[f.id]
        way = routes(plan, root, f, r)
        if way is None:
            lines.append(f"  {f.id}: {r.detail or 'no crossed interval'}")
            continue
        d = 4 if "brier" in f.metric else 3
        c = r.combined
        lines.append(f"  {f.id}: {findings.components_text(c, d)}; " + describe(way, c, d)[1])
    return lines
