"""Regenerate the master runs table — runs.json, RUNS.md, runs.html — and FINDINGS.md (the log's
findings in conf/findings.yaml with their verdicts) from the run files and the results
(martingale.jobs.smk.table_job); in a warm child of the build's worker when one serves (martingale.jobs.warm)."""
from martingale.jobs.warm import run_job

run_job(snakemake, "martingale.jobs.smk:table_job")  # noqa: F821 (injected by Snakemake)
