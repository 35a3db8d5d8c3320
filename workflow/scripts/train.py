"""One training stage: martingale.stages.train.run(cfg, start_model, judge_model, out_dir)."""
from pathlib import Path

from martingale.smk import run_logged


def main(smk):
    from martingale.stages import train  # heavy imports only inside the job

    run_logged(smk, lambda: train.run(dict(smk.params.cfg), Path(smk.input.start_model),
                                      Path(smk.input.judge_model), Path(smk.output[0])))


main(snakemake)  # noqa: F821 (injected by Snakemake)
