"""The one parser for every stated probability. Unparseable means None, never 0.0.

The log's getP bug read 12–15% of priors as 0.0 and corrupted MS; here a missing, malformed,
ambiguous or out-of-range number is None, counted as a parse failure and excluded from every metric.
"""
from __future__ import annotations

import re

# --- the number a model writes (regex fragments; every pattern below is compiled once, at import) ---
_PLAIN = r"(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)"          # 0.7  .7  1  (fractions: no decimal comma)
_DEC = r"(?:[0-9]+(?:[.,][0-9]+)?|\.[0-9]+)"           # also 0,7 (decimal comma)
_NUM = (
    r"(?P<sign>[+\-−]?)"
    r"(?:\\[dt]?frac\s*\{\s*(?P<ln>" + _PLAIN + r")\s*\}\s*\{\s*(?P<ld>" + _PLAIN + r")\s*\}"   # \frac{1}{4}
    r"|(?P<fn>" + _PLAIN + r")\s*/\s*(?P<fd>" + _PLAIN + r")"                                # 3 / 4
    r"|(?P<m>" + _DEC + r")"                                                                 # 0.7  0,7
    r"(?:[eE](?P<e>[+\-−]?[0-9]+)"                                                          # 1e-3
    r"|[ \t]*(?:[x×·*]|\\times|\\cdot)[ \t]*10[ \t]*\^[ \t]*\{?[ \t]*(?P<e2>[+\-−]?[0-9]+)[ \t]*\}?)?"  # 2 × 10^-1
    r"|(?P<nonfinite>(?i:nan|inf(?:inity)?)\b|∞)"                                              # nan, inf: None
    r")"
    r"(?P<pct>[ \t]*(?:\\?%|percent\b))?"                                                    # 70%  70 %  70\%
)
# ``P`` first (the literal lets the regex engine skip ahead), then: not glued to a word before it
# (MAP = 3, TOP: 2), markdown around P, the sign (= : ≈ ~ \approx ...), markdown/paren before X.
_P = re.compile(
    r"P(?<![A-Za-z0-9]P)[*_`$]*\s*(?:[:=≈~≃]{1,2}|\\approx|\\simeq|\\sim)[\s*_`$(~]*" + _NUM)
_BARE = re.compile(_NUM)
# What right after X makes the statement unreadable: X glued to a word or number (0.7ish, 0.7.5,
# 0,3,4), a malformed number: a run of separators glued to X that goes on as a number (0..7, 0.,7,
# 0,.7, 1..0, 0.7..5, 1.e-3, 1.%, 1./2), a fraction bar with no denominator (1/, 1/.), a question
# mark on it (P = 0.3?), or a second number joined by a range/list/alternative (0.3-0.4, 0.3 - 0.4,
# 0.3 to 0.4, 0.3 .. 0.4, 0.3, 0.4, 0.3 or 0.4, 0.7 ± 0.1, 1/2/3). A separate signed number
# (P = 0.74 -30, synthetic tokens) or a separate "?" is trailing text, not an alternative; so is
# punctuation that no digit follows (0.7.  0.7...  0.7.,).
_TAIL = re.compile(
    r"[A-Za-z0-9]|[.,]+(?:[0-9/%]|\\%|[eE][+\-−]?[0-9])|[^\S\r\n]*/|[*_`$]*\?"
    r"|[\s*_`$)]*(?:(?<!\s)-|-(?=\s)|[–—~/,;±]|\.\.(?!\.)|\+/?-|\bto\b|\bor\b|\band\b|\bvs\b\.?)"
    r"[\s*_`$(~]*[+\-−]?[.,]?[0-9]")
# After an integer X (no decimal part, exponent or %; a fraction's denominator counts) a separator
# spaced from X or from the digits after it is a malformed decimal, not a sentence end: P = 0. 7,
# P = 0 .7, P = 0 . 7, P = 0.. 7, P = 0.\n7 (P = 0, 7 is already a list). The cost: P = 1.\n2. ...
# (a numbered line after it) is None too. After a decimal X, P = 0.7. 5 clues ... is a new sentence.
_INT_TAIL = re.compile(r"\s*[.,]+\s*[0-9]")
_THINK_TAG = re.compile(r"<(/?)think(?:ing)?>", re.IGNORECASE)
_BARE_STRIP = " \t\r\n*_`$"
_MINUS = "−"
_STEP = re.compile(r"->\s*([+-]?\d+)")
_START = re.compile(r"\bthink\s+([+-]?\d+)")


def _drop_thinking(text: str) -> str:
    """text without its ``<think>…</think>`` scratch work: a closed block is removed, an orphan
    ``</think>`` (the chat template opened the block in the prompt) drops everything before it, an
    unclosed ``<think>`` drops everything after it (a trace cut off before its answer)."""
    parts: list[str] = []
    pos, inside = 0, False
    for m in _THINK_TAG.finditer(text):
        if m.group(1):                      # </think>
            if not inside:
                parts.clear()               # orphan: all before it was thinking
            pos, inside = m.end(), False
        elif not inside:                    # <think> (a nested one is ignored)
            parts.append(text[pos:m.start()])
            inside = True
    if not inside:
        parts.append(text[pos:])
    return "".join(parts)


def _value(m: re.Match[str]) -> float | None:
    """The probability a number match states, or None (out of [0, 1], not finite, x/0, a % fraction)."""
    sign, ln, ld, fn, fd, mant, e, e2, nonfinite, pct = m.groups()
    try:
        if mant is not None:
            if e is None:
                e = e2
            if "," in mant:
                mant = mant.replace(",", ".")
            value = float(mant + "e" + e.replace(_MINUS, "-")) if e is not None else float(mant)
            if pct:
                value /= 100.0
        elif nonfinite is None:
            if pct:
                return None                 # 1/2 % : which one is meant?
            num, den = (fn, fd) if fn is not None else (ln, ld)
            d = float(den)
            if d == 0.0:
                return None
            value = float(num) / d
        else:
            return None                     # nan, inf
    except (ValueError, OverflowError):
        return None
    if sign == "-" or sign == _MINUS:
        value = -value
    if not 0.0 <= value <= 1.0:             # also rejects nan; inf is out of range
        return None
    return value + 0.0                      # -0.0 -> 0.0


def _ends_in_integer(m: re.Match[str]) -> bool:
    """Whether the number m matched ends in an integer: ``0``, ``70``, ``1/2`` (not ``0.7``, ``1e-3``,
    ``70%``, ``\\frac{1}{2}``): a separator after it could be a mistyped decimal point."""
    if m.group("pct"):
        return False
    mant = m.group("m")
    if mant is not None:
        return m.group("e") is None and m.group("e2") is None and "." not in mant and "," not in mant
    return m.group("fd") is not None and "." not in m.group("fd")


def parse_p(text: str | None, bare: bool = False) -> float | None:
    """The probability a model states: the last ``P = X`` in text, in [0, 1]; else None, never 0.

    One strict reader, because a misread number silently corrupts every metric while None is
    counted as a parse failure: a range, a list, a malformed or out-of-range number is None, never
    the part before the flaw. ``bare``: a judge's answer may be the number alone. The grammar, with
    every case the tests hold it to: docs/reading-p.md."""
    if not text:
        return None
    if "<" in text:
        text = _drop_thinking(text)
    last = None
    for last in _P.finditer(text):
        pass
    if last is not None:
        end = last.end()
        if _TAIL.match(text, end) or (_ends_in_integer(last) and _INT_TAIL.match(text, end)):
            return None
        return _value(last)
    if not bare:
        return None
    s = text.strip(_BARE_STRIP)
    if s.endswith("."):
        s = s[:-1].rstrip(_BARE_STRIP)
    m = _BARE.fullmatch(s)
    return _value(m) if m is not None else None


_R = re.compile(r"(?<![A-Za-z0-9])R[*_`$]*\s*(?:=|:)\s*[*_`$]*([-+\u2212]?(?:\d+(?:\.\d+)?|\.\d+))(?![\d.,]*\d)")


def parse_r(text: str | None) -> float | None:
    """The belief a model states on the r scale (the research log's rparam elicitation): the last
    ``R = X`` in text with X in [−1, 1] (−1 certainly not, 0 even, 1 certainly), as the
    probability P = (X + 1) / 2; else None (out of range, no number, a lowercase r), never 0."""
    if not text:
        return None
    last = None
    for last in _R.finditer(_drop_thinking(text) if "<" in text else text):
        pass
    if last is None:
        return None
    x = float(last.group(1).replace("\u2212", "-"))
    return (x + 1.0) / 2.0 if -1.0 <= x <= 1.0 else None


def parse_totals(text: str | None) -> list[int] | None:
    """The running log-odds totals a reasoned trace writes (start, then one per step), or None."""
    if not text:
        return None
    start = _START.search(text)
    if start is None:
        return None
    return [int(start.group(1))] + [int(v) for v in _STEP.findall(text[start.end():])]
