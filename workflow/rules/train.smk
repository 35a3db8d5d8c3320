# One policy-gradient stage (s1, s2 ...) from its start model, read by the run's s0 model as judge.


rule train:
    input:
        unpack(stage_inputs),
    output:
        directory(f"{STORE}/train/{{sid}}"),
    params:
        cfg=stage_cfg,
    log:
        "logs/train/{sid}.log",
    wildcard_constraints:
        sid=sid_pattern("train"),
    threads: stage_threads
    resources:
        mem_mb=stage_mem_mb,
        runtime=stage_runtime,
        gpu=stage_gpu,
        gpu_model=stage_gpu_model,
    conda:
        "../envs/martingale.yaml"
    script:
        "../scripts/train.py"
