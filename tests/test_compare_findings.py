"""scripts/compare_findings.py: two builds' FINDINGS.md verdict by verdict (the reseed check)."""
from __future__ import annotations

import subprocess
import sys

from projcopy import REPO

SCRIPT = REPO / "scripts" / "compare_findings.py"


def findings_md(path, verdicts: dict[str, str]):
    rows = "\n".join(f"| {fid} | C1 | run | s0 | ms | > 0 | +0.1 | 0.01 | 0.02 | 3 | {v} |" for fid, v in verdicts.items())
    path.write_text("# Findings\n\n## Summary\n\n| finding | claim | run | stage | metric | expect | value [CI] | p | q "
                    f"| seeds to decide | verdict |\n|---|---|---|---|---|---|---|---|---|---|---|\n{rows}\n\n## C1\n\n"
                    "| not | a | summary |\n", encoding="utf-8")
    return path


def run(a, b):
    return subprocess.run([sys.executable, str(SCRIPT), str(a), str(b)], capture_output=True, text=True, timeout=60)


def test_the_same_verdicts_in_both_builds_pass_with_the_share_kept(tmp_path):
    v = {"f1": "reproduced", "f2": "not reproduced (3 seeds)", "f3": "inconclusive (3 seeds)"}
    res = run(findings_md(tmp_path / "a.md", v), findings_md(tmp_path / "b.md", v))
    assert res.returncode == 0, res.stderr
    assert "decided in A: 2; the same in B: 2 (100%); opposite: 0; undecided in B: 0" in res.stdout


def test_a_verdict_turned_into_its_opposite_fails_and_is_named(tmp_path):
    a = findings_md(tmp_path / "a.md", {"f1": "reproduced (3 seeds)", "f2": "reproduced", "f3": "not reproduced"})
    b = findings_md(tmp_path / "b.md", {"f1": "not reproduced (3 seeds)", "f2": "inconclusive (q 0.07 > 0.05)",
                                        "f3": "not reproduced"})
    res = run(a, b)
    assert res.returncode == 1
    assert "opposite: f1: reproduced → not reproduced" in res.stdout
    assert "decided in A: 3; the same in B: 1 (33%); opposite: 1; undecided in B: 1" in res.stdout
