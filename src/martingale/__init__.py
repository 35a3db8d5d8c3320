"""martingale: a declarative experiment-DAG orchestrator for martingale training.

Data flows one way: config (run files → resolved configs) → plan (stages with content ids)
→ stages (pretrain, distill, train, evaluate) → records (per-run eval.json) → table (runs.json).
"""
__version__ = "0.1.0"
