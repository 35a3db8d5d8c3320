"""The job runtime: what a Snakemake job, a torchrun rank and the warm worker run, and the
build's own log."""
