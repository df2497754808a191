#!/usr/bin/env bash
# Install tensorbatch with its test dependencies into .venv and run every check CI runs, in phases:
#   venv, installs, ruff (lint and format check), mypy (strict, the package), tests (pytest tests, slow ones included), doctests.
# Each phase prints its name and then its duration. Extra arguments go to the tests/ pytest call, e.g.
# `bash scripts/test.sh -m "not slow"` (day-to-day subset) or `bash scripts/test.sh -x -k index`.
# The script fails when any phase fails; pytest exit code 5 (no tests collected) is a failure too.
# With CI=true (or TB_NEWEST_TORCH=1; TB_NEWEST_TORCH=0 skips it) a last phase, newest, runs the compile, export
# and vmap tests on the newest torch wheel (torch==2.14.1, a CUDA build: ~5.5 GB) in .venv-newest: about 4 minutes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SCRIPT_START=$SECONDS
echo "scripts/test.sh: the whole run takes about 8 minutes on 2 free cores (the tests, on two workers, are most of"
echo "it; the first run adds a few minutes of downloads; CI adds about 4 for torch 2.14.1);"
echo "\`bash scripts/test.sh -m \"not slow\"\` skips the slowest tests."

PHASE_NAME=""
PHASE_START=0
SUMMARY=()
phase_begin() {
    PHASE_NAME=$1
    PHASE_START=$SECONDS
    echo
    echo "==> ${PHASE_NAME}: $2"
}
phase_end() {  # phase_end EXIT_CODE
    local took=$((SECONDS - PHASE_START))
    local line
    line=$(printf '%-9s %4ds  exit %s' "$PHASE_NAME" "$took" "$1")
    SUMMARY+=("$line")
    echo "<== ${PHASE_NAME}: ${took}s (exit $1)"
}

phase_begin venv "create .venv if it is missing"
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
PY=.venv/bin/python
phase_end 0

phase_begin installs "torch, tensorbatch[test,redis,tabular,safetensors], torchrl (pip, quiet; first run: minutes)"
# torch first and alone, pinned, so pip takes the local CPU wheel instead of a CUDA build.
echo "    torch==2.13.0"
"$PY" -m pip install --disable-pip-version-check -q torch==2.13.0
# The optional backends too, so that CI skips nothing (h5py, ruff and mypy come with the test extra).
echo "    tensorbatch (editable) with the test, redis, tabular, safetensors and docs extras"
"$PY" -m pip install --disable-pip-version-check -q -e '.[test,redis,tabular,safetensors,docs]'
# TorchRL runs on tensorbatch through tensorbatch.compat (tests/compat/test_torchrl.py). Without its dependencies:
# they would pull the real tensordict's pins; its compiled extension does not load on torch 2.13, and it runs without.
echo "    torchrl==0.14.1 (without its dependencies) and the few it needs"
"$PY" -m pip install --disable-pip-version-check -q --no-deps torchrl==0.14.1
"$PY" -m pip install --disable-pip-version-check -q cloudpickle packaging pyvers
phase_end 0

# From here on a failing phase does not stop the others: one run reports every failure.
RUFF_PATHS=(tensorbatch tests benchmarks examples tools scripts)
phase_begin ruff "ruff check and ruff format --check: ${RUFF_PATHS[*]}"
ruff_rc=0
"$PY" -m ruff check "${RUFF_PATHS[@]}" || ruff_rc=$?
"$PY" -m ruff format --check "${RUFF_PATHS[@]}" || ruff_rc=$?
phase_end "$ruff_rc"

phase_begin mypy "python -m mypy tensorbatch (strict, configured in pyproject.toml)"
mypy_rc=0
"$PY" -m mypy tensorbatch || mypy_rc=$?
phase_end "$mypy_rc"

# two worker processes (pytest-xdist; TB_TEST_WORKERS=N for another count, 0 for none): ~6 minutes instead of ~11
WORKERS=${TB_TEST_WORKERS:-2}
phase_begin tests "pytest tests -n $WORKERS $*"
tests_rc=0
"$PY" -m pytest tests -n "$WORKERS" "$@" || tests_rc=$?
phase_end "$tests_rc"

phase_begin doctests "pytest --doctest-modules tensorbatch"
doctest_rc=0
"$PY" -m pytest --doctest-modules tensorbatch || doctest_rc=$?
phase_end "$doctest_rc"

newest_rc=0
if [ "${TB_NEWEST_TORCH:-}" = 1 ] || { [ "${CI:-}" = true ] && [ "${TB_NEWEST_TORCH:-}" != 0 ]; }; then
    phase_begin newest "torch==2.14.1 in .venv-newest: pytest tests/compile tests/test_vmap.py"
    NEWEST=.venv-newest/bin/python
    { [ -x "$NEWEST" ] || python3 -m venv .venv-newest; } \
        && "$NEWEST" -m pip install --disable-pip-version-check -q torch==2.14.1 numpy "pytest>=8" \
        && "$NEWEST" -m pip install --disable-pip-version-check -q --no-deps -e . \
        && "$NEWEST" -m pytest tests/compile tests/test_vmap.py -q -x -p no:cacheprovider || newest_rc=$?
    phase_end "$newest_rc"
fi

echo
echo "scripts/test.sh: phases (seconds, exit code); total $((SECONDS - SCRIPT_START))s"
for line in "${SUMMARY[@]}"; do
    echo "    $line"
done
for rc in "$ruff_rc" "$mypy_rc" "$tests_rc" "$doctest_rc" "$newest_rc"; do
    if [ "$rc" -ne 0 ]; then
        exit "$rc"
    fi
done
