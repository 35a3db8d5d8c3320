"""``findings-forest.png``: FINDINGS.md's picture — each finding with a result, its seeds' estimates
with their own question CIs, the combined estimate and CI, a null's margin band, coloured by verdict
(plots.findings_forest)."""
from __future__ import annotations

import io
from typing import Any, Optional

from ..core.lazy import module
from ..records.plots import _META, DPI
from .findings import NO_RESULT, Finding, Result

_figure = module("matplotlib.figure")             # matplotlib on first use: the CLI and the table import this
_agg = module("matplotlib.backends.backend_agg")

FOREST = "findings-forest.png"


def rows(findings: list[Finding], results: dict[str, Result]) -> list[dict]:
    """The plot's rows: findings with a combined estimate, in FINDINGS.md's order."""
    out = []
    for f in findings:
        r = results[f.id]
        if r.combined is None or r.verdict == NO_RESULT:
            continue
        out.append({"label": f.id, "claim": f.claim, "brier": "brier" in f.metric, "margin": f.margin,
                    "seeds": [v for _, v, _ in r.samples if v is not None],
                    "seed_cis": [ci for _, v, ci in r.samples if v is not None],
                    "added": r.look.first if r.look is not None and r.look.k > r.look.first else None,
                    "estimate": r.combined.estimate,
                    "ci": r.combined.ci, "verdict": r.verdict})
    return out


def draw(findings: list[Finding], results: dict[str, Result]) -> Optional[bytes]:
    """The PNG's bytes, or None when no finding has a result yet."""
    picked = rows(findings, results)
    return findings_forest(picked) if picked else None


VERDICT_COLORS = {"reproduced": "tab:green", "not reproduced": "tab:red", "inconclusive": "tab:gray",
                  "provisional": "tab:orange"}


def findings_forest(rows: list[dict[str, Any]]) -> bytes:
    """FINDINGS.md's forest plot, as PNG bytes: one row per finding, grouped by claim, in two panels
    (Brier-scale metrics, slope-scale metrics: their units differ ~10×). Each seed's estimate is a
    dot with its own question CI as a thin bar just above the row, the combined estimate a square
    with its CI as a thick bar: a combined bar no wider than a seed's says the questions' noise,
    shared by the seeds, bounds it; a seed a later look added (``martingale decide``) is a filled
    dot. A null's ±margin is a band; colours by verdict. ``rows``: {label, claim, brier, seeds,
    seed_cis, added (the index of the first added seed, or None), estimate, ci, margin, verdict}."""
    panels = [[r for r in rows if r["brier"]], [r for r in rows if not r["brier"]]]
    height = 1.2 + 0.22 * max(1, *(len(p) + len({r["claim"] for r in p}) for p in panels))
    fig = _figure.Figure(figsize=(13, height))
    fig.subplots_adjust(left=0.19, right=0.99, wspace=0.62, top=1 - 0.5 / height, bottom=0.5 / height)
    axes = fig.subplots(1, 2)
    for ax, panel, unit in zip(axes, panels, ("Brier-scale (Brier, ΔBrier)", "slope-scale (MS, ΔMS …)")):
        labels, y = [], 0
        for claim in sorted({r["claim"] for r in panel}):
            labels.append((y, f"— {claim} —", True))
            y -= 1
            for r in (r for r in panel if r["claim"] == claim):
                color = VERDICT_COLORS.get(r["verdict"], "black")
                if r["margin"] is not None:
                    ax.fill_betweenx([y - 0.4, y + 0.4], -r["margin"], r["margin"], color="tab:blue", alpha=0.12, lw=0)
                ax.plot([r["ci"][0], r["ci"][1]], [y, y], color=color, lw=2.2)
                ax.plot([r["estimate"]], [y], "s", color=color, ms=5)
                k = len(r["seeds"])
                for j, (value, ci) in enumerate(zip(r["seeds"], r.get("seed_cis") or [None] * k)):
                    at = y + (0.16 + 0.24 * j / max(k - 1, 1) if k > 1 else 0.0)
                    if ci is not None and k > 1:
                        ax.plot([ci[0], ci[1]], [at, at], color=color, lw=0.7, alpha=0.6)
                    added = r.get("added") is not None and j >= r["added"]     # a seed a later look added
                    ax.plot([value], [at], "o", color=color, ms=3, alpha=0.55, mfc=color if added else "none")
                labels.append((y, r["label"], False))
                y -= 1
        ax.axvline(0, color="black", lw=0.8)
        ax.set_yticks([t for t, _, _ in labels], [text for _, text, _ in labels], fontsize=6.5)
        for tick, (_, _, head) in zip(ax.get_yticklabels(), labels):
            tick.set_fontweight("bold" if head else "normal")
        ax.set_ylim(min(y, -1) + 0.5, 0.5)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_title(unit, fontsize=9)
        if not panel:
            ax.text(0.5, 0.5, "no finding with a result", ha="center", va="center", transform=ax.transAxes)
    handles = [axes[0].plot([], [], "s", color=c, label=v)[0] for v, c in VERDICT_COLORS.items()]
    fig.legend(handles=handles, loc="upper center", ncol=4, fontsize=7, frameon=False)
    _agg.FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata=_META)
    return buf.getvalue()
