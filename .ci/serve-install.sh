#!/usr/bin/env bash
# A serving install is small: `pip install ".[serve]"` in a fresh venv brings no training stack
# (peft, accelerate, wandb), no plotting (matplotlib) and no local LLM server (xllamacpp), and it
# routes with an exported router (trained here with the full install).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --upgrade pip
"$work/venv/bin/python" -m pip install -q "${TORCH:-torch==2.13.0}"
"$work/venv/bin/python" -m pip install -q ".[serve]"
"$work/venv/bin/python" - <<'PY'
import importlib.util, sys
present = [m for m in ("peft", "accelerate", "wandb", "matplotlib", "xllamacpp") if importlib.util.find_spec(m)]
sys.exit(f"a serving install brought {present}" if present else 0)
PY
export HF_HUB_OFFLINE=1
.venv/bin/masdr data prepare bbc --out "$work/bbc" --max-docs-per-scope 10
.venv/bin/masdr train --taxonomy "$work/bbc/taxonomy.yaml" --train "$work/bbc/train.jsonl" --out "$work/router" \
    --set epochs=1 --set regime=holdout --set min_steps=0 --set keep_probe=false --set progress=false
cd "$work"  # the installed package, not the source tree
"$work/venv/bin/masdr" route --router "$work/router" "The striker scored twice in the cup final"
"$work/venv/bin/masdr" serve --help > /dev/null
echo "serving install: ok ($(du -sh "$work/venv" | cut -f1))"
