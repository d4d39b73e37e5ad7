#!/usr/bin/env bash
# The image's entry points: `serve ...` (masdr serve), `train ...` (accelerate launch
# train/train_router.py, one process per visible GPU), or any other command as given.
set -euo pipefail
case "${1:-serve}" in
  serve) shift || true; exec masdr serve "$@" ;;
  train) shift; exec accelerate launch --num_processes "${NUM_PROCESSES:-1}" train/train_router.py "$@" ;;
  *) exec "$@" ;;
esac
