"""A training stage on N ranks: the launch (torchrun), what each rank checks, and the few collective
steps the training loop takes where it runs on more than one (``model.distributed``).

Every rank rolls out the whole batch (the same seed gives each the same samples, so advantages,
group means and the batch sd need no gather) and takes its contiguous block of the batch's rows
for the loss; ``ddp`` (DistributedDataParallel) averages the adapter's gradients, ``fsdp`` (FSDP2,
``fully_shard`` per decoder layer, then the model) also shards the weights. Each rank scales its
loss by the world size, so the averaged gradient is the whole batch's, as on one rank. Rank 0 alone
writes the stage's files and checkpoints; the guards run once, on the gathered weights. gloo on a
CPU, NCCL on GPUs. A launch that degrades to N independent copies (``accelerate launch --cpu``, a
plain ``python``) fails in one line: every rank checks the world size it was started in.
"""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import tempfile
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np
import torch
import torch.distributed as dist

from ..core.errors import StageError
from ..model.section import model_section
from ..model.serving import tensor_parallel_size
from ..store import files
from . import ranks_of

COLLECTIVE_TIMEOUT_S = 600    # a collective that waits longer (a peer hung, not dead) fails the rank
SPEC_VAR = "MARTINGALE_RANKS_SPEC"


@dataclass(frozen=True)
class Ranks:
    """This process's place among the ranks of its stage (one rank: world 1, rank 0)."""
    world: int = 1
    rank: int = 0
    strategy: str = "ddp"

    @property
    def many(self) -> bool:
        return self.world > 1

    @property
    def writer(self) -> bool:
        """Rank 0: the one that writes the stage's files, checkpoints and log lines."""
        return self.rank == 0


_CURRENT = Ranks()


def current() -> Ranks:
    """The ranks of the stage this process runs (Ranks() outside a ranked launch)."""
    return _CURRENT


# --------------------------------------------------------------------------- the launch
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


def launch(kind: str, cfg: dict[str, Any], inputs: dict[str, Path], out_dir: Path, threads: int) -> None:
    """Run stage kind ``kind`` on the ranks its model config asks for, this job waiting on them:
    their log lines go to this job's log; a rank that fails fails the stage in one line naming it
    (torchrun stops the others: none is left waiting on a collective)."""
    model = model_section(cfg.get("model"))
    ranks, strategy, nodes = ranks_of(model)
    bad = next(non_finite(cfg), None)
    if bad is not None:   # spec.json would carry it as null: the ranks would fail on a TypeError
        raise StageError(f"{kind} stage config: {bad[0]} is {bad[1]}, not a finite number")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out_dir.name}.ranks-", dir=out_dir.parent) as scratch:
        spec = Path(scratch) / "spec.json"
        files.write_json(spec, {"kind": kind, "cfg": cfg, "inputs": {k: str(v) for k, v in inputs.items()},
                                    "out_dir": str(out_dir), "ranks": ranks, "strategy": strategy,
                                    "threads": threads, "scratch": scratch})
        env = {**os.environ, SPEC_VAR: str(spec), "OMP_NUM_THREADS": str(threads),
               **server_devices(model, ranks // nodes)}
        cmd = [*launcher(ranks, nodes, env), "-m", "martingale.jobs.rank", str(spec)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        tail: list[str] = []
        for line in proc.stdout:       # the ranks' output, into this job's log
            sys.stdout.write(line)
            tail = (tail + [line])[-200:]
        code = proc.wait()
        if code != 0:
            raise StageError(failure(kind, ranks, Path(scratch), "".join(tail), code))


def non_finite(obj: Any, path: str = "") -> Iterator[tuple[str, float]]:
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


def server_devices(model: Any, per_node: int) -> dict[str, str]:
    """Where rank 0's vLLM server runs on a GPU model: the node's GPUs after its ranks' (one each),
    as many as its tensor parallel size ({MARTINGALE_SERVER_DEVICES: ...}; none on a CPU model)."""
    model = model_section(model)
    gpus = int(model.resources.gpus or 0)
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


# --------------------------------------------------------------------------- inside a rank
def join(expected: int, strategy: str, kind: str) -> Ranks:
    """Join the process group this rank was launched in, after checking it is the ``expected``
    ranks: a launcher that started independent copies (each its own world of 1) fails here."""
    global _CURRENT
    import datetime

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != expected or "RANK" not in os.environ:
        raise StageError(f"{kind} stage: started as a world of {world} where model.distributed.ranks is "
                         f"{expected}: launch it with torchrun (a launcher that starts independent "
                         f"copies, such as `accelerate launch --cpu`, trains {expected} separate models)")
    gpu = torch.cuda.is_available() and os.environ.get("MARTINGALE_DEVICE", "auto") != "cpu"
    if gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if gpu else "gloo", timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    if dist.get_world_size() != expected:
        raise StageError(f"{kind} stage: the process group holds {dist.get_world_size()} ranks where "
                         f"model.distributed.ranks is {expected}")
    _CURRENT = Ranks(dist.get_world_size(), dist.get_rank(), strategy)
    return _CURRENT


def leave() -> None:
    """Wait for every rank, then leave the process group."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def distribute(model: Any) -> tuple[Any, Any]:
    """Wrap a LoRA policy's model for its ranks: (the model sampling and reference forwards use,
    the module the loss's forward goes through). One rank: the model twice. ``ddp``: the model and
    its DistributedDataParallel wrapper. ``fsdp``: the model sharded in place (fully_shard on each
    decoder layer, then on the causal LM), twice."""
    r = current()
    if not r.many:
        return model, model
    if r.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        device = next(model.parameters()).device
        return model, DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.fsdp import fully_shard

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    layers = set(getattr(base, "_no_split_modules", None) or ())
    for module in base.modules():
        if type(module).__name__ in layers:
            fully_shard(module)
    fully_shard(base)      # the causal LM, not peft's wrapper: generate calls its forward directly
    return model, model


def my_rows(n: int, per_chunk: int) -> list[list[int]]:
    """This rank's rows of an n-row batch (a contiguous block), in chunks of at most ``per_chunk``
    (0: one chunk); every rank gets the same number of chunks, since under FSDP each forward is a
    collective. A chunk a rank has no row for is empty (the caller runs it at weight 0)."""
    r = current()
    block = np.array_split(np.arange(n), r.world)
    longest = max(len(b) for b in block)
    chunks = max(1, -(-longest // per_chunk)) if per_chunk else 1
    return [part.tolist() for part in np.array_split(block[r.rank], chunks)]


def no_sync(loss_model: Any, last: bool) -> Any:
    """DDP reduces gradients in a backward; a step's chunks but its last accumulate locally."""
    return loss_model.no_sync() if hasattr(loss_model, "no_sync") and not last else nullcontext()


def reduce(value: torch.Tensor | float, op: str = "sum") -> torch.Tensor:
    """``value`` summed (or maxed) over the ranks; itself on one rank."""
    t = torch.as_tensor(value, dtype=torch.float64).detach().cpu().clone()
    if current().many:
        dev = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else t.device
        t = t.to(dev)
        dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
        t = t.cpu()
    return t


def barrier() -> None:
    """Wait for every rank (nothing on one)."""
    if current().many:
        dist.barrier()


def full_tensors(named: Iterator[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Named tensors whole on every rank (an FSDP shard gathered: a collective), on the CPU."""
    return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().cpu().clone().contiguous()
            for n, p in named}
