"""Gather one run: martingale.records.aggregate.write_run_results(run_id, cfg, lineage, evals, out_dir,
parent_evals) — eval.json with the knob's paired effect against the parent, and the plots."""
from pathlib import Path

from martingale.smk import aggregate_fn, run_logged


def main(smk):
    def body():
        evals = [dict(e, dir=Path(e["dir"])) for e in smk.params.evals]
        parent_evals = [dict(e, dir=Path(e["dir"])) for e in smk.params.parent_evals]
        out_dir = Path(smk.output.evals).parent
        return aggregate_fn()(smk.wildcards.run, dict(smk.params.cfg), list(smk.params.lineage),
                              evals, out_dir, parent_evals=parent_evals)

    run_logged(smk, body)


main(snakemake)  # noqa: F821 (injected by Snakemake)
