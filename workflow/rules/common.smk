# The plan, built once when the workflow is parsed, and the small named functions rules use.
# A bad run file stops the parse here with one line: conf/runs/<file>: <key>: <what is wrong>.
import functools
import inspect
import sys
from pathlib import Path

from martingale.config.runs import RUN_ID_PATTERN, RunError
from martingale.jobs import warm
from martingale.plan import Plan, cost
from martingale.remote import build as remote
from martingale.stages import kinds
from martingale.store import ID_PATTERN, STORE, stage_dir
from martingale.store.manifest import MANIFEST
from snakemake.common import overwrite_function_params

ROOT = Path(workflow.basedir)
RUN_PATTERN = RUN_ID_PATTERN   # the run-id rule's one definition (martingale.config.runs)

try:
    PLAN = Plan.load(ROOT)
except RunError as e:
    sys.exit(f"martingale: {e}")
STAGE_KINDS = kinds()
BENCHMARK = cost.BENCHMARK   # a stage job's benchmark: logs/<kind>/<id>.benchmark.tsv


def per_job(fn):
    """A function called per job, its signature read once. Snakemake otherwise inspects it at
    every call, ~15 times per job: a third of the DAG build with 1,000 runs."""
    overwrite_function_params(fn, inspect.signature(fn).parameters)
    return fn


def sid_pattern(kind):
    """Wildcard constraint of a stage folder: ids of one kind only, so rules never collide."""
    return f"{kind}-{ID_PATTERN}"


@functools.cache
def buildable_runs():
    """The runs `all` builds: every run not marked invalid whose needs this machine meets
    (martingale.plan.needs: weights, vLLM, an API key, a GPU). Each run skipped is named once, with what
    it lacks; a target named on the command line is built whatever its needs."""
    build, skipped = PLAN.buildable_run_ids(cluster=workflow.non_local_exec)
    for run, missing in skipped.items():
        print(f"martingale: all skips {run}: it needs {'; '.join(map(str, missing))}", file=sys.stderr)
    return tuple(build)


@per_job
def all_targets(wildcards):
    """Every buildable run (buildable_runs): its eval.json; then the runs table."""
    return [f"results/{run}/eval.json" for run in buildable_runs()] + ["runs.json"]


def stage_output(sid):
    """A stage's completion marker: results/_store/<kind>/<id>/MANIFEST.json."""
    return f"{stage_dir(sid)}/{MANIFEST}"


@per_job
def stage_inputs(wildcards):
    """Upstream stages by role (base_model, start_model, judge_model, model): their manifests."""
    store_synced()
    return {role: stage_output(uid) for role, uid in PLAN.stages[wildcards.sid].inputs.items()}


@per_job
def stage_cfg(wildcards):
    """The config slice that defines the stage: a param, so editing a knob reruns what it affects."""
    return PLAN.stages[wildcards.sid].cfg


# A stage's scheduling resources, from conf/model/<name>.yaml `resources:` (plan._resources).
# Snakemake drops a resource that is None: a CPU-only stage has no gpu/gpu_model.
def stage_resource(kind, key, lookup):
    """The kind's resource as a constant when all its stages ask for the same (the common case:
    one model), else lookup, a function of the job's stage id. Snakemake calls a function once
    per job and key and inspects its signature each time: 1,000 runs' ~4,000 stage jobs times six
    keys was a third of a dry run."""
    uniform = PLAN.kind_resources(kind)
    return uniform[key] if key in uniform else lookup


@per_job
def stage_threads(wildcards):
    """CPUs of the stage (sbatch --cpus-per-task)."""
    return PLAN.stages[wildcards.sid].resources["threads"]


@per_job
def stage_priority(wildcards):
    """Long chains first, a stage of several threads before them (plan.priorities): with -c2 both
    cores stay busy to the end."""
    return PLAN.priorities()[wildcards.sid]


@per_job
def stage_mem_mb(wildcards):
    """Memory in MB (sbatch --mem)."""
    return PLAN.stages[wildcards.sid].resources["mem_mb"]


@per_job
def stage_runtime(wildcards):
    """Wall-time limit in minutes (sbatch -t)."""
    return PLAN.stages[wildcards.sid].resources["runtime"]


@per_job
def stage_gpu(wildcards):
    """Number of GPUs, or None (no GPU resource) for a CPU model (sbatch --gpus=[model:]n)."""
    return PLAN.stages[wildcards.sid].resources.get("gpu")


@per_job
def stage_device(wildcards):
    """Where the job puts its model (model.device: auto, cuda, cpu): not in the stage id."""
    return PLAN.stages[wildcards.sid].resources["device"]


@per_job
def stage_gpu_model(wildcards):
    """GPU type (e.g. h200), or None; with gpu it makes sbatch --gpus=<gpu_model>:<gpu>."""
    return PLAN.stages[wildcards.sid].resources.get("gpu_model")


@per_job
def stage_nodes(wildcards):
    """Machines of a ranked stage over several (sbatch --nodes), or None: one."""
    return PLAN.stages[wildcards.sid].resources.get("nodes")


@per_job
def run_eval_dirs(wildcards):
    """The evals of one run (every stage, every seed): their manifests."""
    store_synced()
    return [stage_output(e["eval_stage"]) for e in PLAN.evals(wildcards.run)]


def run_parent(wildcards):
    """The run's parent (None for a root run)."""
    return PLAN.tree.specs[wildcards.run].parent


@per_job
def parent_evals(wildcards):
    """The parent's evals (every stage, every seed), for the knob's paired effect; [] for a root."""
    parent = run_parent(wildcards)
    return PLAN.evals(parent) if parent else []


@per_job
def parent_eval_dirs(wildcards):
    """The parent's evals (their manifests): the aggregate compares the run against them."""
    return [stage_output(e["eval_stage"]) for e in parent_evals(wildcards)]


@per_job
def natural_evals(wildcards):
    """The natural model measured as the run measures it, per seed: "beats the natural base"."""
    return PLAN.natural_evals(wildcards.run)


@per_job
def natural_eval_dirs(wildcards):
    """Those evals' manifests."""
    return [stage_output(e["eval_stage"]) for e in natural_evals(wildcards)]


@functools.cache
def free_ancestors(run):
    """The ancestors the run's build aggregates for free (cost.ancestors_to_aggregate): those whose
    evals, their parent's and everything upstream are stages of the run's own build. From the plan
    alone, never from what the store holds or what the command line names: an aggregate's input set
    that changed with either made aggregates stale in the next build (a finished campaign's
    `snakemake all` planned 54 of them again)."""
    return tuple(cost.ancestors_to_aggregate(PLAN, run))


@per_job
def ancestor_results(wildcards):
    """The eval.json of each ancestor the run's build aggregates for free (free_ancestors), so
    building a child leaves no such ancestor `queued`. Not ancient(): Snakemake 9.27 then drops the
    requested run's own jobs from the DAG whenever the ancestor's aggregate must rerun (a rerun
    ancestor reruns the child's aggregate, seconds)."""
    return [f"results/{a}/eval.json" for a in free_ancestors(wildcards.run)]


@per_job
def run_config(wildcards):
    """The run's resolved config (its config.yaml), without the build's budget (plan.run_identity)."""
    return PLAN.run_identity(wildcards.run)


@per_job
def run_lineage(wildcards):
    return PLAN.lineage(wildcards.run)


@per_job
def run_evals(wildcards):
    return PLAN.evals(wildcards.run)


def plot_output(name):
    """A run's figure results/{run}/plots/<name>.png, declared for `snakemake --report` under the
    run's own subcategory; its caption is workflow/report/<name>.rst (the path is resolved from
    the rule file that calls this, workflow/rules/)."""
    return report(
        f"results/{{run}}/plots/{name}.png",
        caption=f"../report/{name}.rst",
        category="Runs",
        subcategory="{run}",
        labels={"run": "{run}", "figure": name.replace("_", " ")},
    )


@per_job
def run_files(wildcards):
    """The run files the table reads."""
    return sorted(str(s.path.relative_to(ROOT)) for s in PLAN.tree.specs.values())


def requested_runs():
    """Runs whose eval.json this invocation builds: every buildable run for `all` (the default
    target), else the runs whose results/<run>/eval.json is named on the command line."""
    targets = set(workflow.dag_settings.targets or ()) if workflow.dag_settings else set()
    if not targets or "all" in targets:
        return set(buildable_runs())
    return {run for run in PLAN.run_ids() if f"results/{run}/eval.json" in targets}


@per_job
def table_inputs(wildcards):
    """Run files, the results that exist and the results this invocation builds: `snakemake all`
    (or `results/a/eval.json runs.json`) regenerates the table after every aggregate it runs, while
    `snakemake runs.json` alone regenerates it from what exists (unbuilt runs say queued). A
    vanished result changes this input set, so the table step reruns and fails with its advice.
    The ancestors a requested run aggregates (ancestor_results) count as built by this invocation.
    conf/findings.yaml, when present, is read for FINDINGS.md."""
    store_synced()
    building = requested_runs()
    building |= {a for run in building for a in free_ancestors(run)}
    evals = [f"results/{run}/eval.json" for run in sorted(PLAN.tree.specs)
             if run in building or (ROOT / f"results/{run}/eval.json").exists()]
    findings = ["conf/findings.yaml"] if (ROOT / "conf/findings.yaml").exists() else []
    return run_files(wildcards) + findings + evals


def check_budget():
    """Before any job runs: estimate the stage jobs Snakemake is about to run (martingale.plan.cost) and
    stop in one line if that exceeds budget.gpu_hours or budget.cpu_hours of conf/config.yaml,
    unless --config allow_over_budget=1. Runs in onstart: after the DAG is built, never in a dry run
    (-n), --touch or --no-hooks; `martingale plan --cost` previews the same estimate."""
    budget = cost.base_budget(PLAN)
    if workflow.touch or not budget.caps():
        return
    sids = [job.wildcards.sid for job in workflow.dag.needrun_jobs() if job.rule.name in STAGE_KINDS]
    message = cost.over_budget(cost.estimate(PLAN, sids, ROOT, new=lambda sid: True), budget)
    if message is None:
        return
    if not cost.overridden(config):
        sys.exit(message)
    print(cost.going_ahead(message), file=sys.stderr)


WARM_MIN_JOBS = 4   # a build of fewer jobs gains nothing: the worker's imports cost what one job's do


def start_warm_worker():
    """A local build of WARM_MIN_JOBS jobs or more runs them in warm children of one worker that
    imports torch and the rest once (martingale.jobs.warm: a job then starts in a fraction of a second
    instead of ~7-10 s); a smaller build, a cluster executor's jobs and `--config warm=0` run each
    job in its own process."""
    if workflow.non_local_exec or str(config.get("warm", 1)).lower() in ("0", "false", "no"):
        return
    if sum(1 for _ in workflow.dag.needrun_jobs()) >= WARM_MIN_JOBS:
        warm.start(str(ROOT))


onstart:
    check_budget()
    PLAN.write_index(Path(STORE) / "index.json")
    start_warm_worker()


onsuccess:
    warm.stop()


onerror:
    warm.stop()


@functools.cache
def store_synced():
    """With a store (conf/config.yaml `store.url`, $MARTINGALE_STORE): before Snakemake decides what
    to run, pull every stage and run result this call needs that the store holds (martingale.remote),
    so it builds only what no machine has finished. Called from the first input function the DAG
    asks (the executor is known then: a dry run pulls nothing); never inside a cluster job."""
    if not workflow.is_main_process:
        return None
    runs = requested_runs()
    runs |= {a for run in runs for a in free_ancestors(run)}
    targets = list(workflow.dag_settings.targets or ()) if workflow.dag_settings else []
    return remote.before_dag(PLAN, ROOT, sorted(runs), targets, dry=workflow.dryrun)
