# The start model s0 before any distillation: local weights linked into the store, or the
# embedded model pretrained here on calibrated traces.


rule link_weights:
    output:
        directory(f"{STORE}/weights/{{sid}}"),
    params:
        cfg=stage_cfg,
    log:
        "logs/weights/{sid}.log",
    wildcard_constraints:
        sid=sid_pattern("weights"),
    localrule: True
    conda:
        "../envs/martingale.yaml"
    script:
        "../scripts/weights.py"


rule pretrain:
    output:
        directory(f"{STORE}/pretrain/{{sid}}"),
    params:
        cfg=stage_cfg,
    log:
        "logs/pretrain/{sid}.log",
    wildcard_constraints:
        sid=sid_pattern("pretrain"),
    threads: stage_threads
    resources:
        mem_mb=stage_mem_mb,
        runtime=stage_runtime,
        gpu=stage_gpu,
        gpu_model=stage_gpu_model,
    conda:
        "../envs/martingale.yaml"
    script:
        "../scripts/pretrain.py"
