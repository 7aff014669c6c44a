#!/usr/bin/env bash
# Creates .venv (if missing) and installs unisent with its dev extras.
# torch==2.13.0 is installed FIRST, on its own: a bare `torch` requirement would pull a multi-GB CUDA
# build, while 2.13.0 resolves to the CPU wheel available locally (and satisfies unisent's range).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q "torch==2.13.0"
python -m pip install -q -e ".[dev]"
