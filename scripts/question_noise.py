"""The question noise of each finding's seed-averaged estimate, from the records, against the CI
FINDINGS.md prints. The held-out questions are resampled jointly across seeds (the same resampled
questions for every seed, and for a paired effect for child and parent), each seed's metric is
recomputed by the metric's own function (the registered stage metrics), and the
seeds are averaged: the 95% percentile half-width of that average is what the questions alone
allow. A finding's printed CI must be no narrower.

    python scripts/question_noise.py [ROOT] [--resamples 4000] [--findings OLD/FINDINGS.md]

With --findings, the half-widths are read from that file's summary table (another build's
FINDINGS.md over the same results: what it printed) instead of this code's.

Prints, per finding over several seeds, the printed half-width, the question noise and their ratio;
exits 1 when a ratio is under 1 − TOLERANCE (the bootstrap's own Monte-Carlo error at 4,000
resamples is about 1.5% of a half-width; at 1,000, 3%).
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Optional

import numpy as np

from martingale.metrics import StageColumns, declared_metrics
from martingale.records.crossed import _aligned
from martingale.records.eval_record import read_eval
from martingale.store import files
from martingale.table import build_table, findings

TOLERANCE = 0.05
ARRAYS = [f.name for f in fields(StageColumns) if f.name not in ("n_bootstrap", "level", "seed")]


def metric_value(s: StageColumns, key: str) -> float:
    """The stage metric ``key`` of the columns, by its own function (NaN where it is undefined)."""
    for metric in (d.metric for d in declared_metrics().values()):
        if key in metric.keys and metric.applies(s):
            try:
                value = metric.compute(s)
            except ValueError:
                return float("nan")
            return float(value[key] if isinstance(value, dict) else value)
    return float("nan")


def resampled(s: StageColumns, idx: np.ndarray) -> StageColumns:
    """The columns of the questions ``idx`` (a resample: repeats allowed); a metric's own inner
    bootstrap (MS_adj's CI) at a token size, its interval unused here."""
    return replace(s, n_bootstrap=10, **{name: getattr(s, name)[idx] for name in ARRAYS if getattr(s, name) is not None})


def masked(s: StageColumns, keep: np.ndarray) -> StageColumns:
    """Every answer of the questions outside ``keep`` unparsed: a pairing's questions only."""
    return replace(s, **{name: np.where(keep, s.stated if name == "stated" else getattr(s, name), np.nan)
                         for name in ("stated", "prior", "post")})


def seed_value(f: findings.Finding, child: StageColumns, parent: Optional[StageColumns]) -> float:
    if parent is None:
        return metric_value(child, f.metric)
    part = f.metric.split(".")[1]
    keep = child.ok & parent.ok if part == "brier" else child.pair & parent.pair
    return metric_value(masked(child, keep), part) - metric_value(masked(parent, keep), part)


def by_seed(root: Path, run: str, stage: str) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for row in files.read_jsonl(root / "results" / run / "records.jsonl"):
        if row["stage"] == stage:
            out.setdefault(int(row["seed"]), []).append(row)
    return out


def question_noise(root: Path, f: findings.Finding, r: findings.Result, resamples: int) -> Optional[float]:
    """The 95% percentile half-width of the seed-averaged estimate under questions resampled
    jointly across seeds (None: not a finding over several seeds with records)."""
    evals = read_eval(root / "results" / f.run / "eval.json")
    child = by_seed(root, f.run, r.stage)
    seeds = sorted(child)
    parent_rows = None
    eff = evals.effect_at(r.stage) if f.metric in findings.EFFECTS and r.stage is not None else None
    if eff is not None and evals.parent is not None:
        parent = by_seed(root, evals.parent, eff.parent_stage)
        pseed = {s: eff.per_seed[s].parent_seed for s in seeds}
        parent_rows = [parent[pseed[s]] for s in seeds]
    n, cols = _aligned([child[s] for s in seeds] + (parent_rows or []))
    k = len(seeds)
    rng = np.random.default_rng(20261206)
    means = []
    for _ in range(resamples):
        idx = rng.integers(0, n, n)
        values = [seed_value(f, resampled(cols[i], idx), resampled(cols[k + i], idx) if parent_rows else None)
                  for i in range(k)]
        means.append(np.mean(values))
    means = np.asarray(means)
    means = means[np.isfinite(means)]
    if len(means) < 0.99 * resamples:       # the metric is not one the records recompute (an episode's instructor_ms)
        return None
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(hi - lo) / 2


def printed_half_widths(path: Path) -> dict[str, float]:
    """finding id → the half-width of the CI its summary row prints."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        m = re.search(r"\[([+\-−]?[\d.]+), ([+\-−]?[\d.]+)\]", cells[6]) if len(cells) > 6 else None
        if m:
            lo, hi = (float(g.replace("−", "-")) for g in m.groups())
            out[cells[0]] = (hi - lo) / 2
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", nargs="?", default=".")
    ap.add_argument("--resamples", type=int, default=4000)
    ap.add_argument("--findings", type=Path, default=None, help="read the printed CIs from this FINDINGS.md")
    args = ap.parse_args(argv)
    root = Path(args.root).resolve()
    found, results, _ = findings.evaluate(root, build_table(root))
    printed = printed_half_widths(args.findings) if args.findings else None
    under = 0
    print(f"{'finding':40s} {'k':>2s} {'half-width':>10s} {'questions':>10s} {'ratio':>6s}")
    for f in found or ():
        r = results[f.id]
        c = r.combined
        if c is None or c.k < 2 or f.metric in findings.COUNTS:
            continue
        if printed is not None and f.id not in printed:
            continue
        noise = question_noise(root, f, r, args.resamples)
        half = printed[f.id] if printed is not None else (c.ci[1] - c.ci[0]) / 2
        if noise is None:
            print(f"{f.id:40s} {c.k:2d} {half:10.4f}     (no per-question records of {f.metric})")
            continue
        ratio = half / noise if noise else float("inf")
        flag = "  UNDER" if ratio < 1 - TOLERANCE else ""
        under += bool(flag)
        print(f"{f.id:40s} {c.k:2d} {half:10.4f} {noise:10.4f} {ratio:6.2f}{flag}")
    print(f"{under} finding(s) over several seeds with a CI under the question noise of their seed-averaged estimate")
    return 1 if under else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
