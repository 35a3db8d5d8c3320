"""The launch of a training stage's ranks (``model.distributed``): the torchrun command, the spec
each rank reads, the stage's job waiting on them, and the one line a failed launch gives. No torch
here: the job imports this, only its ranks (training/ranks.py) import torch."""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np

from ..core.errors import StageError
from ..core.jsonvalue import JsonObject
from ..model.section import ModelLike, ModelSection, model_section
from ..model.serving import tensor_parallel_size
from ..store import files
from . import ranks_of

SPEC_VAR = "MARTINGALE_RANKS_SPEC"


def launcher(ranks: int, nodes: int, env: dict[str, str]) -> list[str]:
    """The torchrun command a stage's ranks start with: on one node ``--standalone`` (a free port on
    this host); across nodes one torchrun per node under ``srun``, meeting at a c10d rendezvous on
    the job's first node (SLURM's own variables name it)."""
    if ranks % nodes:
        raise StageError(f"model.distributed: ranks {ranks} do not split evenly over nodes {nodes}")
    run = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks // nodes}"]
    if nodes == 1:
        return [*run, "--standalone", "--nnodes=1"]
    if "SLURM_JOB_ID" not in env:
        raise StageError(f"model.distributed.nodes {nodes}: a multi-node stage runs inside a SLURM "
                         "allocation (profiles/slurm); none here")
    head = env.get("MARTINGALE_RDZV_HOST") or _first_node(env)
    return ["srun", f"--nodes={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1", *run,
            f"--nnodes={nodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={head}:29500",
            f"--rdzv-id={env['SLURM_JOB_ID']}"]


def _first_node(env: dict[str, str]) -> str:
    out = subprocess.run(["scontrol", "show", "hostnames", env.get("SLURM_JOB_NODELIST", "")],
                         capture_output=True, text=True, check=True).stdout.split()
    return out[0]


def launch(kind: str, cfg: JsonObject, inputs: dict[str, Path], out_dir: Path, threads: int,
           model: ModelSection, device: str = "auto") -> None:
    """Run stage kind ``kind`` (its slice ``cfg``, whose model section ``model`` is, typed) on the
    ranks that model asks for, placed on ``device``, this job waiting on them: their log lines go
    to this job's log; a rank that fails fails the stage in one line naming it (torchrun stops the
    others: none is left waiting on a collective)."""
    ranks, strategy, nodes = ranks_of(model)
    bad = next(non_finite(cfg), None)
    if bad is not None:   # spec.json would carry it as null: the ranks would fail on a TypeError
        raise StageError(f"{kind} stage config: {bad[0]} is {bad[1]}, not a finite number")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out_dir.name}.ranks-", dir=out_dir.parent) as scratch:
        spec = Path(scratch) / "spec.json"
        files.write_json(spec, {"kind": kind, "cfg": cfg, "inputs": {k: str(v) for k, v in inputs.items()},
                                    "out_dir": str(out_dir), "device": device, "ranks": ranks, "strategy": strategy,
                                    "threads": threads, "scratch": scratch})
        env = {**os.environ, SPEC_VAR: str(spec), "OMP_NUM_THREADS": str(threads),
               **server_devices(model, ranks // nodes)}
        cmd = [*launcher(ranks, nodes, env), "-m", "martingale.jobs.rank", str(spec)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        tail: list[str] = []
        assert proc.stdout is not None   # stdout=PIPE
        for line in proc.stdout:       # the ranks' output, into this job's log
            sys.stdout.write(line)
            tail = (tail + [line])[-200:]
        code = proc.wait()
        if code != 0:
            raise StageError(failure(kind, ranks, Path(scratch), "".join(tail), code))


def non_finite(obj: object, path: str = "") -> Iterator[tuple[str, float]]:
    """(dotted key, value) of each NaN or infinite float in a config slice: what files.write_json
    would write as null, in what it walks."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):   # a typed section: its fields
        obj = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            yield from non_finite(value, f"{path}.{key}" if path else str(key))
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from non_finite(value, f"{path}[{i}]")
    elif isinstance(obj, float) and not np.isfinite(obj):
        yield path, obj


def server_devices(model: ModelLike, per_node: int) -> dict[str, str]:
    """Where rank 0's vLLM server runs on a GPU model: the node's GPUs after its ranks' (one each),
    as many as its tensor parallel size ({MARTINGALE_SERVER_DEVICES: ...}; none on a CPU model)."""
    model = model_section(model)
    gpus = model.resources.gpus
    if not gpus or model.backend != "vllm" or model.server_url:
        return {}
    tp = tensor_parallel_size(model)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = visible.split(",") if visible else [str(i) for i in range(gpus)]
    return {"MARTINGALE_SERVER_DEVICES": ",".join(ids[per_node:per_node + tp])}


ROOT_CAUSE = re.compile(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)


def failure(kind: str, ranks: int, scratch: Path, output: str, code: int) -> str:
    """The one line a failed launch gives: a rank's own error (its message, from its error file; a
    rank that only saw a peer vanish is not the cause), else the rank torchrun names as the root
    cause and how it ended."""
    errors = sorted(scratch.glob("rank-*.error"), key=lambda p: int(p.stem.split("-")[1]))
    own = [p.read_text().strip() for p in errors if not p.read_text().startswith("peer: ")]
    if own:
        return own[0]
    m = ROOT_CAUSE.search(output)
    if m:
        rank, exit_code = int(m.group(1)), int(m.group(2))
        how = f"signal {_signal_name(-exit_code)}" if exit_code < 0 else f"exit code {exit_code}"
        return (f"{kind} stage: rank {rank} of {ranks} ended by {how}; torchrun stopped the other ranks "
                "(a rerun resumes from the last checkpoint)")
    return f"{kind} stage: its {ranks} ranks failed (torchrun exit code {code})"


def _signal_name(n: int) -> str:
    import signal
    try:
        return signal.Signals(n).name
    except ValueError:
        return str(n)
