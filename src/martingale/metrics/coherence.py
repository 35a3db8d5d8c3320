"""Coherence: a trace against its answer, and a question's two answers under negation."""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ..core.lazy import module
from ..stats import MetricError
from .core import StageColumns, check_probs, column, stage_metric

stats = module("scipy.stats")   # imported on first use (martingale.core.lazy)

def trace_coherence(stated: ArrayLike, trace_last: ArrayLike) -> float:
    """Coherence of a trace with its answer: mean |stated P − last belief the trace writes|."""
    p = check_probs("trace_coherence (stated)", stated)
    last = check_probs("trace_coherence (trace_last)", trace_last)
    if p.shape != last.shape:
        raise MetricError("trace_coherence: stated and trace_last differ in length")
    return float(np.mean(np.abs(p - last)))


def negation_coherence(p: ArrayLike, p_neg: ArrayLike) -> float:
    """Coherence on negation pairs: mean |P(A) + P(¬A) − 1| (0 = the two answers are consistent)."""
    a = check_probs("negation_coherence (P(A))", p)
    q = check_probs("negation_coherence (P(not A))", p_neg)
    if a.shape != q.shape:
        raise MetricError("negation_coherence: P(A) and P(not A) differ in length")
    return float(np.mean(np.abs(a + q - 1)))


def _negation_pairs(s: StageColumns) -> np.ndarray:
    return s.ok & ~np.isnan(column(s.neg, "neg"))


@stage_metric("coherence", reads=("stated", "trace_last"))
def _coherence(s: StageColumns) -> float:
    """Trace coherence = mean |stated P − trace_last|."""
    both = s.ok & ~np.isnan(s.trace_last)
    return trace_coherence(s.stated[both], s.trace_last[both])


@stage_metric("n_negation_pairs", reads=("stated", "neg"))
def _n_negation_pairs(s: StageColumns) -> int:
    """n_negation_pairs = questions with a parsed P(A) and P(¬A)."""
    return int(_negation_pairs(s).sum())


@stage_metric("negation_coherence", reads=("stated", "neg"))
def _negation_coherence(s: StageColumns) -> float:
    """Negation coherence = mean |P(A) + P(¬A) − 1|."""
    both = _negation_pairs(s)
    return negation_coherence(s.stated[both], column(s.neg, "neg")[both])
