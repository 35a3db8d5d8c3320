"""Stage script (thin), then its wandb mirror: martingale.stages.evaluate.run(cfg, model, judge_model, out_dir).

Stage bodies are imported inside the job, so torch never loads while Snakemake parses.
"""
from pathlib import Path

from martingale.smk import run_logged, stage_run, track_stage


def main(smk):
    def body():
        run = stage_run("evaluate")
        run(dict(smk.params.cfg), Path(smk.input.model), Path(smk.input.judge_model), Path(smk.output[0]))
        track_stage(smk)

    run_logged(smk, body)


main(snakemake)  # noqa: F821 (injected by Snakemake)
