"""Stage bodies. Each stage is ``run(cfg, <upstream folders>, out_dir)`` and writes only out_dir.

- ``pretrain.run(cfg, out_dir)``: cfg has world, model, pretrain → out_dir/model (HF folder)
- ``distill.run(cfg, base_model, out_dir)``: cfg has world, model, distill → out_dir/model
- ``train.run(cfg, start_model, judge_model, out_dir)``: cfg has world, model, elicit, stage, seed
  → out_dir/model (adapter merged) and out_dir/train.jsonl (per-step log)
- ``evaluate.run(cfg, model, judge_model, out_dir)``: cfg has world, model, elicit, eval, seed
  → out_dir/records.jsonl and out_dir/metrics.json

``model``/``start_model``/``judge_model`` are stage folders (the HF weights are in ``<folder>/model``).
Every stage writes into a temporary sibling folder and renames it into place when complete
(``martingale.io.atomic_dir``), so a half-written stage is never taken for a finished one.
"""
