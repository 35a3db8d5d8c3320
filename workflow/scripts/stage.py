"""Any stage kind's job (thin): martingale.smk.run_stage runs the kind named by the rule, with the
rule's log as its log. Stage bodies import torch inside the job, never while Snakemake parses."""
from martingale.smk import run_logged, run_stage


def main(smk):
    run_logged(smk, lambda: run_stage(smk))


main(snakemake)  # noqa: F821 (injected by Snakemake)
