"""Jobs of a build, read from Snakemake's own log (.snakemake/log/*.snakemake.log): when each job
started and finished, and how many ran at once. ``bench/campaign_speed.py`` reports it for a build.

Snakemake writes ``[<date>]`` before each event, then ``rule <name>:`` or ``localrule <name>:``
with ``jobid: <n>`` for a start, and ``Finished jobid: <n> (Rule: <name>)`` for an end, to the
second.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Iterable, Optional

_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
_START = re.compile(r"^(?:local)?rule (\w+):$")
_JOBID = re.compile(r"^\s+jobid: (\d+)$")
_FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")


@dataclass(frozen=True)
class Job:
    """One job of a Snakemake log: its rule, wildcards, and when it started and finished."""
    jobid: int
    rule: str
    start: datetime
    end: Optional[datetime]     # None: not finished in this log (failed or killed)

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds() if self.end else 0.0


def jobs(text: str) -> list[Job]:
    """Every job the log started, in start order, with its end when the log has one."""
    stamp: Optional[datetime] = None
    pending: Optional[str] = None           # rule whose jobid line comes next
    started: dict[int, tuple[str, datetime]] = {}
    ended: dict[int, datetime] = {}
    for line in text.splitlines():
        if m := _STAMP.match(line):
            stamp = datetime.strptime(m.group(1).replace("  ", " "), "%a %b %d %H:%M:%S %Y")
        elif (m := _START.match(line)) and stamp is not None:
            pending = m.group(1)
        elif (m := _JOBID.match(line)) and pending is not None and stamp is not None:
            started.setdefault(int(m.group(1)), (pending, stamp))
            pending = None
        elif (m := _FINISHED.match(line)) and stamp is not None:
            ended[int(m.group(1))] = stamp
    return [Job(j, rule, t, ended.get(j)) for j, (rule, t) in sorted(started.items(), key=lambda x: x[1][1])]


def in_flight(build: Iterable[Job]) -> tuple[float, int]:
    """(mean, peak) jobs running at once over the span from the first start to the last end:
    mean = Σ job seconds / span. Unfinished jobs are left out."""
    done = [(j, j.end) for j in build if j.end is not None]
    if not done:
        return 0.0, 0
    span = (max(end for _, end in done) - min(j.start for j, _ in done)).total_seconds()
    events = sorted([(j.start, 1) for j, _ in done] + [(end, -1) for _, end in done], key=lambda e: (e[0], e[1]))
    peak = running = 0
    for _, step in events:        # an end and a start in the same second: the end first
        running += step
        peak = max(peak, running)
    return (sum(j.seconds for j, _ in done) / span if span > 0 else float(len(done) > 0)), peak


def latest(root: Path | str = ".") -> Path:
    """The newest Snakemake log of the project."""
    logs = sorted((Path(root) / ".snakemake" / "log").glob("*.snakemake.log"))
    if not logs:
        raise FileNotFoundError(f"{root}/.snakemake/log: no Snakemake log")
    return logs[-1]
