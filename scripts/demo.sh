#!/usr/bin/env bash
# Install tensorbatch into .venv and run examples/demo.py.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
PY=.venv/bin/python

# torch first and alone, pinned, so pip takes the local CPU wheel instead of a CUDA build.
"$PY" -m pip install --disable-pip-version-check -q torch==2.13.0
"$PY" -m pip install --disable-pip-version-check -q -e .

"$PY" examples/demo.py
