"""What every command module shares: ``app`` (the command group each registers on), the
consoles, the project root (``--root``), the one-line failure, the run tree and run-id checks."""
from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console

from ..config.runs import RunError, RunTree, run_id_problem

app = typer.Typer(
    name="martingale",
    help="One-knob experiment runs: add, show, diff, check and plan them; regenerate runs.json.",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class _State:
    root: Path = Path(".")


STATE = _State()


def fail(message: str) -> NoReturn:
    """Print an error line and exit 1."""
    err.print(f"error: {message}", markup=False, style="bold red")
    raise typer.Exit(1)


def _conf() -> Path:
    return STATE.root / "conf"


def _tree(compose: bool = True) -> RunTree:
    try:
        return RunTree.load(_conf(), compose=compose)
    except RunError as e:
        fail(str(e))
        raise  # unreachable


def _name(run_id: str) -> None:
    """Refuse, in one line, a run-id that is not a name (a path, '..', too long ...): nothing is
    read or written under a name the run-id rule (config.runs.run_id_problem) refuses."""
    problem = run_id_problem(run_id)
    if problem:
        fail(f"{_conf().name}/runs: run-id: {problem}")


def _need(tree: RunTree, run_id: str) -> None:
    _name(run_id)
    if run_id not in tree:
        fail(f"unknown run {run_id!r} (no conf/runs/{run_id}.yaml)")


@app.callback()
def main(root: Path = typer.Option(Path("."), "--root", help="Project folder (holds conf/, results/).",
                                   file_okay=False)) -> None:
    """martingale: a declarative experiment tree of one-knob runs."""
    STATE.root = root
