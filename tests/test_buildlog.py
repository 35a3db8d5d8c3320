"""Jobs of a build read from Snakemake's log: starts, ends, and how many ran at once."""
from __future__ import annotations

from martingale.jobs import buildlog

# Snakemake 9.27's log, trimmed to what the reader uses (plus a line it must skip)
LOG = """host: sandbox
[Tue Dec  1 23:42:34 2026]
localrule pretrain:
    output: results/_store/pretrain/pretrain-aaa/MANIFEST.json
    jobid: 4
    threads: 1
[Tue Dec  1 23:42:36 2026]
rule evaluate:
    jobid: 7
[Tue Dec  1 23:42:44 2026]
Finished jobid: 4 (Rule: pretrain)
[Tue Dec  1 23:42:44 2026]
localrule train:
    jobid: 9
[Tue Dec  1 23:42:46 2026]
Finished jobid: 7 (Rule: evaluate)
[Tue Dec  1 23:42:54 2026]
Finished jobid: 9 (Rule: train)
[Tue Dec  1 23:42:54 2026]
localrule aggregate:
    jobid: 2
"""


def test_a_jobs_start_and_end_come_from_its_rule_block_and_its_finished_line():
    jobs = buildlog.jobs(LOG)
    assert [(j.jobid, j.rule, j.seconds) for j in jobs] == [(4, "pretrain", 10), (7, "evaluate", 10),
                                                           (9, "train", 10), (2, "aggregate", 0)]
    assert jobs[-1].end is None   # started, never finished in this log


def test_jobs_in_flight_is_job_seconds_over_the_span_and_the_peak_counts_overlaps():
    mean, peak = buildlog.in_flight(buildlog.jobs(LOG))
    assert mean == 30 / 20 and peak == 2   # 30 job-seconds over 20 s; pretrain and evaluate overlap


def test_a_job_starting_the_second_another_ends_does_not_overlap_it():
    jobs = [j for j in buildlog.jobs(LOG) if j.rule in ("pretrain", "train")]
    assert buildlog.in_flight(jobs) == (1.0, 1)
