"""Any stage kind's job (thin): martingale.jobs.smk.stage_job runs the kind named by the rule, with the
rule's log as its log, in a warm child of the build's worker when one serves (martingale.jobs.warm).
Stage bodies import torch inside the job, never while Snakemake parses."""
from martingale.jobs.warm import run_job

run_job(snakemake, "martingale.jobs.smk:stage_job")  # noqa: F821 (injected by Snakemake)
