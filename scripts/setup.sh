#!/usr/bin/env bash
# Creates .venv (if missing) and installs unisent with its dev extras, one line per step.
# torch==2.13.0 is installed FIRST, on its own: a bare `torch` requirement would pull a multi-GB CUDA
# build, while 2.13.0 resolves to the CPU wheel available locally (and satisfies unisent's range).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
START=$SECONDS
if [ ! -x .venv/bin/python ]; then
  echo "creating the virtual environment .venv..."
  "$PY" -m venv .venv
fi
. .venv/bin/activate
echo "upgrading pip..."
python -m pip install -q --upgrade pip
echo "installing torch 2.13.0 (CPU)..."
python -m pip install -q "torch==2.13.0"
echo "installing unisent and its dependencies..."
python -m pip install -q -e ".[dev]"
echo "done in $((SECONDS - START)) s: activate it with '. .venv/bin/activate', then 'unisent --help'"
