"""The ``vllm`` backend: generation through vLLM's OpenAI-compatible server, log-probs from torch.

A stage that opens a model with ``model.backend=vllm`` starts its own server (vllm_server.py) or,
with ``model.server_url``, talks to a server the user runs (its ``--served-model-name`` must be
``model.name``). Requests go to ``/v1/completions`` as token ids (no tokenizer drift), one per
prompt with its own seed (seed·100003 + i: determinism independent of batching).

LoRA adapters are served by name: ``load_adapter(name, folder)`` posts ``/v1/load_lora_adapter``
(runtime LoRA updating is enabled for the servers started here) and routes later requests to it;
``serve_adapter`` does that for a training stage's policy and checks it is applied. Completion
log-probs for a loss come from the in-process torch model (``token_logprobs``).

Guards (each fails the stage with one line, never passes when it could not run):
- ``verify``: on probe prompts, the server's greedy tokens equal HF's and their log-probs differ
  by at most ``vllm.parity_tol`` (the same weights, another engine).
- ``check_adapter_applied``: the probes' greedy continuations with the adapter differ from the base
  model's (tokens, or log-probs by more than ``vllm.adapter_floor``): vLLM has served the base model
  silently for an adapter.
"""
from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Optional, cast

import torch
from torch import nn

from ..core.jsonvalue import JsonObject
from .backend import chat_by_template, implements
from .generate import Batch, batch_from_ids
from .hf import HFBackend
from .load import model_dir
from .section import ModelLike, model_section
from .vllm_server import Server, _stage_error

if TYPE_CHECKING:
    from peft import PeftModel

SEED_STRIDE = 100_003   # request i of a batch sampled with seed s uses seed s·100003 + i


def _rows(values, batch) -> list[list]:
    """Each row's values on its completion tokens, as plain lists (on the CPU)."""
    mask = batch.completion_mask.bool().cpu()
    return [row[m].tolist() for row, m in zip(values.detach().cpu(), mask)]



@implements("vllm")
class VLLMBackend:
    """Samples and greedy reads through a vLLM server; log-probs and the parity reference from
    the same weights in torch (``local``, an HFBackend, also the one a training stage updates)."""

    def __init__(self, server: Server, local: HFBackend, model_cfg: ModelLike,
                 base_reads: dict | None = None):
        self.server, self.local, self.cfg = server, local, model_section(model_cfg)
        self.tokenizer = local.tokenizer
        self.base_name = self.served = self.cfg.name
        self.base_reads = {} if base_reads is None else base_reads   # _base_greedy's, one per server

    @property
    def model(self) -> nn.Module:
        return self.local.model

    @classmethod
    def load(cls, folder: Path | str, model_cfg: ModelLike) -> "VLLMBackend":
        m = model_section(model_cfg)
        local = HFBackend.load(folder, m)
        path = model_dir(folder) if model_dir(folder).is_dir() else Path(folder)
        if m.server_url:
            server = Server(m.server_url, m)
            server.wait_ready(m.vllm.startup_timeout_s)
        else:
            server = Server.start(path, m)
        return cls(server, local, m)

    def with_model(self, model: nn.Module) -> "VLLMBackend":
        """The same server, log-probs from ``model`` (a peft policy on this backend's weights)."""
        return type(self)(self.server, HFBackend(model, self.tokenizer, self.local.batch_size), self.cfg,
                          self.base_reads)

    def close(self) -> None:
        self.server.stop()

    # -- generation ----------------------------------------------------------------------------
    def _ids(self, texts: list[str]) -> list[list[int]]:
        return [list(x) for x in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def _completion_ids(self, choice: JsonObject) -> list[int]:
        """The completion's token ids, ending in eos when it stopped there (as HF's do)."""
        ids = list(choice.get("token_ids") or [])
        eos = self.tokenizer.eos_token_id
        if choice.get("finish_reason") == "stop" and choice.get("stop_reason") is None and (not ids or ids[-1] != eos):
            ids.append(eos)
        return ids

    def _generate(self, texts: list[str], max_new_tokens: int, temperature: float, seed: int | None,
                  logprobs: bool = False, model: str | None = None,
                  alone: bool = False) -> tuple[list[list[int]], list[dict]]:
        """Token ids of the texts and the server's choice for each. ``alone``: one request at a
        time, each with a cache salt of its own (no prefix-cache hit), so each is computed the same
        way whatever else the server has seen or is doing (the guards' reads)."""
        prompts = self._ids(texts)
        bodies = [{"model": model or self.served, "prompt": p, "max_tokens": int(max_new_tokens),
                   "temperature": float(temperature), "return_token_ids": True,
                   **({"seed": seed * SEED_STRIDE + i} if seed is not None else {}),
                   **({"logprobs": 0} if logprobs else {}),
                   **({"cache_salt": uuid.uuid4().hex} if alone else {})} for i, p in enumerate(prompts)]
        choices = self.server.complete(bodies, concurrency=1 if alone else None)
        return prompts, choices

    def sample(self, prompts: list[str], max_new_tokens: int, temperature: float, seed: int) -> "Batch":
        ids, choices = self._generate(prompts, max_new_tokens, temperature, seed)
        return batch_from_ids(self.tokenizer, ids, [self._completion_ids(c) for c in choices])

    def greedy_next(self, texts: list[str], max_new_tokens: int = 1) -> list[str]:
        _, choices = self._generate(texts, max_new_tokens, 0.0, None)
        return [cast(str, self.tokenizer.decode(self._completion_ids(c), skip_special_tokens=True)) for c in choices]

    def next_token_logprobs(self, texts: list[str], top: int) -> list[dict[int, float]]:
        """The server's top ``top`` next tokens after each text (one greedy token, its top
        log-probs by token id): the forced read through the server, never a second HF copy."""
        bodies = [{"model": self.served, "prompt": p, "max_tokens": 1, "temperature": 0.0,
                   "logprobs": int(top), "return_tokens_as_token_ids": True} for p in self._ids(texts)]
        out = []
        for choice in self.server.complete(bodies):
            tops = (choice.get("logprobs") or {}).get("top_logprobs") or [None]
            if not tops[0]:
                raise _stage_error("vLLM /v1/completions: no top_logprobs came back for a forced read")
            ranked = sorted(((int(k.removeprefix("token_id:")), float(v)) for k, v in tops[0].items()),
                            key=lambda kv: (-kv[1], kv[0]))
            out.append(dict(ranked[:int(top)]))
        return out

    def token_logprobs(self, batch: "Batch", temperature: float = 1.0, completion_only: bool = False) -> "torch.Tensor":
        return self.local.token_logprobs(batch, temperature, completion_only)

    # -- adapters ------------------------------------------------------------------------------
    def chat(self, conversations: list[list[dict[str, str]]], max_new_tokens: int, temperature: float,
             seed: int) -> list[str | None]:
        return chat_by_template(self, conversations, max_new_tokens, temperature, seed)

    def load_adapter(self, name: str, folder: Path) -> None:
        """Load (or reload in place) a LoRA adapter folder in the server under ``name``; route to it."""
        self.server.post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(Path(folder).resolve()),
                                                   "load_inplace": True})
        self.served = name

    def serve_adapter(self, model: PeftModel, folder: Optional[Path], probes: list[str], step: int | None = None) -> None:
        """Serve the LoRA policy ``model`` being trained: save its adapter to ``folder``, (re)load
        it in the server as ``policy``, and check the server applies it; after optimizer step
        ``step``, only every ``vllm.reload_every`` steps (None: now)."""
        if step is not None and (step + 1) % self.cfg.vllm.reload_every != 0:
            return
        if folder is None:
            raise _stage_error("a served LoRA policy is saved to an adapter folder: none was given")
        model.save_pretrained(str(folder))
        self.load_adapter("policy", folder)
        self.check_adapter_applied("policy", probes)

    # -- guards --------------------------------------------------------------------------------
    def _greedy_logprobs(self, texts: list[str], model: str, tokens: int = 8) -> list[tuple[list[int], list[float]]]:
        """Each text's greedy continuation from ``model`` (a base or adapter name): (ids, log-probs).
        Read alone (``_generate``): concurrent probes were batched as they happened to arrive, and
        under load a zero adapter's log-probs moved by more than ``adapter_floor`` from the base's
        (test_smollm2_vllm's no-op adapter passed the guard in 3 of 4 runs beside two busy cores)."""
        _, choices = self._generate(texts, tokens, 0.0, None, logprobs=True, model=model, alone=True)
        return [(self._completion_ids(c), [x for x in c["logprobs"]["token_logprobs"] if x is not None])
                for c in choices]

    def _base_greedy(self, texts: list[str], tokens: int = 8) -> list[tuple[list[int], list[float]]]:
        """``_greedy_logprobs`` of the base model, read once per server and prompt set: the served
        base weights never change, so every later adapter check compares with the same reads."""
        key = (tuple(texts), tokens)
        if key not in self.base_reads:
            self.base_reads[key] = self._greedy_logprobs(texts, self.base_name, tokens)
        return self.base_reads[key]

    def verify(self, probes: list[str], tokens: int = 8) -> JsonObject:
        """Backend parity on ``probes``: greedy tokens equal to HF's and log-probs within
        parity_tol. Where the two pick different tokens, that is a tie only if HF scores the
        server's token within parity_tol of its own (bf16 kernels break near-ties differently);
        the probe is compared up to there. Every other difference fails the stage."""

        if not probes:
            raise _stage_error("backend parity: no probe prompts, the check cannot run")
        tol = self.cfg.vllm.parity_tol
        greedy = self._base_greedy(probes, tokens)
        theirs = [ids for ids, _ in greedy]
        served = batch_from_ids(self.tokenizer, self._ids(probes), theirs)
        ours = self.local.sample(probes, tokens, 0.0, 0)
        with torch.no_grad():
            ref = _rows(self.local.token_logprobs(served), served)    # HF log-prob of the server's tokens
            own = _rows(self.local.token_logprobs(ours), ours)        # HF log-prob of its own greedy tokens
        hf_ids = _rows(ours.input_ids, ours)
        gaps, ties = [], 0
        for i, ((ids, lps), hf, r, o) in enumerate(zip(greedy, hf_ids, ref, own)):
            cut = next((j for j, (a, b) in enumerate(zip(ids, hf)) if a != b), min(len(ids), len(hf)))
            if cut < min(len(ids), len(hf)):
                if abs(o[cut] - r[cut]) > tol:
                    raise _stage_error(
                        f"backend parity: greedy tokens differ from HF on probe {i} (vLLM {ids[:8]}, "
                        f"HF {hf[:8]}) and HF prefers its own by {abs(o[cut] - r[cut]):.4f} > "
                        f"model.vllm.parity_tol {tol}: the server is not serving these weights")
                ties += 1
            elif len(ids) != len(hf):
                raise _stage_error(f"backend parity: probe {i} ends after {len(ids)} tokens on vLLM, "
                                   f"{len(hf)} on HF: the server is not serving these weights")
            gaps += [abs(a - b) for a, b in zip(r[:cut + 1], lps[:cut + 1])]
        if not gaps:
            raise _stage_error("backend parity: no log-prob came back to compare, the check cannot run")
        if ties > len(probes) // 4:
            raise _stage_error(f"backend parity: greedy tokens differ from HF on {ties} of {len(probes)} "
                               "probes (more than a quarter, too many to be near-ties): the server "
                               "is not serving these weights")
        if max(gaps) > tol:
            raise _stage_error(f"backend parity: log-probs differ from HF by {max(gaps):.4f} > "
                               f"model.vllm.parity_tol {tol}")
        return {"parity_max_logprob_gap": round(max(gaps), 6), "parity_probes": len(probes),
                "parity_ties": ties}

    def check_adapter_applied(self, name: str, probes: list[str]) -> float:
        """How far adapter ``name`` moves the probes' greedy continuations from the base model's:
        the largest |Δ log-prob| of the chosen tokens (inf where a token differs); fails "adapter
        not applied" at or under ``vllm.adapter_floor``. The base's reads are the server's first
        (``_base_greedy``): a check reads the probes through the adapter only."""
        floor = self.cfg.vllm.adapter_floor
        with_a, without = self._greedy_logprobs(probes, name), self._base_greedy(probes)
        found = [float("inf") if ids_a != ids_b else max((abs(a - b) for a, b in zip(lp_a, lp_b)), default=None)
                 for (ids_a, lp_a), (ids_b, lp_b) in zip(with_a, without)]
        gaps = [g for g in found if g is not None]
        if not gaps:
            raise _stage_error(f"adapter {name}: no log-prob came back to compare, the check cannot run")
        if max(gaps) <= floor:
            raise _stage_error(f"adapter not applied: {name} changes no probe log-prob by more than "
                               f"model.vllm.adapter_floor {floor} (max {max(gaps):.2e})")
        return max(gaps)
