"""Regenerate the master runs table — runs.json, RUNS.md, runs.html — and FINDINGS.md (the log's
findings in conf/findings.yaml with their verdicts) from the run files and the results:
martingale.table.write_table(root)."""
from pathlib import Path

from martingale.smk import run_logged


def main(smk):
    from martingale.table import write_table

    run_logged(smk, lambda: write_table(Path(smk.output.table).resolve().parent))


main(snakemake)  # noqa: F821 (injected by Snakemake)
