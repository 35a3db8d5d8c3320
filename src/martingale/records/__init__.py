"""Per-run results: gather a run's stage evals into results/<run-id>/."""
