"""Evaluate one model: martingale.stages.evaluate.run(cfg, model, judge_model, out_dir)."""
from pathlib import Path

from martingale.smk import run_logged


def main(smk):
    from martingale.stages import evaluate  # heavy imports only inside the job

    run_logged(smk, lambda: evaluate.run(dict(smk.params.cfg), Path(smk.input.model),
                                         Path(smk.input.judge_model), Path(smk.output[0])))


main(snakemake)  # noqa: F821 (injected by Snakemake)
