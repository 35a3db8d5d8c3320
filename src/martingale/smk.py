"""Glue for the thin scripts in workflow/scripts: logging into the rule's log file, and Paths.

A stage that fails leaves its traceback in its log (``logs/<kind>/<id>.log``), which is how the
runs table tells a crashed run from a queued one.
"""
from __future__ import annotations

import contextlib
import importlib
import logging
import sys
from pathlib import Path
from typing import Any, Callable


def run_logged(snakemake: Any, body: Callable[[], Any]) -> Any:
    """Run body() with logging, stdout and stderr going to the rule's log; tracebacks logged."""
    log_path = Path(snakemake.log[0])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as log_file:
        handler = logging.StreamHandler(log_file)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        old_handlers, old_level = root.handlers[:], root.level
        root.handlers = [handler]
        root.setLevel(logging.INFO)
        try:
            with contextlib.redirect_stdout(log_file), contextlib.redirect_stderr(log_file):
                try:
                    return body()
                except BaseException:
                    logging.getLogger("martingale").exception("stage failed")
                    raise
        finally:
            handler.flush()
            root.handlers, root.level = old_handlers, old_level
            sys.stdout.flush()


def inputs(snakemake: Any) -> dict[str, Path]:
    """Named inputs (role → upstream stage folder) as Paths."""
    return {k: Path(v) for k, v in snakemake.input.items()}


def stage_run(kind: str) -> Callable[..., Any]:
    """``martingale.stages.<kind>.run``, imported only inside the job (torch stays out of the parse)."""
    return importlib.import_module(f"martingale.stages.{kind}").run


def aggregate_fn() -> Callable[..., Any]:
    """``martingale.records.aggregate.write_run_results``."""
    from martingale.records.aggregate import write_run_results
    return write_run_results
