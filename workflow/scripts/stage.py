"""Any stage kind's job (thin): martingale.jobs.smk.stage_job runs the kind named by the rule, with the
rule's log as its log. Where the build's warm worker serves (martingale.jobs.warm), its child runs
this script instead, torch already imported; this process only waits for it."""
from martingale.jobs.warm import ran_in_worker

if not ran_in_worker(snakemake, __file__):  # noqa: F821 (snakemake: injected by Snakemake)
    from martingale.jobs.smk import stage_job

    stage_job(snakemake)  # noqa: F821
