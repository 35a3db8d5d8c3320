"""Gather one run (martingale.jobs.smk.aggregate_job): its evals and the parent's checked against their
manifests, eval.json with the knob's paired effect against the parent, the plots, landed.json (the
only clock value the runs table shows), then the run's wandb mirror. Where the build's warm worker
serves (martingale.jobs.warm), its child runs this script instead; this process only waits for it."""
from martingale.jobs.warm import ran_in_worker

if not ran_in_worker(snakemake, __file__):  # noqa: F821 (snakemake: injected by Snakemake)
    from martingale.jobs.smk import aggregate_job

    aggregate_job(snakemake)  # noqa: F821
