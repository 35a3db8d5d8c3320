"""Two builds' FINDINGS.md side by side, verdict by verdict: the reseed check.

    python scripts/compare_findings.py A/FINDINGS.md B/FINDINGS.md

Build the campaign twice on disjoint seeds (a second clone with MARTINGALE_SEED_OFFSET=5: seeds
46-48 where the first has 41-43), then compare. Prints each finding whose verdict differs, then the
tally: of the findings decided in A (reproduced / not reproduced), how many B decides the same way,
how many turn into their opposite, how many B leaves undecided. Exit 1 when any turns into its
opposite.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

DECIDED = ("reproduced", "not reproduced")
OPPOSITE = {"reproduced": "not reproduced", "not reproduced": "reproduced"}


def verdicts(path: Path) -> dict[str, str]:
    """finding id → verdict (its parenthetical detail dropped), from FINDINGS.md's summary table."""
    out, in_summary = {}, False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            in_summary = line == "## Summary"
        elif in_summary and line.startswith("| ") and not line.startswith("| finding |"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if len(cells) >= 2 and not set(cells[0]) <= {"-"}:
                out[cells[0]] = re.sub(r"\s*\(.*\)$", "", cells[-1])
    return out


def compare(a: dict[str, str], b: dict[str, str]) -> dict[str, list[str]]:
    """Findings of A by what became of a decided verdict in B: same, opposite, undecided."""
    out: dict[str, list[str]] = {"same": [], "opposite": [], "undecided": []}
    for fid, va in a.items():
        if va not in DECIDED:
            continue
        vb = b.get(fid)
        out["same" if vb == va else "opposite" if vb == OPPOSITE[va] else "undecided"].append(fid)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    a, b = (verdicts(Path(p)) for p in argv)
    for fid in sorted(set(a) | set(b)):
        if a.get(fid) != b.get(fid):
            print(f"{fid}: {a.get(fid, '-')} → {b.get(fid, '-')}")
    c = compare(a, b)
    decided = sum(len(v) for v in c.values())
    share = len(c["same"]) / decided if decided else float("nan")
    print(f"decided in A: {decided}; the same in B: {len(c['same'])} ({share:.0%}); "
          f"opposite: {len(c['opposite'])}; undecided in B: {len(c['undecided'])}")
    for fid in c["opposite"]:
        print(f"opposite: {fid}: {a[fid]} → {b[fid]}")
    return 1 if c["opposite"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
