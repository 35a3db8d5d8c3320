# A run's own folder: its resolved config, lineage, per-stage evals gathered into eval.json;
# then the master runs table, regenerated from the run files and the results.


rule aggregate:
    input:
        run_eval_dirs,
    output:
        evals="results/{run}/eval.json",
        config="results/{run}/config.yaml",
        lineage="results/{run}/lineage.json",
        records="results/{run}/records.jsonl",
    params:
        cfg=run_config,
        lineage=run_lineage,
        evals=run_evals,
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
        "runs.json",
    log:
        "logs/runs_table.log",
    localrule: True
    conda:
        "../envs/martingale.yaml"
    script:
        "../scripts/runs_table.py"
