"""Link local weights (model.path) into the store as <stage>/model, so every stage reads a model
the same way: <stage folder>/model."""
import os
from pathlib import Path

from martingale.io import atomic_dir
from martingale.smk import run_logged, track_stage


def main(smk):
    cfg, out_dir = smk.params.cfg, Path(smk.output[0])

    def body():
        src = Path(cfg["model"]["path"]).resolve()
        if not src.is_dir():
            raise FileNotFoundError(f"model.path {src} is not a folder of weights")
        with atomic_dir(out_dir) as tmp:
            os.symlink(src, tmp / "model", target_is_directory=True)
        track_stage(smk)

    run_logged(smk, body)


main(snakemake)  # noqa: F821 (injected by Snakemake)
