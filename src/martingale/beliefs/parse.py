"""The one parser for every stated probability. Unparseable means None, never 0.0.

The log's getP bug read 12–15% of priors as 0.0 and corrupted MS; here a missing, malformed or
out-of-range number is None, counted as a parse failure and excluded from every metric.
"""
from __future__ import annotations

import math
import re

_P = re.compile(r"\bP\s*=\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(%?)")
_STEP = re.compile(r"->\s*([+-]?\d+)")
_START = re.compile(r"\bthink\s+([+-]?\d+)")


def parse_p(text: str | None) -> float | None:
    """The last ``P = X`` in text as a probability in [0, 1]; a trailing % divides by 100."""
    if not text:
        return None
    matches = _P.findall(text)
    if not matches:
        return None
    number, percent = matches[-1]
    try:
        value = float(number)
    except ValueError:
        return None
    if percent:
        value /= 100.0
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        return None
    return value


def parse_totals(text: str | None) -> list[int] | None:
    """The running log-odds totals a reasoned trace writes (start, then one per step), or None."""
    if not text:
        return None
    start = _START.search(text)
    if start is None:
        return None
    return [int(start.group(1))] + [int(v) for v in _STEP.findall(text[start.end():])]
