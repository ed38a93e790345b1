#!/usr/bin/env bash
# The tests marked MARK in the venv VENV, none of which may be skipped there (scripts/keras3.sh
# and scripts/torch.sh run their stacks' tests this way): the files that hold the cores alone
# first, by themselves, in one process (beside xdist's other worker an alone test waits for
# that worker's whole file: the truth slice waited 705 s for test_keras3.py in the clean-clone
# CI run on c08cec3, 2026-11-28), then the other files on xdist's workers.
#
#   bash scripts/marked_tests.sh VENV MARK
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$1 mark=$2
files=$(grep -rlE "pytest\.mark\.$mark\b" tests --include='test_*.py') \
  || { echo "$mark: no test file in tests/ is marked $mark" >&2; exit 1; }
alone=$(grep -lE "pytest\.mark\.alone" $files || true)
shared=$(grep -LE "pytest\.mark\.alone" $files || true)
: > "$venv/pytest.log"
for part in alone shared; do
  [ -n "${!part}" ] || continue
  workers=$([ "$part" = alone ] && echo 0 || echo auto)
  # a failure ends the script here (set -e, with pipefail: pytest's status through tee)
  "$venv/bin/python" -m pytest -q -m "$mark" -p no:cacheprovider -rs -n "$workers" ${!part} 2>&1 \
    | tee -a "$venv/pytest.log"
done
if grep -qE "[0-9]+ skipped" "$venv/pytest.log"; then
  echo "$mark: a test was skipped in $venv, where every one must run (above)" >&2
  exit 1
fi
