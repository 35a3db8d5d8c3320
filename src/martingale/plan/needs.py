"""What a run needs from the machine that builds it, read off its stages' config slices: a model's
weights folder, the vLLM environment, an API key's variable, a GPU.

A run's needs are part of the plan (the same conf/, the same needs: the table's bytes never depend
on the machine). Whether they are met is asked of the machine at parse time: ``snakemake all``
builds the runs whose needs this machine meets and names the others on one line each, so the
campaign on a CPU laptop skips the DeepSeek and Llama-8B runs instead of failing in them, while
`martingale check` validates every run either way. A target named on the command line is built
whatever its needs (its stage then fails with its own one-line error).
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Optional
from urllib.parse import urlparse

from ..beliefs.api_judge import JudgeConfig
from ..core.jsonvalue import Json
from ..core.typed import section_of, typed
from ..episodes.roles import role_model
from ..episodes.section import simulate_section
from ..model.api_client import ApiModelConfig
from ..model.section import ModelLike, model_section

if TYPE_CHECKING:
    from ..stages import StageKind

LOOPBACK = ("localhost", "127.0.0.1", "::1")   # an endpoint on this machine: the user's own server, keyless allowed
ROLES = ("human", "instructor")                 # a two-agent episode's roles (simulate.<role>_model)


@dataclass(frozen=True, order=True)
class Need:
    """One thing a run's stages need: ``kind`` ∈ weights | vllm | api_key | gpu, ``what`` its path,
    variable or count."""
    kind: str
    what: str = ""

    @property
    def tag(self) -> str:
        """``kind:what`` (``gpu`` alone): how the plan index and runs.json write it."""
        return f"{self.kind}:{self.what}" if self.what else self.kind

    @classmethod
    def from_tag(cls, tag: str) -> "Need":
        kind, _, what = tag.partition(":")
        return cls(kind, what)

    def __str__(self) -> str:
        return {"weights": f"weights {self.what} (a local HF folder: config.json)",
                "vllm": f"vLLM at {self.what} (make vllm)",
                "api_key": f"an API key in ${self.what}",
                "gpu": "a GPU (model.resources.gpus > 0: nvidia-smi here, or a cluster executor)"}[self.kind]

    def met(self, root: Path, env: Mapping[str, str], cluster: bool) -> bool:
        """Does this machine (project root, environment, executor) meet it?"""
        if self.kind == "weights":
            return (_under(root, self.what) / "config.json").is_file()
        if self.kind == "vllm":
            return _under(root, self.what).is_file()
        if self.kind == "api_key":
            return bool(env.get(self.what))
        return cluster or shutil.which("nvidia-smi") is not None


def _under(root: Path, path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() else root / p


def _endpoint_needs(api: ApiModelConfig | JudgeConfig) -> list[Need]:
    """An endpoint off this machine needs its key's variable set (``api_key_env``, always in a
    composed config); a loopback one (a vLLM server the user started) may run keyless."""
    host = urlparse(str(api.base_url or "")).hostname or ""
    if host in LOOPBACK:
        return []
    return [Need("api_key", str(api.api_key_env))]


def _model_needs(model: ModelLike, serves: bool) -> list[Need]:
    """A model config's serving needs: vLLM's environment, or the api endpoint's key."""
    model = model_section(model)
    if serves and model.backend == "vllm":
        return [Need("vllm", str(model.vllm.python or ".venv-vllm/bin/python"))]
    if model.backend == "api":
        return _endpoint_needs(model.api)
    return []


def stage_needs(kind: StageKind, cfg: Mapping[str, Json], resources: Mapping[str, Json]) -> set[Need]:
    """What one stage needs, from its kind, its config slice and its Snakemake resources."""
    out: set[Need] = set()
    model = model_section(section_of(cfg, "model"))
    if kind.place == "source" and model.path:
        out.add(Need("weights", str(model.path)))
    out.update(_model_needs(model, kind.serves))
    simulate = simulate_section(section_of(cfg, "simulate"))
    for role in ROLES:
        if getattr(simulate, f"{role}_model"):   # the role's own model: as the stage opens it
            out.update(_model_needs(role_model(cfg, role), serves=True))
    judge = section_of(cfg, "judge")   # the api reader's section: in a slice only where it reads the beliefs (plan.reader_section)
    if judge is not None:
        out.update(_endpoint_needs(typed(JudgeConfig, judge, "judge")))
    if int(resources.get("gpu") or 0) > 0:
        out.add(Need("gpu"))
    return out


def unmet(needs: Iterable[Need], root: Path | str, env: Optional[Mapping[str, str]] = None,
          cluster: bool = False) -> list[Need]:
    """The needs this machine does not meet, sorted."""
    env = os.environ if env is None else env
    return sorted(n for n in set(needs) if not n.met(Path(root), env, cluster))
