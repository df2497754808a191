#!/usr/bin/env bash
# Install tensorbatch with its test dependencies into .venv and run the whole test suite:
# the tests under tests/ (slow ones included) and the doctests in tensorbatch/.
# Extra arguments are passed to the tests/ pytest call, e.g. `bash scripts/test.sh -x -k index`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
PY=.venv/bin/python

# torch first and alone, pinned, so pip takes the local CPU wheel instead of a CUDA build.
"$PY" -m pip install --disable-pip-version-check -q torch==2.13.0
# The optional backends too, so that CI skips nothing (h5py comes with the test extra).
"$PY" -m pip install --disable-pip-version-check -q -e '.[test,redis,tabular,safetensors]'
# TorchRL runs on tensorbatch through tensorbatch.compat (tests/compat/test_torchrl.py). Without its dependencies:
# they would pull the real tensordict's pins; its compiled extension does not load on torch 2.13, and it runs without.
"$PY" -m pip install --disable-pip-version-check -q --no-deps torchrl==0.14.1
"$PY" -m pip install --disable-pip-version-check -q cloudpickle packaging pyvers

# Any non-zero pytest exit fails the script, including 5 (no tests collected).
tests_rc=0
"$PY" -m pytest tests "$@" || tests_rc=$?
doctest_rc=0
"$PY" -m pytest --doctest-modules tensorbatch || doctest_rc=$?

echo "pytest tests: exit ${tests_rc}; pytest --doctest-modules tensorbatch: exit ${doctest_rc}"
if [ "$tests_rc" -ne 0 ]; then
    exit "$tests_rc"
fi
exit "$doctest_rc"
