"""The knob's paired effect: a child run against its parent, question by question.

A child differs from its parent in exactly one knob and both are evaluated on the same held-out
questions, so for each stage (same name, same seed) the records pair up by ``qid``. On the paired
questions the robustness battery of the research log ("paired-t + Wilcoxon signed-rank + bootstrap CI +
%-question-wins") gives the effect of the knob, child − parent:

- ΔBrier, from per-question Brier losses (y − stated P)²: the mean difference with a paired
  percentile-bootstrap CI, paired t (``scipy.stats.ttest_rel``), Wilcoxon signed-rank
  (``scipy.stats.wilcoxon``, zero differences dropped), the share of questions the child wins
  (strictly lower loss) and the share of ties.
- ΔMS, on questions where both read a prior and a posterior: MS is a slope, not a mean of
  per-question numbers, so t and Wilcoxon do not apply; its tests are the paired bootstrap CI
  (questions resampled jointly for child and parent) and a paired permutation test that swaps
  child and parent within each question (``scipy.stats.permutation_test``, permutation_type
  "samples"): two-sided p of ΔMS = 0.

Undefined parts (too few pairs, every difference 0) are NaN with the reason under ``undefined``.
Replicates add up per seed: ``replicate_summary`` gives the spread and the research log's reliability
language ("beats parent 3/3").
"""
from __future__ import annotations

import math
import warnings
from typing import Mapping, Optional, TypedDict

import numpy as np
from numpy.typing import ArrayLike

from ..core.jsonvalue import JsonObject
from ..core.lazy import module
from . import Block, MetricError, Record, bootstrap_ci, ms_slope, nan_array, too_few_for_ci
from .seeds import SeedSpread, seed_spread

stats = module("scipy.stats")   # imported on first use (martingale.core.lazy)

MIN_PAIRED = 3


class Part(TypedDict, total=False):
    """One part of a paired effect (brier_effect, ms_effect): Δ, its CI, the tests, the reasons."""
    n: int
    child: float
    parent: float
    delta: float
    share_child_wins: float
    share_ties: float
    ci: list[float]
    t: float
    p_t: float
    wilcoxon: float
    p_wilcoxon: float
    p_perm: float
    undefined: dict[str, str]


class Replicates(TypedDict):
    """A paired effect across seeds (replicate_summary)."""
    seeds: list[int]
    brier_delta: SeedSpread
    ms_delta: SeedSpread
    beats_parent: dict[str, int] | None
    beats_parent_ci: dict[str, int] | None


class EffectError(ValueError):
    """Child and parent records cannot be paired (they are not the same questions)."""


def pair_records(child: list[Record], parent: list[Record]) -> tuple[list[Record], list[Record]]:
    """Child and parent rows of the questions both evaluated, in the child's order, matched by qid.

    Raises EffectError when a matched qid resolves differently (y) or carries different evidence
    (a different Bayes belief): the knob changed the questions, so there is nothing to pair.
    """
    by_qid: dict[str, Record] = {}
    for r in parent:
        if r["qid"] in by_qid:
            raise EffectError(f"parent records repeat qid {r['qid']!r}")
        by_qid[r["qid"]] = r
    seen: set[str] = set()
    c_rows, p_rows = [], []
    for r in child:
        if r["qid"] in seen:
            raise EffectError(f"child records repeat qid {r['qid']!r}")
        seen.add(r["qid"])
        p = by_qid.get(r["qid"])
        if p is None:
            continue
        if int(r["y"]) != int(p["y"]):
            raise EffectError(f"qid {r['qid']!r} resolves y={r['y']} for the child but y={p['y']} for "
                              "the parent: not the same held-out questions")
        bc, bp = r.get("bayes_end"), p.get("bayes_end")
        if bc is not None and bp is not None and abs(float(bc) - float(bp)) > 1e-6:
            raise EffectError(f"qid {r['qid']!r} carries different evidence for child and parent "
                              f"(Bayes belief {bc} vs {bp}): not the same held-out questions")
        c_rows.append(r)
        p_rows.append(p)
    return c_rows, p_rows


def _nan_test(names: tuple[str, ...], why: str, undefined: dict[str, str]) -> float:
    """NaN for a test that cannot be computed, with the reason recorded under each of its keys."""
    for name in names:
        undefined[name] = why
    return float("nan")


def brier_effect(y: ArrayLike, p_child: ArrayLike, p_parent: ArrayLike, n_bootstrap: int = 1000, level: float = 0.95,
                 seed: int = 0) -> Part:
    """ΔBrier = mean over paired questions of (y − p_child)² − (y − p_parent)², with its battery."""
    y, pc, pp = (np.asarray(a, dtype=float) for a in (y, p_child, p_parent))
    if not (y.shape == pc.shape == pp.shape) or y.ndim != 1:
        raise MetricError("brier_effect: y, child and parent probabilities must be 1-D and paired")
    if np.isnan(np.concatenate([y, pc, pp])).any():
        raise MetricError("brier_effect: NaN in the paired values: drop unparsed questions first")
    n = len(y)
    if n < MIN_PAIRED:
        raise MetricError(f"brier_effect: needs at least {MIN_PAIRED} paired questions, got {n}")
    lc, lp = (y - pc) ** 2, (y - pp) ** 2
    d = lc - lp
    undefined: dict[str, str] = {}
    out: Part = {
        "n": n, "child": float(lc.mean()), "parent": float(lp.mean()), "delta": float(d.mean()),
        "share_child_wins": float(np.mean(d < 0)), "share_ties": float(np.mean(d == 0)),
    }
    if (why := too_few_for_ci(n, "paired questions")):
        out["ci"] = [float("nan")] * 2
        undefined["ci"] = why
    elif np.all(d == d[0]):
        out["ci"] = [float(d[0])] * 2   # every resample has the same mean: the interval is a point
    else:
        low, high = bootstrap_ci((lc, lp), lambda a, b: np.mean(a) - np.mean(b), n_bootstrap, level, seed)
        out["ci"] = [float(low), float(high)]
    if np.all(d == 0):
        why = "every paired difference is 0 (child and parent state the same P on every question)"
        out["t"] = out["p_t"] = _nan_test(("t", "p_t"), why, undefined)
        out["wilcoxon"] = out["p_wilcoxon"] = _nan_test(("wilcoxon", "p_wilcoxon"), why, undefined)
    else:
        if np.std(d) == 0:
            out["t"] = out["p_t"] = _nan_test(
                ("t", "p_t"), "the paired differences are all equal (zero variance): t is undefined", undefined)
        else:
            t = stats.ttest_rel(lc, lp)
            out["t"], out["p_t"] = float(t.statistic), float(t.pvalue)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # small-n normal-approximation notices
            w = stats.wilcoxon(lc, lp, zero_method="wilcox")
        out["wilcoxon"], out["p_wilcoxon"] = float(w.statistic), float(w.pvalue)
    out["undefined"] = undefined
    return out


def ms_effect(prior_c: ArrayLike, post_c: ArrayLike, prior_p: ArrayLike, post_p: ArrayLike, n_bootstrap: int = 1000,
              level: float = 0.95, seed: int = 0) -> Part:
    """ΔMS = MS(child) − MS(parent) on the same questions: paired bootstrap CI and paired
    permutation p (child/parent swapped within questions)."""
    a = [np.asarray(v, dtype=float) for v in (prior_c, post_c, prior_p, post_p)]
    if len({v.shape for v in a}) != 1 or a[0].ndim != 1:
        raise MetricError("ms_effect: child and parent priors and posteriors must be 1-D and paired")
    if np.isnan(np.concatenate(a)).any():
        raise MetricError("ms_effect: NaN in the paired values: drop unparsed questions first")
    n = len(a[0])
    if n < MIN_PAIRED:
        raise MetricError(f"ms_effect: needs at least {MIN_PAIRED} paired questions, got {n}")
    for v, who in ((a[0], "child"), (a[2], "parent")):
        if np.ptp(v) == 0:
            raise MetricError(f"ms_effect: constant {who} prior (σ_prior = 0): MS is undefined")
    ms_c, ms_p = ms_slope(a[0], a[1]), ms_slope(a[2], a[3])
    undefined: dict[str, str] = {}
    out: Part = {"n": n, "child": ms_c, "parent": ms_p, "delta": ms_c - ms_p}
    same = all(np.array_equal(a[i], a[i + 2]) for i in (0, 1))
    if (why := too_few_for_ci(n, "paired questions")):
        out["ci"] = [float("nan")] * 2
        undefined["ci"] = why
    elif same:
        out["ci"] = [0.0, 0.0]
    else:
        low, high = bootstrap_ci(tuple(a), lambda w, x, y, z: ms_slope(w, x) - ms_slope(y, z),
                                 n_bootstrap, level, seed)
        out["ci"] = ci = [float(low), float(high)]
        if any(math.isnan(v) for v in ci):
            undefined["ci"] = "bootstrap interval undefined (a resample had a constant prior)"
    if same:
        out["p_perm"] = _nan_test(("p_perm",), "child and parent read the same beliefs on every question", undefined)
    else:
        prior = np.concatenate([a[0], a[2]])
        post = np.concatenate([a[1], a[3]])

        def stat(i, j):
            return ms_slope(prior[i], post[i]) - ms_slope(prior[j], post[j])

        res = stats.permutation_test((np.arange(n), np.arange(n) + n), stat, permutation_type="samples",
                                     vectorized=False, n_resamples=n_bootstrap, alternative="two-sided",
                                     rng=np.random.default_rng(seed))
        out["p_perm"] = float(res.pvalue)
    out["undefined"] = undefined
    return out


BRIER_KEYS = ("n", "child", "parent", "delta", "ci", "t", "p_t", "wilcoxon", "p_wilcoxon",
              "share_child_wins", "share_ties")
MS_KEYS = ("n", "child", "parent", "delta", "ci", "p_perm")


def undefined_block(keys: tuple[str, ...], n: int, reason: str) -> Block:
    """A battery that cannot be run: every key NaN (the CI a NaN pair), n as counted, the reason
    under ``undefined`` for each — the same shape as a defined block, never a silent number."""
    out: Block = {k: [float("nan")] * 2 if k == "ci" else float("nan") for k in keys}
    out["n"] = n
    out["undefined"] = {k: reason for k in keys if k != "n"}
    return out


def undefined_effect(reason: str, n_paired: int = 0) -> Block:
    """A stage's effect block when nothing pairs (e.g. the parent lacks the stage)."""
    return {"n_paired": n_paired, "brier": undefined_block(BRIER_KEYS, 0, reason),
            "ms": undefined_block(MS_KEYS, 0, reason), "undefined": {"effect": reason}}


def paired_effect(child: list[Record], parent: list[Record], n_bootstrap: int = 1000,
                  level: float = 0.95, seed: int = 0) -> Block:
    """The effect block of one stage and seed: child − parent on the questions both evaluated.

    ``brier`` pairs questions where both stated a P; ``ms`` those where both read a prior and a
    posterior. A part that cannot be computed keeps its shape with NaN values (null in JSON) and
    the reason under its own and the block's ``undefined``.
    EffectError when the records are not the same questions.
    """
    c_rows, p_rows = pair_records(child, parent)
    out: Block = {"n_child": len(child), "n_parent": len(parent), "n_paired": len(c_rows)}
    undefined: dict[str, str] = {}
    y = nan_array([r["y"] for r in c_rows])
    sc, sp = nan_array([r["stated"] for r in c_rows]), nan_array([r["stated"] for r in p_rows])
    ok = ~np.isnan(sc) & ~np.isnan(sp)
    try:
        out["brier"] = brier_effect(y[ok], sc[ok], sp[ok], n_bootstrap, level, seed)
    except MetricError as e:
        out["brier"] = undefined_block(BRIER_KEYS, int(ok.sum()), str(e))
        undefined["brier"] = str(e)
    prc, poc = nan_array([r["prior"] for r in c_rows]), nan_array([r["posterior"] for r in c_rows])
    prp, pop = nan_array([r["prior"] for r in p_rows]), nan_array([r["posterior"] for r in p_rows])
    okm = ~np.isnan(prc) & ~np.isnan(poc) & ~np.isnan(prp) & ~np.isnan(pop)
    try:
        out["ms"] = ms_effect(prc[okm], poc[okm], prp[okm], pop[okm], n_bootstrap, level, seed)
    except MetricError as e:
        out["ms"] = undefined_block(MS_KEYS, int(okm.sum()), str(e))
        undefined["ms"] = str(e)
    out["undefined"] = undefined
    return out


def _count(flags: list[bool | None]) -> dict[str, int] | None:
    """k of n seeds as numbers, ``{"k": k, "n": n}`` (n: the seeds with a flag); None for none."""
    known = [f for f in flags if f is not None]
    return {"k": int(sum(known)), "n": len(known)} if known else None


def _get(block: object, *path: str) -> object:
    """block[path...] (None when absent, null or NaN)."""
    for key in path:
        if not isinstance(block, dict):
            return None
        block = block.get(key)
    if isinstance(block, float) and math.isnan(block):
        return None
    return block


def _number(block: object, *path: str) -> Optional[float]:
    """block[path...] as a finite number (None when absent, null, NaN or not a number)."""
    value = _get(block, *path)
    return value if isinstance(value, (int, float)) else None


def _high(block: object, *path: str) -> Optional[float]:
    """The high end of the interval at block[path...] (None when absent, null or NaN)."""
    ci = _get(block, *path)
    if not isinstance(ci, (list, tuple)) or not ci:
        return None
    high = ci[1]
    return None if high is None or math.isnan(high) else float(high)


def replicate_summary(per_seed: Mapping[int, Mapping[str, object]]) -> Replicates:
    """Across seeds (each seed's paired effect): the spread of ΔBrier and ΔMS and the counts
    "beats parent" (ΔBrier < 0) and "beats parent, CI below 0", each k of n seeds (_count)."""
    seeds = sorted(per_seed)
    d_brier = [_number(per_seed[s], "brier", "delta") for s in seeds]
    d_ms = [_number(per_seed[s], "ms", "delta") for s in seeds]
    ci_hi = [_high(per_seed[s], "brier", "ci") for s in seeds]
    return {
        "seeds": seeds,
        "brier_delta": seed_spread(d_brier),
        "ms_delta": seed_spread(d_ms),
        "beats_parent": _count([None if v is None else v < 0 for v in d_brier]),
        "beats_parent_ci": _count([None if hi is None else hi < 0 for hi in ci_hi]),
    }


def _midpoint(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None else (a + b) / 2


def beat_counts(per_seed_metrics: Mapping[int, JsonObject],
                start: Mapping[int, JsonObject] | None,
                natural: Mapping[int, JsonObject] | None = None) -> dict[str, dict[str, int] | None]:
    """The log's reliability language for one stage over seeds, each k of n seeds (_count): "beats
    start" (Brier below the run's own s0 of the same seed), "beats constant" (Brier below the
    base-rate constant) and, given the natural model measured the same way, "beats the natural
    base" and "full deflation": Brier below the midpoint of the natural base's Brier and the constant's (the
    log's 0.23, between base 0.247 and the constant 0.211)."""
    seeds = sorted(per_seed_metrics)

    def lt(a, b):
        return None if a is None or b is None or math.isnan(a) or math.isnan(b) else a < b

    own = {s: per_seed_metrics[s].get("brier") for s in seeds}
    const = {s: per_seed_metrics[s].get("brier_constant") for s in seeds}

    def beats(ref: dict[int, float | None]) -> dict[str, int] | None:
        return _count([lt(own[s], ref[s]) for s in seeds])

    out = {"beats_constant": beats(const)}
    crowd = {s: per_seed_metrics[s].get("crowd_brier") for s in seeds}
    if any(v is not None for v in crowd.values()):      # questions with a crowd value (metrics/crowd.py)
        out["beats_crowd"] = _count([lt(per_seed_metrics[s].get("crowd_delta_brier"), 0.0) for s in seeds])
    if start is not None:
        out["beats_start"] = beats({s: (start.get(s) or {}).get("brier") for s in seeds})
    if natural is not None:
        base = {s: (natural.get(s) or {}).get("brier") for s in seeds}
        out["beats_natural_base"] = beats(base)
        out["full_deflation"] = beats({s: _midpoint(base[s], const[s]) for s in seeds})
    return out
