# D: the start model made confirmation-biased on purpose (SFT of a LoRA adapter on biased traces).


rule distill:
    input:
        unpack(stage_inputs),
    output:
        directory(f"{STORE}/distill/{{sid}}"),
    params:
        cfg=stage_cfg,
    log:
        "logs/distill/{sid}.log",
    wildcard_constraints:
        sid=sid_pattern("distill"),
    threads: stage_threads
    resources:
        mem_mb=stage_mem_mb,
        runtime=stage_runtime,
        gpu=stage_gpu,
        gpu_model=stage_gpu_model,
    conda:
        "../envs/martingale.yaml"
    script:
        "../scripts/distill.py"
