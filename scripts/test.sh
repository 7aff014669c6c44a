#!/usr/bin/env bash
# Installs everything on a fresh machine (see setup.sh) and runs the test suite (no slow/GPU tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
python -m pytest "$@"
