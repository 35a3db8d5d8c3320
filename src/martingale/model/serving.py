"""The vLLM backend's settings (``model.vllm``): declared apart from the backend (model/vllm.py), so
the schema reads them without importing it."""
from __future__ import annotations

from dataclasses import dataclass

from ..core.settings import COUNT, NONNEG, POSITIVE, Args, Int, PathValue, Real, setting
from ..core.typed import section_of


@dataclass
class VLLMConfig:
    """The vLLM server a stage starts for ``backend: vllm`` (the backend's section, ``model.vllm``),
    its client and its guards."""
    python: str = setting(".venv-vllm/bin/python", PathValue(optional=False), "vLLM's own environment (make vllm)")
    tensor_parallel_size: int = setting(1, COUNT)
    gpu_memory_utilization: float = setting(0.85, Real(0, 1, lo_open=True),
        "per server: a self judge on another model starts a second one")
    max_lora_rank: int = setting(16, COUNT)
    cpu_kv_cache_gib: int = setting(1, COUNT, "VLLM_CPU_KVCACHE_SPACE for the CPU build")
    startup_timeout_s: int = setting(900, COUNT)
    request_timeout_s: int = setting(300, COUNT)
    concurrency: int = setting(16, COUNT, "requests in flight")
    retries: int = setting(2, Int(0))
    reload_every: int = setting(1, COUNT, "training: reload the adapter in the server every k steps")
    parity_tol: float = setting(0.01, POSITIVE, "max |log-prob vLLM − HF| on the probe prompts")
    adapter_floor: float = setting(1e-5, NONNEG,
        "an adapter must move some probe log-prob by more (also the instructor's guard on any backend)")
    extra_args: list[str] = setting(None, Args(), "more `vllm serve` flags, verbatim", factory=list)


def tensor_parallel_size(model: object) -> int:
    """The GPUs a model's vLLM server spans: ``model.vllm.tensor_parallel_size``, the schema's
    default where a config has none. The one reader of the key (the plan, the checks, the ranks)."""
    vllm = section_of(model, "vllm")
    value = section_of(vllm, "tensor_parallel_size") if vllm is not None else None
    return int(value) if value is not None else VLLMConfig.tensor_parallel_size
