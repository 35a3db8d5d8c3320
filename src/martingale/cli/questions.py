"""`martingale questions check, import, export-synthetic`: questions files (world=jsonl)."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import List

import typer
from rich.table import Table

from ..config.runs import RunError
from ..core.settings import ProjectPath
from ..store.files import write_jsonl
from ..world.forecastbench import ImportProblem, import_forecastbench
from ..world.jsonl import exported_rows
from ..world.questions import QuestionsError, load_questions, summary, write_questions
from ..world.synthetic import SyntheticWorld
from .common import STATE, _need, _tree, app, err, fail, out

questions_app = typer.Typer(help="Resolved binary forecasting questions in a JSONL file (world=jsonl).",
                            no_args_is_help=True)
app.add_typer(questions_app, name="questions")


def fail_with_problems(problems: list[str], summary: str) -> None:
    """Each problem on its own ``error:`` line, then ``summary`` (``{n}``: "N problem(s)"), exit 1."""
    for line in problems:
        err.print(f"error: {line}", markup=False, style="bold red")
    fail(summary.replace("{n}", f"{len(problems)} problem{'s' * (len(problems) != 1)}"))


@questions_app.command("check")
def questions_check(path: Path = typer.Argument(..., help="A questions file: one JSON object per line.")) -> None:
    """Validate a questions file: its counts, base rate and constant-predictor Brier, or each problem (exit 1).

    Every problem is one line, file:line: field: what is wrong. Nothing is written."""

    try:
        s = summary(load_questions(path))
    except QuestionsError as e:
        fail_with_problems(e.problems, f"{path}: {{n}}; no questions loaded")
        return
    table = Table(title="questions")
    table.add_column("")
    table.add_column("value", justify="right")
    table.add_row("questions", str(s["n"]))
    table.add_row("resolved yes", str(s["n_yes"]))
    table.add_row("base rate", f"{s['base_rate']:.4f}")
    table.add_row("constant-predictor Brier", f"{s['constant_brier']:.4f}")
    table.add_row("dates", f"{s['first_date']} .. {s['last_date']}" if s["first_date"] else "(none given)")
    if s.get("crowd_n"):
        table.add_row(f"crowd Brier ({s['crowd_n']} with crowd_p)", f"{s['crowd_brier']:.4f}")
    out.print(f"{path}: OK", markup=False)
    out.print(table)


@questions_app.command("import")
def questions_import(
    source: str = typer.Argument(..., help="Whose files: forecastbench."),
    files: List[Path] = typer.Argument(..., help="Question sets and resolution sets (known by their content)."),
    out_path: str = typer.Option(..., "--out", "-o", help="The questions file to write, inside the project."),
) -> None:
    """Import resolved binary questions from another format: ForecastBench's question and resolution
    sets (world/forecastbench.py: market questions resolved 0/1, joined by source and id, the crowd's
    probability kept as crowd_p). Every problem is one line; nothing is written on a failure."""
    if source != "forecastbench":
        fail(f"questions import: {source!r}: the one format known is forecastbench")
    problem = ProjectPath().problem(out_path)
    if problem:
        fail(f"questions import: {problem}")
    try:
        found = import_forecastbench(list(files))
    except ImportProblem as e:
        fail_with_problems(e.problems, "questions import: {n}; nothing written")
        return
    if not found.rows:
        fail(f"questions import: no resolved market question in {len(files)} files; nothing written")
    try:
        write_questions(STATE.root / out_path, found.rows)
    except QuestionsError as e:
        fail(f"questions import: {e.problems[0]}")
    s = summary(load_questions(STATE.root / out_path))
    left = ", ".join(f"{n} {why}" for why, n in found.left_out.items() if n) or "none"
    out.print(f"{out_path}: {s['n']} questions ({s['n_yes']} yes, base rate {s['base_rate']:.3f}) from "
              f"{found.question_sets} question sets and {found.resolution_sets} resolution sets; left out: {left}",
              markup=False)


@questions_app.command("export-synthetic")
def questions_export(
    out_path: str = typer.Argument("data/questions/synthetic-world.jsonl",
                                   help="Where to write the file, inside the project."),
    run: str = typer.Option("base", "--run", help="Whose world.* to export (its synthetic questions)."),
) -> None:
    """Write a run's synthetic world (train and held-out questions) as a questions file.

    Each line: English question text, the clue words as background, y, its split, the clues and
    the oracle's final belief; world=jsonl on this file asks exactly the synthetic world's questions."""
    problem = ProjectPath().problem(out_path)
    if problem:
        fail(f"export-synthetic: {problem}")
    tree = _tree(compose=False)
    _need(tree, run)
    try:
        world = SyntheticWorld({**asdict(tree.resolved(run).world), "name": "synthetic"})
        rows = exported_rows(world)
    except (RunError, ValueError) as e:
        fail(str(e).splitlines()[0])
        return
    write_jsonl(STATE.root / out_path, rows)
    n_held = sum(r["split"] == "heldout" for r in rows)
    out.print(f"{out_path}: {len(rows)} questions ({len(rows) - n_held} train, {n_held} held-out) "
              f"from {run}'s synthetic world", markup=False)


if __name__ == "__main__":  # pragma: no cover
    app()
