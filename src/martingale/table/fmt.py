"""How a number of the table is written (RUNS.md, FINDINGS.md, `martingale status`): one place, one style."""
from __future__ import annotations

from typing import Mapping, Optional, Sequence

from .runs_row import RowEffect, Seeded, one_seed


def _number(value: object) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def num(value: object, digits: int = 4, signed: bool = False) -> str:
    """A number; anything else (None, a missing value) as an en dash."""
    x = _number(value)
    if x is None:
        return "–"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def mean_sd(mean: Optional[float], sd: Optional[float], digits: int = 4, signed: bool = False) -> str:
    """Several seeds' mean±sd; an en dash without a mean."""
    return "–" if mean is None else f"{num(mean, digits, signed)}±{num(sd, digits)}"


def ci(value: Optional[Sequence[Optional[float]]], digits: int = 4, signed: bool = False) -> str:
    """A CI as [lo, hi]; an undefined one is empty."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and None not in value:
        return f" [{num(value[0], digits, signed)}, {num(value[1], digits, signed)}]"
    return ""


def metric(metrics: Mapping[str, Seeded], key: str, digits: int = 4, signed: bool = False) -> str:
    """A runs.json metric (rows.Seeded): one seed's value with its CI (``<key>_ci``), several
    seeds' mean±sd."""
    m = metrics.get(key)
    if m is None:
        return "–"
    one, value = one_seed(m)
    if not one:
        return mean_sd(m["mean"], m["sd"], digits, signed)
    bounds = metrics.get(f"{key}_ci")
    interval = one_seed(bounds)[1] if bounds is not None else None
    return num(value, digits, signed) + ci(interval if isinstance(interval, list) else None, digits, signed)


def pval(value: object) -> str:
    """A p-value with two significant digits."""
    x = _number(value)
    return "–" if x is None else f"{x:.2g}"


def brier(metrics: Mapping[str, Seeded]) -> str:
    """A stage's Brier with its CI."""
    return metric(metrics, "brier")


def ms(metrics: Mapping[str, Seeded]) -> str:
    """A stage's MS with its CI."""
    return metric(metrics, "ms", 3, True)


def effect(eff: Optional[RowEffect]) -> str:
    """The knob's headline paired effect: ΔBrier [CI] of the final stages compared, with paired-t p."""
    if eff is None or eff.get("brier_delta") is None:
        return "–"
    return (f"{eff.get('compares') or eff.get('stage')}: {num(eff.get('brier_delta'), 4, True)}"
            f"{ci(eff.get('brier_ci'), 4, True)} p={pval(eff.get('p_t'))}")


def cell(value: object) -> str:
    """A Markdown table cell: one line, "–" when empty, pipes escaped."""
    text = "–" if value in (None, "", []) else str(value)
    return " ".join(text.split()).replace("|", "\\|")
