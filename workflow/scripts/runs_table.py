"""Regenerate the master runs table — runs.json, RUNS.md, runs.html — and FINDINGS.md (the log's
findings in conf/findings.yaml with their verdicts) from the run files and the results
(martingale.jobs.smk.table_job). Where the build's warm worker serves (martingale.jobs.warm), its
child runs this script instead; this process only waits for it."""
from martingale.jobs.warm import ran_in_worker

if not ran_in_worker(snakemake, __file__):  # noqa: F821 (snakemake: injected by Snakemake)
    from martingale.jobs.smk import table_job

    table_job(snakemake)  # noqa: F821
