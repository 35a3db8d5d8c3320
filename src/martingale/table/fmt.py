"""How a number of the table is written (RUNS.md, `martingale status`): one place, one style."""
from __future__ import annotations

from typing import Any


def num(value: Any, digits: int = 4, signed: bool = False) -> str:
    """A metric: a number, a multi-seed {mean, sd} as mean±sd, None as an en dash."""
    if isinstance(value, dict):
        mean, sd = value.get("mean"), value.get("sd")
        return "–" if mean is None else f"{num(mean, digits, signed)}±{num(sd, digits)}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "–"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def ci(value: Any, digits: int = 4, signed: bool = False) -> str:
    """A CI as [lo, hi]; an undefined one is empty."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and None not in value:
        return f" [{num(value[0], digits, signed)}, {num(value[1], digits, signed)}]"
    return ""


def pval(value: Any) -> str:
    """A p-value with two significant digits."""
    return "–" if not isinstance(value, (int, float)) or isinstance(value, bool) else f"{value:.2g}"


def brier(metrics: dict) -> str:
    """A stage's Brier with its CI."""
    return num(metrics.get("brier")) + ci(metrics.get("brier_ci"))


def ms(metrics: dict) -> str:
    """A stage's MS with its CI."""
    return num(metrics.get("ms"), 3, True) + ci(metrics.get("ms_ci"), 3, True)


def effect(eff: Any) -> str:
    """The knob's headline paired effect: ΔBrier [CI] of the final stages compared, with paired-t p."""
    if not isinstance(eff, dict) or eff.get("brier_delta") is None:
        return "–"
    return (f"{eff.get('compares') or eff.get('stage')}: {num(eff['brier_delta'], 4, True)}{ci(eff.get('brier_ci'), 4, True)}"
            f" p={pval(eff.get('p_t'))}")


def cell(value: Any) -> str:
    """A Markdown table cell: one line, "–" when empty, pipes escaped."""
    text = "–" if value in (None, "", []) else str(value)
    return " ".join(text.split()).replace("|", "\\|")
