"""The verdict rules of a finding (FINDINGS.md's header states them): a direction decided by where
its CI lies against 0, a null by equivalence within its margin, a seed count by k of n; the names
of the verdicts and the false-discovery level a decided one's q must meet."""
from __future__ import annotations

from typing import Optional

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NO_RESULT = "reproduced", "not reproduced", "inconclusive", "no result yet"

PROVISIONAL = "provisional"

FDR = 0.05                 # the false-discovery level a decided verdict's q must meet


def judge(expect: str, ci: tuple[float, float], margin: Optional[float] = None) -> str:
    """The verdict rule on one CI (HEADER states it); a null by equivalence within ±margin."""
    lo, hi = ci
    if expect == "= 0":
        m = float(margin) if margin is not None else 0.0
        if -m < lo and hi < m:
            return REPRODUCED
        return NOT_REPRODUCED if lo >= m or hi <= -m else INCONCLUSIVE
    if expect == "< 0":
        lo, hi = -hi, -lo
    return REPRODUCED if lo > 0 else NOT_REPRODUCED if hi <= 0 else INCONCLUSIVE


def judge_count(expect: str, k: int, n: int) -> str:
    """The verdict rule on a seed count k of n (HEADER states it)."""
    if expect == "some":
        return REPRODUCED if 0 < k < n else NOT_REPRODUCED
    hit, miss = (n, 0) if expect == "all" else (0, n)
    return REPRODUCED if k == hit else NOT_REPRODUCED if k == miss else INCONCLUSIVE


__all__ = ["FDR", "INCONCLUSIVE", "NOT_REPRODUCED", "NO_RESULT", "PROVISIONAL", "REPRODUCED", "judge", "judge_count"]
