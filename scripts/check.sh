#!/usr/bin/env bash
# The tools that keep the house style, run by CI before the tests: ruff's lint and format
# check (pyproject.toml [tool.ruff]) and mypy ([tool.mypy]: strict on analysis/, rundir.py,
# scenario.py, records.py). Each prints what it found and the first failure stops the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
