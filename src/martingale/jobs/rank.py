"""One rank of a ranked training stage (training/launch.py starts them under torchrun): check the
world it was started in, join the group, run the stage kind's body, leave. A rank that fails
writes its one line where the launch reads it (``rank-<r>.error``) and exits 1."""
from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

from ..config.slices import placed, stage_config
from ..core.errors import StageError
from ..core.threads import use_threads
from ..stages import kinds
from ..store.files import write_text
from ..store.provenance import collecting
from ..training import ranks

log = logging.getLogger("martingale")


def _logging(rank: int) -> None:
    """Rank 0 logs the stage's progress; the others their warnings and errors only."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s rank {rank} %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(logging.INFO if rank == 0 else logging.WARNING)


def _one_line(e: BaseException, rank: int, world: int) -> str:
    text = str(e).strip().splitlines()
    cause = text[0] if text else ""
    return cause if isinstance(e, StageError) else f"rank {rank} of {world}: {type(e).__name__}: {cause}"


def main(spec_path: str) -> int:
    """Run this rank of the stage the launch's ``spec.json`` describes; 0, or 1 with its one line."""
    spec = json.loads(Path(spec_path).read_text())
    rank = int(os.environ.get("RANK", "0"))
    _logging(rank)
    try:
        ranks.join(int(spec["ranks"]), str(spec["strategy"]), str(spec["kind"]))
        use_threads(int(spec["threads"]))
        inputs = {role: Path(folder) for role, folder in spec["inputs"].items()}
        with collecting(Path(spec["out_dir"]), Path.cwd()):     # provenance.json, as in a one-rank job
            kind = kinds()[spec["kind"]]
            sliced = placed(kind, stage_config(kind, spec["cfg"]), str(spec["device"]))
            kind.run(sliced, out_dir=Path(spec["out_dir"]), **inputs)
        ranks.leave()
    except BaseException as e:       # noqa: BLE001 - every failure is this rank's one line
        log.exception("rank %d failed", rank)
        line = _one_line(e, rank, int(spec["ranks"]))
        peer = "Connection closed by peer" in line or "Connection reset" in line
        scratch = Path(spec["scratch"])
        if scratch.is_dir():
            write_text(scratch / f"rank-{rank}.error", ("peer: " if peer else "") + line + "\n")
        print(line, file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
