"""A warm worker for local builds: one process that has imported torch, transformers, peft, scipy,
pandas, matplotlib and wandb forks a child for each job, so a job starts in a fraction of a second
instead of spending ~7-10 s importing them (half of an eval stage's wall time on 2 cores).

Snakemake's ``onstart`` starts it for a local build (``start``; never for a cluster executor, a dry
run or ``--config warm=0``) and ``onsuccess``/``onerror`` stop it; it also exits when the Snakemake
process that started it is gone. ``martingale decide``, whose waves are Snakemake calls of one or
two jobs (too few to start one), keeps one for all of them: its Snakemakes' jobs inherit its name.
Each job script first calls ``ran_in_worker(snakemake, __file__)``: it hands its ``snakemake``
object, its own path, cwd, environment and stdio to the worker over a Unix socket (Linux's abstract
namespace: no file; a peer of another user is refused) and waits; the child runs the same script
with the same ``snakemake``, where ``ran_in_worker`` is False, so the script calls its job function
as in its own process, and the child's exit status becomes the script's. No worker (none started,
one still importing, or one that died): False, and the job runs in the script's own process. A job killed (its script gets SIGTERM, or
dies) kills its child: the child sees the connection close and raises the stage's SIGTERM path,
which removes its partial output. Only third-party libraries are preloaded: the project's own
modules are imported fresh in each child, so a job runs the code on disk when it starts.
"""
from __future__ import annotations

import gc
import importlib
import os
import pickle
import runpy
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from types import FrameType
from typing import Optional

ENV = "MARTINGALE_WARM"           # the worker's socket name, set in Snakemake's env by start()
PRELOAD = ("numpy", "scipy.stats", "pandas", "matplotlib.figure", "matplotlib.backends.backend_agg",
           "torch", "transformers", "peft", "wandb", "safetensors.torch", "requests", "yaml")
PRELOAD_ATTRS = (("transformers", ("AutoModelForCausalLM", "AutoTokenizer", "LlamaConfig", "LlamaForCausalLM")),
                 ("peft", ("LoraConfig", "PeftModel", "get_peft_model")))
_HEADER = struct.Struct("!Q")
_STATUS = struct.Struct("!i")
_WORKER: Optional[subprocess.Popen] = None
_IN_CHILD = False            # this process is a job in a warm child (in_child)
_TERM = threading.Event()    # the worker was asked to stop (SIGTERM)


def in_child() -> bool:
    """Whether this process runs its job in a warm child (a job's log says which)."""
    return _IN_CHILD


# --------------------------------------------------------------------------- the job's side
def ran_in_worker(smk: object, script: str) -> bool:
    """Whether a warm child of the build's worker ran this job script (``script``, with ``smk`` as
    its ``snakemake``): True once it did and succeeded (its failure exits this process with its
    status); False where none serves or this process is that child: the script runs its job here."""
    conn = None if _IN_CHILD else _connect(os.environ.get(ENV))
    if conn is None:
        return False
    payload = pickle.dumps((script, smk, os.getcwd(), dict(os.environ)), protocol=pickle.HIGHEST_PROTOCOL)
    with conn:
        try:
            socket.send_fds(conn, [_HEADER.pack(len(payload))], [0, 1, 2])   # the child writes where we would
            conn.sendall(payload)
            status = _recv_exact(conn, _STATUS.size)
        except OSError:
            status = None
    if status is None:
        sys.exit("martingale: the warm worker's child ended without a status (killed, or the worker refused "
                 "the job): the job failed")
    code = _STATUS.unpack(status)[0]
    if code:
        sys.exit(code)
    return True


def _connect(name: Optional[str]) -> Optional[socket.socket]:
    if not name or not sys.platform.startswith("linux"):
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect("\0" + name)
    except OSError:
        conn.close()
        return None
    return conn


def _recv_exact(conn: socket.socket, n: int) -> Optional[bytes]:
    data = b""
    while len(data) < n:
        part = conn.recv(n - len(data))
        if not part:
            return None
        data += part
    return data


# --------------------------------------------------------------------------- the worker
def serve(name: str, parent: int, preload: tuple[str, ...] = PRELOAD) -> None:
    """Import ``preload``, then listen on ``name`` and fork a child per job until ``parent`` exits.
    A job that starts while it imports runs in its own process (nothing listens yet): a build's
    first jobs, pretrain first, start at once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # a Ctrl-C reaches the jobs; the worker follows Snakemake
    signal.signal(signal.SIGTERM, _exit_on_term)
    gc.disable()
    for module in preload:
        importlib.import_module(module)
    for module, names in PRELOAD_ATTRS:
        for attr in names if module in sys.modules else ():
            getattr(sys.modules[module], attr)   # resolve the lazy imports now, once
    service = _start_wandb_service() if "wandb" in preload else None
    gc.freeze()   # the preloaded objects out of every child's collections (no copy-on-write of their pages)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(64)
    listener.settimeout(0.25)   # how often it checks that Snakemake is there and stop() has not come
    signal.signal(signal.SIGTERM, _stop_on_term)
    while os.getppid() == parent and not _TERM.is_set():
        _reap()
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            continue
        if _peer_uid(conn) != os.getuid():
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            listener.close()
            _child(conn, service)  # never returns
        conn.close()


def _exit_on_term(signum: int, frame: Optional[FrameType]) -> None:
    """stop()'s SIGTERM while the worker imports: exit normally now (exit handlers run: wandb removes
    the temporary folders it made when imported; killed outright, the worker left two a build)."""
    raise SystemExit(0)


def _stop_on_term(signum: int, frame: Optional[FrameType]) -> None:
    """stop()'s SIGTERM once the worker serves: serve's loop ends within its accept timeout and the
    worker exits normally. A flag, not SystemExit: the signal may land in a fork handler, which
    ignores exceptions."""
    _TERM.set()


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _start_wandb_service() -> Optional[str]:
    """Start wandb's service process once for the build and return its token (``WANDB_SERVICE``):
    each job's wandb run connects to it instead of starting a service of its own (~0.5 s a job
    here). None where it does not start (wandb disabled, or any failure): then each job starts its
    own, as without a worker. The service exits with the worker (it watches the worker's pid)."""
    if os.environ.get("WANDB_MODE") == "disabled":
        return None
    try:
        import wandb
        wandb.setup()
        return os.environ.get("WANDB_SERVICE")
    except Exception:   # tracking never stops a build: jobs then start their own service
        return None


def _child(conn: socket.socket, wandb_service: Optional[str] = None) -> None:
    """Become the job: its stdio, cwd and environment (with the worker's wandb service, unless the
    job names its own); run it; send its exit status."""
    code = 1
    try:
        vars(importlib.import_module("martingale.jobs.warm"))["_IN_CHILD"] = True   # the worker runs as __main__
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        gc.enable()
        msg, fds, _, _ = socket.recv_fds(conn, _HEADER.size, 3)
        if len(msg) < _HEADER.size:   # a probe (start's wait), not a job
            code = 0
            return
        payload = _recv_exact(conn, _HEADER.unpack(msg)[0])
        if payload is None:   # the script went away mid-message: no job to run
            return
        for fd, target_fd in zip(fds, (0, 1, 2)):
            os.dup2(fd, target_fd)
            os.close(fd)
        script, smk, cwd, env = pickle.loads(payload)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        if wandb_service and "WANDB_SERVICE" not in env:
            os.environ["WANDB_SERVICE"] = wandb_service
        done = threading.Event()
        threading.Thread(target=_watch, args=(conn, done), daemon=True).start()
        try:
            runpy.run_path(script, init_globals={"snakemake": smk}, run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            import traceback
            traceback.print_exc()
        done.set()
        sys.stdout.flush()
        sys.stderr.flush()
        conn.sendall(_STATUS.pack(code))
    finally:
        os._exit(code)


def _watch(conn: socket.socket, done: threading.Event) -> None:
    """The job's script closed the connection before the job ended (it was killed): stop the job
    the way a killed stage stops (SIGTERM: smk.run_logged raises, the partial output is removed)."""
    try:
        conn.recv(1)
    except OSError:
        pass
    if not done.is_set():
        os.kill(os.getpid(), signal.SIGTERM)


# --------------------------------------------------------------------------- Snakefile hooks
def start(root: str, preload: tuple[str, ...] = PRELOAD, wait: bool = False) -> Optional[str]:
    """Start the build's worker (from onstart) and put its name in the environment jobs inherit;
    ``wait``: until it listens, its imports done (else a job connecting sooner runs in its own
    process). None where none starts: not Linux, or a worker this process inherited still listens
    (decide's, for the Snakemake calls it makes: their jobs use it)."""
    global _WORKER
    if not sys.platform.startswith("linux") or _WORKER is not None:
        return None
    inherited = _connect(os.environ.get(ENV))
    if inherited is not None:
        inherited.close()     # the worker's child sees an empty job and exits
        return None
    name = f"martingale-warm-{os.getpid()}-{time.monotonic_ns()}"
    env = {k: v for k, v in os.environ.items() if k != ENV}
    _WORKER = subprocess.Popen([sys.executable, "-m", "martingale.jobs.warm", name, str(os.getpid()), ",".join(preload)],
                               cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    os.environ[ENV] = name
    deadline = time.monotonic() + 120
    while wait and _WORKER.poll() is None and time.monotonic() < deadline:
        conn = _connect(name)
        if conn is not None:
            conn.close()      # the worker's child sees an empty job and exits
            break
        time.sleep(0.05)
    return name


def stop() -> None:
    """Stop the build's worker (from onsuccess/onerror): jobs still running finish in their children."""
    global _WORKER
    os.environ.pop(ENV, None)
    if _WORKER is not None:
        _WORKER.terminate()
        try:
            _WORKER.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _WORKER.kill()
            _WORKER.wait()
        _WORKER = None


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]), tuple(m for m in sys.argv[3].split(",") if m))
