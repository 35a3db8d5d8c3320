"""Configuration: structured schema, run files, and Hydra composition of a run's lineage."""
