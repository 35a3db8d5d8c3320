"""What a stage asks a scheduler for: CPUs, memory, minutes, GPUs and nodes as Snakemake resources,
from ``model.resources`` (never in a stage's id, except a training kind's thread count)."""
from __future__ import annotations

from typing import Optional

from ..core.jsonvalue import JsonObject
from ..model.section import ModelLike, Resources, model_section
from ..model.serving import tensor_parallel_size
from ..stages import StageKind
from ..training import ranks_of


def compute_threads(model: ModelLike, kind: StageKind) -> Optional[int]:
    """The torch threads a training kind computes with on a CPU model (``resources.cpus``), part of
    what it computes: its gradient's sums are split by thread. None: any count gives the same bytes
    (a kind that only reads the model, measured for evaluate) or the model is on GPUs."""
    r = model_section(model).resources
    if not kind.trains or int(r.gpus or 0) > 0:
        return None
    return kind_cpus(r, kind.name)


def kind_cpus(resources: Resources, kind: str) -> int:
    """The CPUs a stage of this kind asks for: ``resources.cpus``, or ``pretrain_cpus`` for pretrain."""
    if kind == "pretrain" and resources.pretrain_cpus:
        return int(resources.pretrain_cpus)
    return int(resources.cpus)


RESOURCE_KEYS = ("threads", "mem_mb", "runtime", "gpu", "gpu_model", "device", "nodes")   # what _resources may set


def _resources(model: ModelLike, kind: Optional[StageKind] = None) -> JsonObject:
    """What a stage on this model asks a scheduler for, as Snakemake resources: ``threads``,
    ``mem_mb``, ``runtime`` (minutes) always; ``gpu`` (count) and ``gpu_model`` only when the model
    needs GPUs (``gpus`` > 0), so a CPU stage carries no GPU resource at all. ``gpu``/``gpu_model``
    are the names snakemake-executor-plugin-slurm turns into ``sbatch --gpus=<model>:<n>``.
    ``device`` (model.device) is where the job puts its model: a string resource, so it reaches
    the job (smk.run_stage) without being in the stage's id. A ranked kind on N ranks over M nodes
    asks, on each node, for N/M times the CPUs and memory of one (``gpus`` is a node's, already),
    and ``nodes`` where M > 1. A stage that takes no ranked steps on a vLLM-served model asks for
    its server's GPUs (``vllm.tensor_parallel_size``) where that is fewer than the node's."""
    m = model_section(model)
    r = m.resources
    per_node = 1
    nodes = 1
    if kind is not None and kind.ranked:
        ranks, _, nodes = ranks_of(m)
        per_node = ranks // nodes
    out: JsonObject = {
        "device": str(m.device),
        "threads": kind_cpus(r, kind.name if kind is not None else "") * per_node,
        "mem_mb": int(r.mem_mb) * per_node,
        "runtime": int(r.runtime_min),
    }
    gpus = int(r.gpus or 0)
    if gpus > 0 and kind is not None and not kind.ranked and m.backend == "vllm":
        gpus = min(gpus, tensor_parallel_size(m))
    if gpus > 0:
        out["gpu"] = gpus
        if r.gpu_model:
            out["gpu_model"] = str(r.gpu_model)
    if nodes > 1:
        out["nodes"] = nodes
    return out

