#!/usr/bin/env bash
# Lint, types and tests: the one command to run before landing (CONTRIBUTING.md).
#   scripts/check.sh                      ruff (lint, format), mypy, then the whole suite (pytest -q -n 2 --dist worksteal)
#   scripts/check.sh tests/test_x.py -k y ruff, mypy, then only those tests
# Uses the checkout's .venv (the README's setup); PYTHON=... picks another interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's code, also in subprocesses
# Each module is byte-compiled when first imported and the bytecode kept (the README's install
# skips compiling the ~20 000 modules the tests never import). Where PYTHONDONTWRITEBYTECODE is set,
# as in many container images, every test process would compile torch's modules again: measured on
# an idle 2-core machine, the suite took 694 CPU-s (7:39) that way and 563 CPU-s (5:59) writing them once.
unset PYTHONDONTWRITEBYTECODE
# The property tests draw the same examples on every run of this script (tests/conftest.py), so a
# red run is a change's, not a draw's; `pytest` alone keeps drawing new ones.
export TRIAGE_HYPOTHESIS_PROFILE=${TRIAGE_HYPOTHESIS_PROFILE:-repeatable}
"$PY" -m ruff check triage_tui tests benchmarks scripts
"$PY" -m ruff format --check triage_tui tests benchmarks scripts
"$PY" -m mypy
if [ "$#" -eq 0 ]; then
    # worksteal: a worker that runs out of tests takes the other's last ones, so the slow tests
    # (sorted first, tests/conftest.py) never leave one core idle at the end
    set -- -n 2 --dist worksteal
fi
"$PY" -m pytest -q "$@"
