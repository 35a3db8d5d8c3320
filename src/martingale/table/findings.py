"""``FINDINGS.md``: each finding of the research log that the campaign tests (conf/findings.yaml,
finding_spec.py), with the number its run measured (finding_reads.py), the CI, a p and a
Benjamini–Hochberg q, and a verdict by the rules stated in the file's header (stats/verdicts.py;
the text: findings_md.py) — whether the research log reproduces is read from results/, never
judged by hand. Several seeds are combined crossed with the questions they share
(stats/crossed.py), a later look (table/looks.py) at the plan's nominal level.
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ..config.runs import RunTree
from ..records.eval_record import EvalRecord, QuestionCov, read_eval
from ..stats import crossed
from ..stats.replicates import MIN_SEEDS, Combined, bh_q, combine, se_from_ci, seeds_needed
from ..stats.sequential import Boundary, futility
from ..stats.verdicts import FDR, INCONCLUSIVE, NO_RESULT, NOT_REPRODUCED, PROVISIONAL, REPRODUCED, judge, judge_count
from ..world import worlds
from .finding_reads import Result, Sample, _measure, _samples, trained_kinds
from .finding_spec import COUNTS, EFFECTS, FINDINGS, Finding, load
from .findings_md import HEADER, _digits, components_text, questions_text, render_findings, tally
from .fmt import num
from .looks import Look, current_look, load_plan
from .rows import Row, TableError

Reading = tuple[Row, Optional[EvalRecord], Optional[EvalRecord]]   # a run's row, eval.json, its parent's
Lookup = Callable[[str, str, str], Optional[str]]


def combined(values: list[float], ses: list[float], question_cov: Optional[QuestionCov], level: float = 0.95) -> Combined:
    """The seeds combined: one seed's own estimate and question-bootstrap CI; several crossed
    (stats/crossed.py) with their records' question covariance, or without one bounded from their
    own CIs as if their question errors were wholly shared."""
    if len(values) == 1:
        return combine(values, ses, level)
    cov = question_cov.finite_cov(len(values)) if question_cov is not None else None
    if question_cov is not None and cov is not None:
        return crossed.interval(values, np.asarray(cov, dtype=float), question_cov.n_questions, level,
                                question_cov.finite_tails())
    return crossed.interval(values, crossed.shared_bound(ses), None, level)


def _pooled(parts: list[Result], level: float) -> tuple[Combined, tuple[Sample, ...]]:
    """The seeds over every held-out draw of a look: each seed's estimate and each draw's question
    covariance weighted by its questions (draws are disjoint question sets: their errors are
    independent), θ_i = Σ w_d θ_id, C = Σ w_d² C_d, and the tails of the seeds' mean pooled alike
    (crossed.pooled_tails: the interval's percentile floor); one draw is itself."""
    values = [[float(v) for _, v, _ in p.samples if v is not None] for p in parts]
    ses = [[se_from_ci(ci) for _, _, ci in p.samples if ci is not None] for p in parts]
    if len(parts) == 1:
        return combined(values[0], ses[0], parts[0].question_cov, level), parts[0].samples
    covs: list[np.ndarray] = []
    ns: list[Optional[int]] = []
    for p, s in zip(parts, ses):
        cov = p.question_cov.finite_cov(len(s)) if p.question_cov is not None else None
        covs.append(np.asarray(cov, dtype=float) if cov is not None else crossed.shared_bound(s))
        ns.append(p.question_cov.n_questions if cov is not None and p.question_cov is not None else None)
    known = [n for n in ns if n is not None]
    total = sum(known) if len(known) == len(ns) else None
    w = [(n or 0) / total for n in ns] if total else [1 / len(parts)] * len(parts)
    theta = [sum(wd * vals[i] for wd, vals in zip(w, values)) for i in range(len(values[0]))]
    cov_sum = w[0] * w[0] * covs[0]
    for wd, c in zip(w[1:], covs[1:]):
        cov_sum = cov_sum + wd * wd * c
    z = statistics.NormalDist().inv_cdf(0.975)
    samples = tuple((seed, t, (t - z * math.sqrt(cov_sum[i][i]), t + z * math.sqrt(cov_sum[i][i])))
                    for i, ((seed, _, _), t) in enumerate(zip(parts[0].samples, theta)))
    if len(theta) == 1:
        return combine(theta, [math.sqrt(cov_sum[0][0])], level), samples
    tails = [p.question_cov.finite_tails() if p.question_cov is not None else None for p in parts]
    every = [t for t in tails if t is not None]
    pooled = crossed.pooled_tails([statistics.fmean(v) for v in values], every, w) \
        if total and len(every) == len(tails) else None
    return crossed.interval(theta, cov_sum, total, level, pooled), samples


def decided_within(f: Finding, c: Combined) -> float:
    """The half-width under which the finding is decided at estimate ``c``: |θ̂| for a direction; a
    null decides either way, its CI inside ±margin or wholly outside it past the estimate's side."""
    return abs(float(f.margin or 0.0) - abs(c.estimate)) if f.expect == "= 0" else abs(c.estimate)


def result(f: Finding, row: Row, evals: Optional[EvalRecord], parent_evals: Optional[EvalRecord] = None,
           more: tuple[Reading, ...] = (), boundary: Boundary = Boundary(), look: Optional[Look] = None,
           max_seeds: int = 0, max_draws: int = 1) -> Result:
    """The finding's number and verdict before the table's multiplicity control (``decide``):
    from its run's row state and eval.json (read only for a done run), and for an effect the
    parent's eval.json (is the parent trained?). A later look (``look``, conf/decide.yaml) pools
    its other held-out draws' (row, evals, parent_evals) in ``more``; every look is tested at the
    plan's nominal level (``boundary``), its p adjusted to α's scale. Futility reads what the plan
    can still add: up to ``max_seeds`` seeds, and ``max_draws`` draws against the look's own."""
    parts = [_measure(f, row, evals, parent_evals)] + [_measure(f, *m) for m in more]
    first = parts[0]
    if first.verdict != INCONCLUSIVE or f.metric in COUNTS:
        return first
    if any(p.verdict != INCONCLUSIVE for p in parts):
        return next(p for p in parts if p.verdict != INCONCLUSIVE)
    out = Result(NO_RESULT, "", first.stage, first.compares, first.samples, first.trained, look=look)
    c, out.samples = _pooled(parts, boundary.level())
    out.combined = c
    margin = float(f.margin or 0.0)           # a null's (finding_spec requires one); 0 for a direction
    out.p = boundary.adjusted(c.p_equivalent(margin) if f.expect == "= 0" else c.p_zero())
    target = decided_within(f, c)
    trained = first.trained
    if c.crossed:
        out.needed = crossed.seeds_to_decide(c, target, least=MIN_SEEDS if trained else 2)
        out.questions_needed = crossed.questions_to_decide(c, target)
    else:
        ses = [se_from_ci(ci) for _, _, ci in out.samples if ci is not None]
        out.needed = seeds_needed([v for _, v, _ in out.samples if v is not None], ses, target)
        out.needed_is_bound = True
    where = f", look {look.index} of {look.of}" if look is not None and look.of > 1 else ""
    if trained and c.k < MIN_SEEDS:
        out.verdict, out.detail = PROVISIONAL, f"{c.k} seed" + ("s" if c.k != 1 else "") + where
        return out
    out.verdict = judge(f.expect, c.ci, f.margin)
    out.detail = (f"{c.k} seeds" if c.k > 1 else "") + (where if c.k > 1 else where.lstrip(", "))
    if out.verdict == INCONCLUSIVE and look is not None and look.of > 1:
        max_seeds = max(max_seeds, c.k)
        if look.index >= look.of:
            out.stopped = "the plan's last look"
        elif (why := futility(c, target, max_seeds, max(1.0, max_draws / look.draws))):
            out.stopped = f"stopped for futility: {why}"
        if out.stopped:
            out.detail += f"; {out.stopped}"
    return out


def decide(findings: list[Finding], results: dict[str, Result]) -> None:
    """The multiplicity control (HEADER): BH q over the findings with a p that are not provisional;
    a decided verdict whose q exceeds FDR becomes inconclusive (a null's "not reproduced", which
    its equivalence p does not test, is kept)."""
    tested = [f.id for f in findings if results[f.id].p is not None and results[f.id].verdict != PROVISIONAL]
    for fid, q in zip(tested, bh_q([results[fid].p for fid in tested])):
        r = results[fid]
        r.q = q
        f = next(x for x in findings if x.id == fid)
        gated = r.verdict == REPRODUCED or (r.verdict == NOT_REPRODUCED and f.expect != "= 0")
        if gated and q is not None and q > FDR:
            r.verdict = INCONCLUSIVE
            r.detail = ", ".join(x for x in (r.detail, f"q {q:.2g} > {FDR}") if x)


def evaluate(root: Path | str, rows: list[Row]) -> tuple[Optional[list[Finding]], dict[str, Result], Lookup]:
    """(findings, results after decide, lookup for a why's placeholders): conf/findings.yaml checked
    (TableError on a bad file), each finding's run (and an effect's parent) read from
    results/<run>/eval.json when its row is done."""
    root = Path(root)
    by_id = {r["run_id"]: r for r in rows}
    findings = load(root, set(by_id))
    evals: dict[str, EvalRecord] = {}

    def read(run: Optional[str]) -> Optional[EvalRecord]:
        if run is None or run not in by_id or by_id[run]["state"] != "done":
            return None
        if run not in evals:
            evals[run] = read_eval(root / "results" / run / "eval.json", f"results/{run}/eval.json")
        return evals[run]

    def reading(run: str, f: Finding) -> Reading:
        own = read(run)
        return by_id[run], own, read(own.parent) if own is not None and f.metric in EFFECTS else None

    plan = load_plan(root)
    tree = RunTree.load(root / "conf") if plan.looks > 1 and findings else None
    results = {}
    for f in findings or ():
        if tree is None:
            results[f.id] = result(f, *reading(f.run, f), boundary=plan.bound())
            continue
        look = current_look(tree, f.run, plan, lambda r: r in by_id and by_id[r]["state"] == "done")
        first, *others = [reading(r, f) for r in look.runs]
        redraws = not worlds()[tree.resolved(f.run).world.name].one_split
        results[f.id] = result(f, *first, more=tuple(others), boundary=plan.bound(), look=look,
                               max_seeds=plan.max_seeds, max_draws=plan.draws if redraws else 1)
    decide(findings or [], results)

    def lookup(run: str, stage: str, metric: str) -> Optional[str]:
        f = Finding("why", "", "", "", run, stage, metric, "> 0")
        evals_ = read(run)
        if evals_ is None:
            return None
        at = evals_.final if stage == "final" else stage
        values = [v for _, v, _ in _samples(evals_, f, at)[0] if v is not None]
        if not values:
            return None
        d, signed = _digits(f)
        return num(statistics.fmean(values), d, signed) + (f" (mean of {len(values)} seeds)" if len(values) > 1 else "")
    return findings, results, lookup


def render(root: Path | str, rows: list[Row], claims: dict[str, str], figure: Optional[str] = None) -> str:
    """FINDINGS.md's text (``figure``: the forest plot's file name beside it, if one was drawn)."""
    findings, results, lookup = evaluate(root, rows)
    return render_findings(findings, results, claims, lookup, figure)


__all__ = ["COUNTS", "EFFECTS", "FDR", "FINDINGS", "HEADER", "INCONCLUSIVE", "NOT_REPRODUCED", "NO_RESULT",
           "PROVISIONAL", "REPRODUCED", "Finding", "Result", "TableError", "components_text", "decide", "decided_within",
           "evaluate",
           "judge", "judge_count", "load", "questions_text", "render", "render_findings", "result", "tally",
           "trained_kinds"]
