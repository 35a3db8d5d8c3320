"""Stage script (thin): martingale.stages.evaluate.run(cfg, model, judge_model, out_dir).

Stage bodies are imported inside the job, so torch never loads while Snakemake parses.
"""
from pathlib import Path

from martingale.smk import run_logged, stage_run


def main(smk):
    def body():
        run = stage_run("evaluate")
        return run(dict(smk.params.cfg), Path(smk.input.model), Path(smk.input.judge_model), Path(smk.output[0]))

    run_logged(smk, body)


main(snakemake)  # noqa: F821 (injected by Snakemake)
