# One rule per registered stage kind (martingale.stages), all from this one definition: the kind's
# upstream stages by role in, its content-addressed folder results/_store/<kind>/<id> out, its
# config slice as a param (editing a knob reruns what it affects), its model's resources. A stage's
# output is its MANIFEST.json (sha256 of every file, written last, inside the folder's one atomic
# rename): a folder without one is not a finished stage, for Snakemake as for us. Its benchmark
# (logs/<kind>/<id>.benchmark.tsv, the job's wall seconds) is what `martingale plan --cost` and the
# budget check estimate new stages from (martingale.plan.cost).


for kind in STAGE_KINDS.values():

    rule:
        name:
            kind.name
        input:
            unpack(stage_inputs),
        output:
            f"{STORE}/{kind.name}/{{sid}}/{MANIFEST}",
        params:
            cfg=stage_cfg,
        log:
            f"logs/{kind.name}/{{sid}}.log",
        benchmark:
            BENCHMARK.format(kind=kind.name, sid="{sid}")
        wildcard_constraints:
            sid=sid_pattern(kind.name),
        threads: stage_resource(kind.name, "threads", stage_threads)
        priority: stage_priority
        resources:
            mem_mb=stage_resource(kind.name, "mem_mb", stage_mem_mb),
            runtime=stage_resource(kind.name, "runtime", stage_runtime),
            gpu=stage_resource(kind.name, "gpu", stage_gpu),
            gpu_model=stage_resource(kind.name, "gpu_model", stage_gpu_model),
            device=stage_resource(kind.name, "device", stage_device),
            nodes=stage_resource(kind.name, "nodes", stage_nodes),
        localrule: kind.local
        conda:
            "../envs/martingale.yaml"
        script:
            "../scripts/stage.py"
