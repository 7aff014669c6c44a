#!/usr/bin/env bash
# Installs everything on a fresh machine (see setup.sh) and runs the test suite (no slow/GPU tests) in
# about 14 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
# one test process per core (pytest-xdist), each test file in one process (its module fixtures built once),
# one thread each; UNISENT_TEST_WORKERS=0 runs everything in this process. --durations: the slowest tests,
# to keep the default run under 15 minutes (mark a longer test `slow`)
WORKERS=${UNISENT_TEST_WORKERS:-$(python -c "import os; print(min(4, len(os.sched_getaffinity(0))))")}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
python -m pytest -n "$WORKERS" --dist loadfile --durations=15 "$@"
