# martingale: one-knob runs (conf/runs/*.yaml) -> cached stages (results/_store/<kind>/<id>/)
# -> results/<run-id>/eval.json -> runs.json. Targets are decided by named functions in
# workflow/rules/common.smk; the plan (every run's stages, content-addressed) is built once there.
from snakemake.utils import min_version

min_version("9.0")


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/stages.smk"
include: "workflow/rules/aggregate.smk"


rule all:
    input:
        all_targets,
    default_target: True
