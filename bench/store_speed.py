"""Stage store speed side by side: martingale's store (martingale.remote) against Snakemake's S3
storage plugin and DVC, each pushing and pulling the same folders to the same local S3 server.
Not a test (minutes): `make bench-store` (installs the other two into .venv-bench first), or
`.venv/bin/python bench/store_speed.py [--stages DIR] [--files N] [--rounds R]`.

Two data sets. The demo's stages: the finished stage folders of ``--stages DIR`` (default this
repository's results/_store) that the plan's run filter-s2only (`make demo`'s) uses, each pushed
on its inputs as a build would; where no such folder is there (no plan, or DIR built from another
config), every finished stage folder of DIR, pushed without inputs. And ``--files`` small files
(default 2,000 of 1-4 KiB from a seeded RNG) written as one stage folder by
``martingale.store.files.atomic_dir`` (its MANIFEST.json too).

The server is SeaweedFS (tests/s3server.py), started here; the credentials reach every tool
through the environment (AWS_*), the endpoint as each tool's setting. Each measurement times a
whole command, wall clock, into a fresh prefix and fresh local folders; a pull goes into an empty
folder, from what that round's push sent. Every tool runs with its defaults:

- ours: `push_stage` for each stage (upstream first), then `sync_stages` into an empty project, in a
  fresh `.venv/bin/python` (its start and imports counted; ``in-process`` also prints the
  functions' own time), `open_store`'s default 32 transfers at once.
- snakemake 9.27.1 + snakemake-storage-plugin-s3 0.3.6: `--default-storage-provider s3
  --default-storage-prefix s3://bucket/prefix --cores all`; an upload is a rule whose output,
  ``directory(NAME)``, goes to the storage (its job copies the folder in), a download a rule whose
  input, ``NAME``, comes from it (its job copies it to a local() folder).
- dvc 3.67.1 + dvc-s3: `dvc add` of the folders and `dvc push` (both timed) to an S3 remote whose
  endpointurl is the server; `dvc pull` in a fresh `dvc init --no-scm` project holding only the
  .dvc files and the config. DVC_NO_ANALYTICS=1 (this machine has no network to report to).

Each measurement runs ``--rounds`` times (3), tools interleaved; the median is printed, with the
ratios (other's seconds / ours) and whether the goals hold: push and pull at least 3x faster than
Snakemake's plugin on the small files, and faster than DVC on the demo's stages. Nothing is
asserted but that every pull brought the folders' bytes back.

    make bench-store
    .venv/bin/python bench/store_speed.py --stages ../other/results/_store --rounds 1
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))
BENCH_BIN = REPO / ".venv-bench" / "bin"
RUN = "filter-s2only"
TOOLS = ("ours", "snakemake", "dvc")


def finished(folder: Path) -> bool:
    return (folder / "MANIFEST.json").is_file()


def select_stages(store: Path) -> tuple[list[str], dict[str, dict[str, str]], str]:
    """(stage ids upstream first, id → role → input id, how they were chosen) from a results/_store."""
    from martingale.store.manifest import store_folders

    try:
        from martingale.plan import Plan
        plan = Plan.load(REPO)
        chain = plan.run_chain(RUN)
    except Exception as e:                       # no plan here: every stage folder
        chain, why = [], f"no plan ({type(e).__name__})"
    else:
        why = f"no stage of {RUN}'s plan is in {store}"
    picked: list[str] = []
    for sid in [s for s in plan.stages if s in set(chain)] if chain else []:
        inputs = dict(plan.stages[sid].inputs)
        if finished(store / sid.split("-", 1)[0] / sid) and all(i in picked for i in inputs.values()):
            picked.append(sid)
    if picked:
        return picked, {s: dict(plan.stages[s].inputs) for s in picked}, \
            f"{RUN}'s stages that are finished in {store}, with their inputs"
    every = sorted(p.name for p in store_folders(store) if finished(p))
    return every, {s: {} for s in every}, f"{why}: every finished stage folder of {store}, without inputs"


def make_files(root: Path, n: int, seed: int = 0) -> str:
    """``n`` files of 1-4 KiB of seeded random bytes, as one stage folder under root: its id."""
    from martingale.store import stage_dir
    from martingale.store.files import atomic_dir

    sid = f"files-{seed:04d}{n:08d}"
    rng = random.Random(seed)
    with atomic_dir(root / stage_dir(sid)) as tmp:
        for i in range(n):
            (tmp / f"{i:05d}.bin").write_bytes(rng.randbytes(rng.randint(1024, 4096)))
    return sid


def tree(folder: Path) -> dict[str, bytes]:
    """relative path → bytes of every file under a folder (but .snakemake_timestamp, the marker
    Snakemake adds to a directory() output)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".snakemake_timestamp"}


# --- ours: a fresh interpreter per measurement (argv: push|pull url root spec.json) ------------------

def ours_main(op: str, url: str, root: Path, spec_file: Path) -> None:
    start = time.perf_counter()
    from martingale.remote.backend import open_store
    from martingale.remote.pull import sync_stages
    from martingale.remote.push import push_stage

    spec = json.loads(spec_file.read_text())
    order, inputs = spec["order"], spec["inputs"]
    imported = time.perf_counter()
    backend = open_store(url)
    if op == "push":
        for sid in order:
            result = push_stage(backend, root, sid, inputs[sid])
            if result.state != "pushed":
                sys.exit(f"ours: {sid} {result.state} {result.why}")
    else:
        synced = sync_stages(backend, root, order, inputs, True, lambda line: print(line, file=sys.stderr))
        if sorted(synced.pulled) != sorted(order):
            sys.exit(f"ours: pulled {synced.pulled}, wanted {order}")
    done = time.perf_counter()
    print(json.dumps({"imports": imported - start, "seconds": done - imported}))


class Bench:
    def __init__(self, work: Path, server: Any, bucket: str, env: dict[str, str]):
        self.work, self.server, self.server_bucket, self.env = work, server, bucket, env
        self.count = 0
        self.inner: dict[tuple[str, str], list[float]] = {}

    def fresh(self, name: str) -> tuple[Path, str]:
        """A new empty folder and a new prefix in the bucket."""
        self.count += 1
        folder = self.work / f"{self.count:03d}-{name}"
        folder.mkdir()
        return folder, f"{self.count:03d}-{name}"

    def run(self, args: list[str], cwd: Path, log: Path) -> float:
        """Seconds of one command, wall clock; its output to ``log``, and the run stops on failure."""
        with open(log, "ab") as f:
            start = time.perf_counter()
            rc = subprocess.run(args, cwd=cwd, env=self.env, stdout=f, stderr=subprocess.STDOUT).returncode
            seconds = time.perf_counter() - start
        if rc != 0:
            sys.exit(f"{' '.join(map(str, args[:3]))} ... failed ({rc}): see {log}\n{log.read_text()[-3000:]}")
        return seconds

    # ours
    def ours(self, data: str, src_root: Path, order: list[str], inputs: dict, folders: dict[str, Path]) -> tuple[float, float]:
        from martingale.store import stage_dir

        spec = self.work / f"{data}.spec.json"
        spec.write_text(json.dumps({"order": order, "inputs": inputs}))
        folder, prefix = self.fresh(f"ours-{data}")
        url = f"s3://{self.server_bucket}/{prefix}"
        me = [sys.executable, str(Path(__file__).resolve()), "--ours"]
        push_log, pull_log = folder / "push.log", folder / "pull.log"
        push = self.run([*me, "push", url, str(src_root), str(spec)], folder, push_log)
        pulled = folder / "pulled"
        pulled.mkdir()
        pull = self.run([*me, "pull", url, str(pulled), str(spec)], folder, pull_log)
        for op, log in (("push", push_log), ("pull", pull_log)):
            inner = json.loads(log.read_text().strip().splitlines()[-1])["seconds"]
            self.inner.setdefault((data, op), []).append(inner)
        self.check("ours", folders, {sid: pulled / stage_dir(sid) for sid in folders})
        return push, pull

    # snakemake
    def snakemake(self, data: str, folders: dict[str, Path]) -> tuple[float, float]:
        names = sorted(folders)
        src = {n: str(folders[n]) for n in names}
        constraint = "|".join(names)
        folder, prefix = self.fresh(f"snakemake-{data}")
        (folder / "push.smk").write_text(f"""
SRC = {src!r}
wildcard_constraints:
    name="{constraint}"
rule all:
    input: {names!r}
rule upload:
    output: directory("{{name}}")
    params: src=lambda w: SRC[w.name]
    shell: "cp -r {{params.src}} {{output}}"
""")
        (folder / "pull.smk").write_text(f"""
wildcard_constraints:
    name="{constraint}"
rule all:
    input: [local(f"pulled/{{n}}") for n in {names!r}]
rule download:
    input: "{{name}}"
    output: local(directory("pulled/{{name}}"))
    shell: "cp -r {{input}} {{output}}"
""")
        storage = ["--cores", "all", "--default-storage-provider", "s3",
                   "--default-storage-prefix", f"s3://{self.server_bucket}/{prefix}",
                   "--storage-s3-endpoint-url", self.server.endpoint]
        smk = str(BENCH_BIN / "snakemake")
        up, down = folder / "up", folder / "down"
        up.mkdir()
        down.mkdir()
        push = self.run([smk, "-s", str(folder / "push.smk"), "-d", str(up), *storage], folder, folder / "push.log")
        pull = self.run([smk, "-s", str(folder / "pull.smk"), "-d", str(down), *storage], folder, folder / "pull.log")
        self.check("snakemake", folders, {n: down / "pulled" / n for n in names})
        return push, pull

    # dvc
    def dvc(self, data: str, folders: dict[str, Path]) -> tuple[float, float]:
        folder, prefix = self.fresh(f"dvc-{data}")
        dvc = str(BENCH_BIN / "dvc")
        up, down = folder / "up", folder / "down"
        for project in (up, down):
            project.mkdir()
            self.run([dvc, "init", "--no-scm", "-q"], project, folder / "setup.log")
        self.run([dvc, "remote", "add", "-d", "store", f"s3://{self.server_bucket}/{prefix}"], up, folder / "setup.log")
        self.run([dvc, "remote", "modify", "store", "endpointurl", self.server.endpoint], up, folder / "setup.log")
        names = sorted(folders)
        (up / "data").mkdir()
        for n in names:
            shutil.copytree(folders[n], up / "data" / n, symlinks=True)
        push = self.run([dvc, "add", *[f"data/{n}" for n in names]], up, folder / "push.log")
        push += self.run([dvc, "push"], up, folder / "push.log")
        shutil.copyfile(up / ".dvc" / "config", down / ".dvc" / "config")
        (down / "data").mkdir()
        for n in names:
            shutil.copyfile(up / "data" / f"{n}.dvc", down / "data" / f"{n}.dvc")
        pull = self.run([dvc, "pull"], down, folder / "pull.log")
        self.check("dvc", folders, {n: down / "data" / n for n in names})
        return push, pull

    def check(self, tool: str, want: dict[str, Path], got: dict[str, Path]) -> None:
        for name, folder in want.items():
            if tree(got[name]) != tree(folder):
                sys.exit(f"{tool}: the pulled {name} differs from the pushed folder ({got[name]})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stages", type=Path, default=REPO / "results" / "_store",
                    help="a results/_store whose stages are the first data set (default: this repository's)")
    ap.add_argument("--files", type=int, default=2000, help="how many small files in the second data set")
    ap.add_argument("--rounds", type=int, default=3, help="measurements of each (the median is printed)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, server data)")
    ap.add_argument("--ours", nargs=4, metavar=("OP", "URL", "ROOT", "SPEC"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ours:
        op, url, root, spec = args.ours
        ours_main(op, url, Path(root), Path(spec))
        return
    for tool in ("snakemake", "dvc"):
        if not (BENCH_BIN / tool).exists():
            sys.exit(f"{BENCH_BIN / tool} is missing: `make bench-store` installs it")

    from martingale.store import stage_dir
    from tests.s3server import BUCKET, S3Server

    work = Path(tempfile.mkdtemp(prefix="store-speed-"))
    try:
        stages = args.stages.resolve()
        order, inputs, how = select_stages(stages)
        if not order:
            sys.exit(f"no finished stage folder in {stages}: `make demo` builds the demo's, or give --stages DIR")
        demo_root = work / "src-demo"
        for sid in order:
            shutil.copytree(stages / sid.split("-", 1)[0] / sid, demo_root / stage_dir(sid), symlinks=True)
            note = stages / "_lineage" / f"{sid}.json"
            if any(inputs[sid].values()) and note.is_file():
                (demo_root / "results/_store/_lineage").mkdir(parents=True, exist_ok=True)
                shutil.copyfile(note, demo_root / "results/_store/_lineage" / note.name)
        files_root = work / "src-files"
        files_sid = make_files(files_root, args.files)
        sets = {
            "demo": (demo_root, order, inputs),
            "files": (files_root, [files_sid], {files_sid: {}}),
        }
        size = {d: sum(len(b) for sid in o for b in tree(r / stage_dir(sid)).values()) for d, (r, o, _) in sets.items()}
        nfiles = {d: sum(len(tree(r / stage_dir(sid))) for sid in o) for d, (r, o, _) in sets.items()}
        print(f"demo: {len(order)} stages ({how}): {', '.join(order)}")
        for d in sets:
            print(f"{d}: {nfiles[d]} files, {size[d] / 1e6:.2f} MB")

        server = S3Server(work / "s3").start()
        try:
            env = {**os.environ, **server.env, "DVC_NO_ANALYTICS": "1"}
            bench = Bench(work, server, BUCKET, env)
            times: dict[tuple[str, str, str], list[float]] = {}
            for r in range(args.rounds):
                for data, (root, o, inp) in sets.items():
                    folders = {sid: root / stage_dir(sid) for sid in o}
                    tools = TOOLS[r % 3:] + TOOLS[:r % 3]     # each tool in each place once in three rounds
                    for tool in tools:
                        push, pull = bench.ours(data, root, o, inp, folders) if tool == "ours" else \
                            bench.snakemake(data, folders) if tool == "snakemake" else bench.dvc(data, folders)
                        times.setdefault((data, tool, "push"), []).append(push)
                        times.setdefault((data, tool, "pull"), []).append(pull)
                        print(f"round {r + 1} {data:5s} {tool:9s} push {push:7.2f} s  pull {pull:7.2f} s", flush=True)
        finally:
            server.stop()
        report(times, bench.inner, args.rounds)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def report(times: dict[tuple[str, str, str], list[float]], inner: dict[tuple[str, str], list[float]], rounds: int) -> None:
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\nmedian of {rounds} (seconds, wall clock of each whole command; ratio = other / ours)")
    print(f"{'data':6s} {'op':5s} {'ours':>7s} {'in-process':>10s} {'snakemake':>10s} {'dvc':>7s} "
          f"{'smk/ours':>9s} {'dvc/ours':>9s}")
    for data in ("demo", "files"):
        for op in ("push", "pull"):
            o, s, d = (med[(data, t, op)] for t in TOOLS)
            print(f"{data:6s} {op:5s} {o:7.2f} {statistics.median(inner[(data, op)]):10.2f} {s:10.2f} {d:7.2f} "
                  f"{s / o:9.2f} {d / o:9.2f}")
    goals: list[tuple[str, Optional[bool]]] = []
    for op in ("push", "pull"):
        ratio = med[("files", "snakemake", op)] / med[("files", "ours", op)]
        goals.append((f"{op} of the small files at least 3x faster than Snakemake's S3 plugin ({ratio:.1f}x)", ratio >= 3))
    for op in ("push", "pull"):
        ratio = med[("demo", "dvc", op)] / med[("demo", "ours", op)]
        goals.append((f"{op} of the demo's stages faster than DVC ({ratio:.1f}x)", ratio > 1))
    print()
    for text, held in goals:
        print(f"{'holds' if held else 'MISSED'}: {text}")


if __name__ == "__main__":
    main()
