"""Pretrain the embedded model: martingale.stages.pretrain.run(cfg, out_dir)."""
from pathlib import Path

from martingale.smk import run_logged


def main(smk):
    from martingale.stages import pretrain  # heavy imports only inside the job

    run_logged(smk, lambda: pretrain.run(dict(smk.params.cfg), Path(smk.output[0])))


main(snakemake)  # noqa: F821 (injected by Snakemake)
