"""Gather one run: martingale.records.aggregate.write_run_results(run_id, cfg, lineage, evals, out_dir)."""
from pathlib import Path

from martingale.smk import run_logged


def main(smk):
    from martingale.records.aggregate import write_run_results

    evals = [dict(e, dir=Path(e["dir"])) for e in smk.params.evals]
    out_dir = Path(smk.output.evals).parent
    run_logged(smk, lambda: write_run_results(smk.wildcards.run, dict(smk.params.cfg),
                                              list(smk.params.lineage), evals, out_dir))


main(snakemake)  # noqa: F821 (injected by Snakemake)
