# A run's own folder: its resolved config, lineage, per-stage evals gathered into eval.json with
# the knob's paired effect against the parent's evals, and the run's figures (also in the report);
# then the master runs table, regenerated from the run files and the results. Building a run also
# aggregates each ancestor whose evals (and its parent's) this build makes or the store holds.


rule aggregate:
    input:
        evals=run_eval_dirs,
        parent_evals=parent_eval_dirs,
        natural_evals=natural_eval_dirs,
        # built ancestors aggregated too (common.ancestor_results): never a stage beyond this build's
        ancestors=ancestor_results,
    output:
        evals="results/{run}/eval.json",
        config="results/{run}/config.yaml",
        lineage="results/{run}/lineage.json",
        records="results/{run}/records.jsonl",
        landed="results/{run}/landed.json",
        prior_posterior=plot_output("prior_posterior"),
        delta_vs_prior=plot_output("delta_vs_prior"),
        reliability=plot_output("reliability"),
        brier_ms_by_stage=plot_output("brier_ms_by_stage"),
        effect_forest=plot_output("effect_forest"),
        belief_by_turn=plot_output("belief_by_turn"),
    params:
        cfg=run_config,
        lineage=run_lineage,
        evals=run_evals,
        parent_evals=parent_evals,
        natural_evals=natural_evals,
    log:
        "logs/aggregate/{run}.log",
    wildcard_constraints:
        run=RUN_PATTERN,
    localrule: True
    conda:
        "../envs/martingale.yaml"
    script:
        "../scripts/aggregate.py"


rule runs_table:
    input:
        table_inputs,
    output:
        # update(): Snakemake must not delete the previous table before the job; the step reads it
        # to refuse dropping a row. Each file is rewritten only when its content changes.
        table=update("runs.json"),
        markdown=update("RUNS.md"),
        page=report(update("runs.html"), caption="../report/runs_table.rst", category="Runs table"),
        findings=update("FINDINGS.md"),
    log:
        "logs/runs_table.log",
    localrule: True
    conda:
        "../envs/martingale.yaml"
    script:
        "../scripts/runs_table.py"
