"""``findings-forest.png``: FINDINGS.md's picture — each finding with a result, its seeds' estimates
with their own question CIs, the combined estimate and CI, a null's margin band, coloured by verdict
(plots.findings_forest)."""
from __future__ import annotations

from typing import Optional

from ..records.plots import findings_forest
from .findings import NO_RESULT, Finding, Result

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
