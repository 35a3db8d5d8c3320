"""``martingale decide``: spend a CPU budget where a finding's verdict is open, in rounds.

Each round reads FINDINGS.md's verdicts, takes every open finding (inconclusive; with
``include_provisional`` also provisional) that its plan (conf/decide.yaml) lets look again and that
is not stopped for futility, and gives it its next look by the cheaper route for its CI: more seeds
(the next of the plan's seed counts) or, in the synthetic world, one more held-out draw (a redraw
rebuilds the evaluations only). A look is ordinary run files (table/looks.py: a child whose one knob
is ``seeds=[…]`` or ``world.heldout_draw=…``), checked as ``martingale check`` checks them, and built
by Snakemake with the chosen profile, stage by stage in waves of ``jobs``: a wave is launched only
while the CPU-hours spent (its stages' benchmarks × threads, recorded in ``logs/decide/ledger.jsonl``
across invocations) leave room for its estimate, and a lone stage only while some budget is left,
so the budget is exceeded by one stage at most. A wave of one or two jobs is too small for a
Snakemake call to start a warm worker (jobs/warm.py): with a profile that runs jobs on this machine,
decide starts one at its first build and keeps it for every wave. State lives in the run files and
the store: a killed decide resumes where it stopped (a stopped decide stops its Snakemake as Ctrl-C
does, and a stale lock is removed), and a second one with nothing new builds nothing.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import yaml

from .config.runs import RunTree
from .jobs import warm
from .plan import Plan, cost
from .stats import crossed
from .stats.replicates import Combined
from .store import locks, stage_dir
from .store.files import open_log, read_jsonl, write_jsonl, write_text
from .store.manifest import MANIFEST
from .table import build_table, findings, write_table
from .table.looks import DecidePlan, Look, LookRun, base_seeds, load_plan, look_index, look_name, look_runs
from .table.to_decide import finding_runs
from .world import worlds

LEDGER = "logs/decide/ledger.jsonl"
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
STOP_WAIT_S = 120     # how long a stopped decide waits for its Snakemake to end its jobs before killing it


@dataclass(frozen=True)
class Step:
    """A finding's next look: the run files it needs, the look runs to build, its estimate."""
    finding: findings.Finding
    route: str                  # "seeds" | "questions" | "resume" (a look written, not yet built)
    k: int
    draws: int
    files: tuple[LookRun, ...]
    targets: tuple[str, ...]    # the look's runs (one per draw)
    cpu_hours: float            # estimated CPU-hours of its new stages
    to_decide: float            # estimated CPU-hours to decide the finding by this route (ranking)


def spent(root: Path, plan: Plan) -> float:
    """CPU-hours of the stages decide built (the ledger's), from their benchmarks × threads."""
    total = 0.0
    for row in read_jsonl(root / LEDGER) if (root / LEDGER).exists() else []:
        sid = row["sid"]
        stage = plan.stages.get(sid)
        seconds = cost.read_benchmark(root / cost.BENCHMARK.format(kind=sid.split("-")[0], sid=sid))
        if stage is not None and seconds is not None:
            total += seconds / 3600 * int(stage.resources.get("threads", 1))
    return total


def _ledger_add(root: Path, sids: list[str]) -> None:
    path = root / LEDGER
    rows = read_jsonl(path) if path.exists() else []
    known = {r["sid"] for r in rows}
    write_jsonl(path, rows + [{"sid": s} for s in sids if s not in known])


def open_findings(found: Optional[list[findings.Finding]], results: dict[str, findings.Result], plan: DecidePlan,
                  include_provisional: bool) -> list[findings.Finding]:
    """The findings decide may look at again: undecided, not stopped, with a look left."""
    wanted = {findings.INCONCLUSIVE} | ({findings.PROVISIONAL} if include_provisional else set())
    out = []
    for f in found or ():
        r = results[f.id]
        if r.verdict in wanted and r.combined is not None and not r.stopped and f.metric not in findings.COUNTS \
                and (r.look is None or r.look.index < plan.looks):
            out.append(f)
    return out


def _target(f: findings.Finding, r: findings.Result) -> float:
    """The half-width that decides an open finding (open_findings: it has a combined estimate)."""
    if r.combined is None:
        raise ValueError(f"{f.id}: no combined estimate to decide")
    return findings.decided_within(f, r.combined)


def next_step(root: Path, tree: RunTree, cplan: Plan, plan: DecidePlan, f: findings.Finding,
              r: findings.Result, paired: set[str], redraws: bool) -> Optional[Step]:
    """The finding's next look by the cheaper route to decide it (seeds or one more held-out draw),
    or the look already written for it and not yet built (a killed decide's)."""
    k0 = len(base_seeds(tree, f.run))
    look = r.look if r.look is not None else Look(k0, 1, (f.run,), 1, plan.looks, k0)
    pending = pending_look(tree, f.run, look, plan, k0)
    runs = finding_runs(cplan, f)
    seed_cost = cost.seed_estimate(cplan, runs, root).cpu_hours
    draw_cost = cost.redraw_estimate(cplan, runs, root).cpu_hours if redraws else None
    if pending is not None:
        k, draws = pending
        return Step(f, "resume", k, draws, (), tuple(look_name(f.run, k, d, k0) for d in range(draws)), 0.0, 0.0)
    if r.combined is None:
        return None
    chosen = cheaper_look(r.combined, _target(f, r), look, plan, seed_cost, draw_cost, k0)
    if chosen is None:
        return None
    route, k, draws, estimate, to_decide = chosen
    files: dict[str, LookRun] = {}
    for d in range(draws):
        for run_file in look_runs(tree, f.run, k, d, paired):
            files.setdefault(run_file.run_id, run_file)
    return Step(f, route, k, draws, tuple(files.values()),
                tuple(look_name(f.run, k, d, k0) for d in range(draws)), estimate, to_decide)


def cheaper_look(c: Combined, target: float, look: Look, plan: DecidePlan, seed_cost: float,
                 draw_cost: Optional[float], k0: int) -> Optional[tuple[str, int, int, float, float]]:
    """(route, k, draws, its CPU-hours, CPU-hours to decide by that route) of the look after ``look``
    that decides the finding (estimate ``c``, decided under half-width ``target``) for fewer
    CPU-hours: the next of the plan's seeds (``seed_cost`` a seed and draw), or one more held-out
    draw (``draw_cost`` at the campaign's k0 seeds; None: no redraw); None: neither is left."""
    options = []
    k_next = plan.next_seeds(look.k)
    if k_next is not None:
        need = crossed.seeds_to_decide(c, target) if c.crossed else None
        per_seed = seed_cost * look.draws
        options.append(("seeds", k_next, look.draws, (k_next - look.k) * per_seed,
                        (max(need, k_next) - look.k) * per_seed if need else float("inf")))
    if draw_cost is not None and look.draws < plan.draws:
        n = c.n_questions
        need = crossed.questions_to_decide(c, target) if c.crossed and n else None
        per_draw = draw_cost * look.k / max(k0, 1)
        options.append(("questions", look.k, look.draws + 1, per_draw,
                        max(1.0, need / n - look.draws) * per_draw if need and n else float("inf")))
    return min(options, key=lambda o: (o[4], o[3])) if options else None


def pending_look(tree: RunTree, run: str, look: Look, plan: DecidePlan, k0: int) -> Optional[tuple[int, int]]:
    """A later look whose run files exist (written by a decide that stopped before building them):
    one that holds the current look's seeds and draws and more, numbered after it. A look another
    finding on the run took by the other route (5 seeds on 1 draw beside 3 on 2) is a branch, not
    this finding's next look: resuming it would read the same look again."""
    for k in [s for s in [k0, *plan.seeds] if s >= look.k]:
        for draws in range(look.draws, plan.draws + 1):
            index = look_index(tree, run, plan, k, draws)
            if (k, draws) == (look.k, look.draws) or not look.index < index <= plan.looks:
                continue
            if all(look_name(run, k, d, k0) in tree.specs for d in range(draws)):
                return k, draws
    return None


class Builder:
    """Snakemake, stage by stage in waves, within the budget (module docstring)."""

    def __init__(self, root: Path, profile: str, jobs: int, budget: float, say: Callable[[str], None]):
        self.root, self.profile, self.jobs, self.budget, self.say = root, profile, jobs, budget, say
        self.log = root / "logs" / "decide" / "snakemake.log"
        self.warm = runs_here(root, profile)     # a warm worker for the waves' jobs, started at the first
        self.worker: Optional[str] = None        # build (its imports done): a decide building nothing starts none

    def close(self) -> None:
        """Stop the warm worker, if this decide started one."""
        if self.worker is not None:
            warm.stop()
            self.worker = None

    def snakemake(self, targets: list[str]) -> bool:
        """Snakemake on the targets with the profile; its output appended to logs/decide/snakemake.log.
        A decide stopped meanwhile (Ctrl-C, SIGTERM) stops it as Ctrl-C does, so it ends its jobs and
        removes its lock (SIGTERM leaves Snakemake 9 hanging with it), then stops itself."""
        self.unlock_if_stale()
        if self.warm and self.worker is None:
            self.worker = warm.start(str(self.root), wait=True)
        cmd = [SNAKEMAKE, "--profile", f"profiles/{self.profile}", *targets]
        proc = subprocess.Popen(cmd, cwd=self.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        try:
            output, _ = proc.communicate()
        except BaseException:
            proc.send_signal(signal.SIGINT)
            try:
                output, _ = proc.communicate(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                output, _ = proc.communicate()
            self.write_log(output)
            raise
        self.write_log(output)
        return proc.returncode == 0

    def write_log(self, output: str | None) -> None:
        with open_log(self.log) as out:
            out.write(output or "")

    def unlock_if_stale(self) -> None:
        """A lock a killed Snakemake left, with none running here, is removed (`snakemake --unlock`);
        one a live Snakemake holds stops decide with one line: it resumes once that one has ended."""
        state = locks.lock_state(self.root)
        if state == "live":
            pids = ", ".join(map(str, locks.live_snakemakes(self.root)))
            raise findings.TableError(f".snakemake/locks: another Snakemake is building in this project (pid {pids}): "
                                      "run decide again once it has ended")
        if state == "stale":
            self.say("  a killed Snakemake left its lock and none is running here: snakemake --unlock")
            subprocess.run([SNAKEMAKE, "--unlock", "--cores", "1"], cwd=self.root, capture_output=True)

    def build(self, runs: list[str]) -> bool:
        """Build the runs' new stages in waves while the budget allows, then their aggregates.
        False when the budget stopped it first (the rest waits for a later decide)."""
        plan = Plan.load(self.root)
        todo = [sid for sid in cost.build_stages(plan, runs) if not cost.is_built(self.root, sid)]
        while todo:
            left = self.budget - spent(self.root, plan)
            if left <= 0:
                return False
            ready = [s for s in todo if all(cost.is_built(self.root, u) for u in plan.stages[s].inputs.values())]
            wave = ready[: self.jobs]
            est = cost.estimate(plan, wave, self.root, new=lambda sid: True)
            if len(wave) > 1 and 2 * est.cpu_hours > left:
                wave = wave[:1]       # near the budget: one stage at a time
            _ledger_add(self.root, wave)
            self.snakemake([f"{stage_dir(s)}/{MANIFEST}" for s in wave])
            failed = [s for s in wave if not cost.is_built(self.root, s)]
            if failed:
                self.say(f"  failed: {', '.join(failed)} (logs/<kind>/<id>.log); its look waits")
                return False
            todo = [s for s in todo if s not in wave]
        return self.snakemake([f"results/{r}/eval.json" for r in runs])


def decide(root: Path | str, budget: float, include_provisional: bool = False, profile: str = "local",
           jobs: int = 2, say: Callable[[str], None] = print) -> dict[str, int]:
    """Rounds until the budget is spent or no finding is open (module docstring); the table is
    regenerated after each. Returns the tallies at the end."""
    root = Path(root)
    plan = load_plan(root)
    if plan.looks < 2:
        raise findings.TableError(f"conf/decide.yaml: looks: {plan.looks}: decide needs a plan with a look after "
                                  "the campaign's (declare it before the first look)")
    builder = Builder(root, profile, jobs, budget, say)
    try:
        if threading.current_thread() is threading.main_thread():      # SIGTERM stops decide as Ctrl-C does
            previous = signal.signal(signal.SIGTERM, _interrupted)
            try:
                return _rounds(root, plan, builder, budget, include_provisional, say)
            finally:
                signal.signal(signal.SIGTERM, previous)
        return _rounds(root, plan, builder, budget, include_provisional, say)
    finally:
        builder.close()


def runs_here(root: Path, profile: str) -> bool:
    """Whether the Snakemake profile runs its jobs on this machine (no executor, or ``local``)."""
    config = root / "profiles" / profile / "config.yaml"
    settings = yaml.safe_load(config.read_text(encoding="utf-8")) if config.is_file() else None
    return str((settings or {}).get("executor", "local")) == "local"


def _interrupted(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _rounds(root: Path, plan: DecidePlan, builder: "Builder", budget: float, include_provisional: bool,
            say: Callable[[str], None]) -> dict[str, int]:
    """decide's rounds (decide's docstring)."""
    round_no, tried = 0, set()
    while True:
        rows = build_table(root)
        found, results, _ = findings.evaluate(root, rows)
        tree = RunTree.load(root / "conf")
        cplan = Plan.load(root)
        used = spent(root, cplan)
        waiting = open_findings(found, results, plan, include_provisional)
        say(f"round {round_no}: {len(waiting)} open; spent {used:.2f} of {budget:.2f} CPU-h; " + findings.tally(results))
        if used >= budget or not waiting:
            write_table(root)
            return _counts(results)
        paired = {g.run for g in found or () if g.metric in findings.EFFECTS}
        steps = []
        for f in waiting:
            evals_only = not worlds()[tree.resolved(f.run).world.name].one_split
            step = next_step(root, tree, cplan, plan, f, results[f.id], paired, evals_only)
            if step is not None and (f.id, step.k, step.draws) not in tried:
                steps.append(step)
        if not steps:
            write_table(root)
            return _counts(results)
        steps.sort(key=lambda s: (s.to_decide, s.cpu_hours, s.finding.id))
        round_no += 1
        chosen: list[Step] = []
        planned = 0.0
        for s in steps:
            if not chosen or used + planned + s.cpu_hours <= budget:
                chosen.append(s)
                planned += s.cpu_hours
        for s in chosen:
            tried.add((s.finding.id, s.k, s.draws))
            say(f"  {s.finding.id}: look → {s.k} seeds, {s.draws} draw{'s' * (s.draws > 1)} ({s.route}; "
                f"~{s.cpu_hours:.2f} CPU-h)")
        _write_files(root, [run_file for s in chosen for run_file in s.files])
        targets = list(dict.fromkeys(t for s in chosen for t in s.targets))
        if not builder.build(targets):
            say("  budget reached (or a stage failed): stopping after this wave")
            continue


def _write_files(root: Path, files: list[LookRun]) -> None:
    """The look runs' files (parents first), each written once, then the tree checked as `martingale
    check` checks it: a file that would break a rule is removed again and the error raised."""
    written = []
    for run_file in files:
        path = root / "conf" / "runs" / f"{run_file.run_id}.yaml"
        if not path.exists():
            write_text(path, run_file.text())
            written.append(path)
    try:
        tree = RunTree.load(root / "conf")
        for path in written:
            tree.resolved_config(path.stem)
    except Exception:
        for path in written:
            path.unlink(missing_ok=True)
        raise


def _counts(results: dict[str, findings.Result]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in results.values():
        out[r.verdict] = out.get(r.verdict, 0) + 1
    return out
