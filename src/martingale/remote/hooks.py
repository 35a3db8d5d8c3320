"""What a job does with the store when it finishes, before it reports done: a stage job pushes its
folder, an aggregate job its run's results. A push that fails loses nothing here: the job still
succeeds and says in one line what is not pushed (``martingale push`` sends it later)."""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Optional

from ..store.files import redact
from .backend import open_store
from .push import Pushed, note_lineage, push_run, push_stage
from .records import run_digest
from .settings import StoreError, resolve

log = logging.getLogger("martingale.store")


def _say(line: str) -> None:
    """A line for the build's output (the job's own stderr, past the log's redirection) and its log."""
    line = redact(line)
    log.warning(line)
    print(line, file=sys.__stderr__, flush=True)


def after_stage(root: Path, sid: str, inputs: dict[str, Path]) -> Optional[Pushed]:
    """Push a stage that just finished (its inputs' folders by role), when a store is set."""
    settings = resolve()
    if settings is None:
        return None
    note_lineage(root, sid, inputs)
    try:
        result = push_stage(open_store(settings.url, settings.jobs), root, sid,
                            {role: folder.name for role, folder in inputs.items()})
    except StoreError as e:
        result = Pushed(sid, "refused", why=str(e))
    except Exception as e:   # a push never fails the stage it pushes: the stage is built
        result = Pushed(sid, "refused", why=f"{type(e).__name__}: {e}")
    if result.state in ("refused", "replaced"):
        _say(result.line())
    else:
        log.info("store: %s %s (%d files, %d bytes sent)", sid, result.state, result.files, result.bytes)
    return result


def after_run(root: Path, run: str, cfg: object, lineage: object, eval_stages: list[str]) -> Optional[Pushed]:
    """Push a run's results (results/<run>/) once aggregated, when a store is set."""
    settings = resolve()
    if settings is None:
        return None
    key = run_digest(run, cfg, lineage, eval_stages)
    try:
        result = push_run(open_store(settings.url, settings.jobs), root, run, key, eval_stages)
    except StoreError as e:
        result = Pushed(f"results/{run}", "refused", why=str(e))
    except Exception as e:
        result = Pushed(f"results/{run}", "refused", why=f"{type(e).__name__}: {e}")
    if result.state == "refused":
        _say(result.line())
    return result
