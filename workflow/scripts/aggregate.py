"""Gather one run, its evals and the parent's checked against their manifests first:
martingale.records.aggregate.write_run_results(run_id, cfg, lineage, evals, out_dir, parent_evals, natural_evals):
eval.json with the knob's paired effect against the parent, and the plots; then landed.json, when
the results landed (the only clock value the runs table shows); then the run's wandb mirror."""
from pathlib import Path

from martingale.manifest import require
from martingale.smk import aggregate_fn, record_landing, run_logged, track_run


def main(smk):
    def body():
        evals = [dict(e, dir=Path(e["dir"])) for e in smk.params.evals]
        parent_evals = [dict(e, dir=Path(e["dir"])) for e in smk.params.parent_evals]
        natural_evals = [dict(e, dir=Path(e["dir"])) for e in smk.params.natural_evals]
        for e in evals + parent_evals + natural_evals:
            require(e["dir"])
        out_dir = Path(smk.output.evals).parent
        cfg, lineage = dict(smk.params.cfg), list(smk.params.lineage)
        aggregate_fn()(smk.wildcards.run, cfg, lineage, evals, out_dir, parent_evals=parent_evals,
                       natural_evals=natural_evals)
        record_landing(Path(smk.output.landed))
        track_run(smk.wildcards.run, cfg, lineage, Path(smk.output.evals))

    run_logged(smk, body)


main(snakemake)  # noqa: F821 (injected by Snakemake)
