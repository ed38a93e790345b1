#!/usr/bin/env bash
# The tests, as CI runs them (.ci/run calls this): set up .venv with the programs the tests
# drive for real (scripts/setup.sh test), check lint, format and types (scripts/check.sh), run
# the suite, then install pipeprof without Horovod in a venv of its own and run a compare under
# tf.distribute there (scripts/without_horovod.sh), the Keras 3 stack's tests in venvs of its
# own (scripts/keras3.sh) and the PyTorch stack's in one without TensorFlow (scripts/torch.sh).
# Those venvs install beside .venv's set-up (scripts/ci_venvs.sh). Each step's time is printed.
# docs/development.md says what each needs.
#
#   bash scripts/test.sh                 everything, as CI
#   bash scripts/test.sh -m "not horovod"  the fast tier only (no launches; under a minute)
set -euo pipefail
cd "$(dirname "$0")/.."
# Python keeps compiled modules (ignored __pycache__ folders): every test process and every rank
# imports pipeprof, and each xdist worker rewrites the test modules' asserts; without the cache
# each does it anew (an environment that sets PYTHONDONTWRITEBYTECODE would make it so)
unset PYTHONDONTWRITEBYTECODE
if [ $# -eq 0 ]; then
  # the other stacks' venvs install while .venv does (scripts/ci_venvs.sh), and are ready
  # before the suite starts: it measures, and must have the cores to itself
  PIPEPROF_CI_VENVS=$(mktemp -d -t pipeprof-ci-venvs.XXXXXX)
  export PIPEPROF_CI_VENVS
  trap 'rm -rf "$PIPEPROF_CI_VENVS"' EXIT
  bash scripts/ci_venvs.sh wheel "$PIPEPROF_CI_VENVS"
  bash scripts/ci_venvs.sh install "$PIPEPROF_CI_VENVS" &
  venvs=$!
fi
timed() {  # a step, and how long it took (for docs/validation.md's record of CI's time)
  local started=$SECONDS
  "$@"
  echo "test.sh: $* took $((SECONDS - started)) s" >&2
}
timed bash scripts/setup.sh test
timed bash scripts/check.sh
[ -z "${venvs:-}" ] || timed wait "$venvs"
timed .venv/bin/python -m pytest -q "$@"
if [ $# -eq 0 ]; then
  timed bash scripts/without_horovod.sh
  timed bash scripts/keras3.sh
  timed bash scripts/torch.sh
fi
