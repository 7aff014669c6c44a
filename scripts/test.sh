#!/usr/bin/env bash
# Installs everything on a fresh machine (see setup.sh) and runs the test suite: both tiers, the default
# one and the integration one (subprocess CLI runs, kills and resumes, process groups, the SLURM simulation,
# the S3 server, the forked hostile corpus, study pages); no slow or GPU tests.
#   bash scripts/test.sh            the type check (basedpyright over unisent/) and both tiers, as CI runs them
#   bash scripts/test.sh --fast     the default tier only: what a contributor runs after each change
#   bash scripts/test.sh ARGS       any other arguments go to pytest (e.g. tests/test_cli.py -k resume)
set -euo pipefail
cd "$(dirname "$0")/.."
TIER=()
ARGS=()
SELECTED=0
for arg in "$@"; do
  if [ "$arg" = "--fast" ]; then
    TIER=(-m "not slow and not gpu and not integration")
  else
    ARGS+=("$arg")
    case "$arg" in -*) ;; *) SELECTED=1 ;; esac  # a test path or expression: no type check
  fi
done
bash scripts/setup.sh
. .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
# one test process per core (pytest-xdist), each test file in one process (its module fixtures built once),
# one thread each; UNISENT_TEST_WORKERS=0 runs everything in this process. --durations: the slowest tests
# (a test over a few seconds belongs in the integration tier, `pytest.mark.integration`, or `slow`)
WORKERS=${UNISENT_TEST_WORKERS:-$(python -c "import os; print(min(4, len(os.sched_getaffinity(0))))")}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
if [ ${#TIER[@]} -eq 0 ] && [ "$SELECTED" = 0 ]; then
  # the whole suite (CI): the type check first, pyproject's [tool.basedpyright] (about 1 min on 2 cores)
  echo "type check: basedpyright over unisent/..."
  basedpyright --project pyproject.toml  # explicit: a pyrightconfig.json in a parent folder would win
fi
python -m pytest -n "$WORKERS" --dist loadfile --durations=15 ${TIER[@]+"${TIER[@]}"} ${ARGS[@]+"${ARGS[@]}"}
