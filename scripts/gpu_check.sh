#!/usr/bin/env bash
# The embedded model's train stage on CUDA with NCCL (scripts/gpu_check.py): one rank, then DDP and
# FSDP2 on up to 2 GPUs through torchrun. On a machine with torch, transformers, peft and this
# project importable (make install, or PYTHONPATH=src with the packages installed):
#   bash scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" WANDB_MODE=disabled
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
exec "$PY" scripts/gpu_check.py
