# Eval of one model (s0 or a trained stage) for one seed: records and metrics.


rule evaluate:
    input:
        unpack(stage_inputs),
    output:
        directory(f"{STORE}/eval/{{sid}}"),
    params:
        cfg=stage_cfg,
    log:
        "logs/eval/{sid}.log",
    wildcard_constraints:
        sid=sid_pattern("eval"),
    threads: stage_threads
    resources:
        mem_mb=stage_mem_mb,
        runtime=stage_runtime,
        gpu=stage_gpu,
        gpu_model=stage_gpu_model,
    conda:
        "../envs/martingale.yaml"
    script:
        "../scripts/eval.py"
