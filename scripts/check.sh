#!/usr/bin/env bash
# Lint, types and tests: the one command to run before landing (CONTRIBUTING.md).
#   scripts/check.sh                      ruff (lint, format), mypy, then the whole suite (pytest -q -n 2)
#   scripts/check.sh tests/test_x.py -k y ruff, mypy, then only those tests
# Uses the checkout's .venv (the README's setup); PYTHON=... picks another interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's code, also in subprocesses
"$PY" -m ruff check triage_tui tests benchmarks scripts
"$PY" -m ruff format --check triage_tui tests benchmarks scripts
"$PY" -m mypy
if [ "$#" -eq 0 ]; then
    set -- -n 2
fi
"$PY" -m pytest -q "$@"
