"""Gather one run (martingale.jobs.smk.aggregate_job): its evals and the parent's checked against their
manifests, eval.json with the knob's paired effect against the parent, the plots, landed.json (the
only clock value the runs table shows), then the run's wandb mirror; in a warm child of the
build's worker when one serves (martingale.jobs.warm)."""
from martingale.jobs.warm import run_job

run_job(snakemake, "martingale.jobs.smk:aggregate_job")  # noqa: F821 (injected by Snakemake)
