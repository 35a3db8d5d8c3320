"""Distill the biased start model D: martingale.stages.distill.run(cfg, base_model, out_dir)."""
from pathlib import Path

from martingale.smk import run_logged


def main(smk):
    from martingale.stages import distill  # heavy imports only inside the job

    run_logged(smk, lambda: distill.run(dict(smk.params.cfg), Path(smk.input.base_model),
                                        Path(smk.output[0])))


main(snakemake)  # noqa: F821 (injected by Snakemake)
