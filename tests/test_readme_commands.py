"""The README's everyday commands work as written: each `martingale …` line of its "Everyday use"
blocks runs, in order, on a copy of the fixture campaign and exits 0, and its
`snakemake -n` plans. A command that builds, benchmarks or installs is named below with why it is
not run here (the end-to-end, bench and CI runs cover those)."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from martingale.cli import app

from projcopy import REPO, make_project

SECTIONS = ("## Everyday use",)
NOT_RUN_HERE = {   # the first words of a command → why this test leaves it out
    "source": "the shell's venv activation",
    "snakemake -c2": "builds stages (tests/test_end_to_end.py builds the chain)",
    "snakemake --profile": "a cluster build (tests/test_slurm_cluster.py)",
    "snakemake --report": "needs built results (tests/test_end_to_end.py)",
    "make campaign": "the whole campaign's build",
    "python bench/": "benchmarks, run by hand (make bench)",
    "pytest": "this suite",
    "martingale seeds": "needs a finding with results (tests/test_cli.py builds one)",
    "martingale decide": "builds stages (tests/test_decide.py decides at smoke scale)",
    "martingale stage": "runs a stage's job (tests/test_stage_command.py, at smoke scale)",
    "MARTINGALE_SEED_OFFSET=5 make campaign": "a second campaign's build",
    "python scripts/compare_findings.py": "needs two builds' FINDINGS.md (tests/test_compare_findings.py)",
    "MARTINGALE_HELDOUT_DRAW=1 make campaign": "a redraw's build (tests/test_plan.py plans one)",
    "python scripts/question_noise.py": "needs built records (tests/test_question_noise.py)",
}


def readme_commands() -> list[list[str]]:
    """Every command line of the README's SECTIONS' bash blocks, comments dropped, in order."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    out = []
    for title in SECTIONS:
        section = text.split(title, 1)[1].split("\n## ", 1)[0]
        for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
            out += [words for line in block.splitlines() if (words := shlex.split(line, comments=True))]
    return out


def left_out(words: list[str]) -> str | None:
    line = " ".join(words)
    return next((why for start, why in NOT_RUN_HERE.items() if line.startswith(start)), None)


def test_the_readme_has_everyday_commands_and_each_is_run_here_or_says_why_not():
    commands = readme_commands()
    assert sum(1 for c in commands if c[0] == "martingale") >= 8
    unknown = [" ".join(c) for c in commands if c[0] not in ("martingale", "snakemake") and not left_out(c)]
    assert unknown == []


@pytest.mark.slow   # one CLI process per command and a Snakemake dry run (~20 s)
def test_the_readmes_everyday_commands_run_as_written(tmp_path):
    root = make_project(tmp_path / "proj")
    runner = CliRunner()
    ran = []
    for words in readme_commands():
        if left_out(words):
            continue
        if words[0] == "martingale":
            res = runner.invoke(app, ["--root", str(root), *words[1:]])
            assert res.exit_code == 0, f"{' '.join(words)}: {res.output}"
        else:
            assert words[:2] == ["snakemake", "-n"], words
            snakemake = str(Path(sys.executable).with_name("snakemake"))
            res = subprocess.run([snakemake, *words[1:], "--cores", "1", "--quiet"], cwd=root,
                                 capture_output=True, text=True)
            assert res.returncode == 0, f"{' '.join(words)}: {res.stderr[-2000:]}"
        ran.append(words[:2])
    assert ["martingale", "new"] in ran and ["snakemake", "-n"] in ran
    assert (root / "conf" / "runs" / "my-run.yaml").is_file()
