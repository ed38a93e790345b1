#!/usr/bin/env bash
# The tests, as CI runs them (.ci/run calls this): set up .venv with the programs the tests
# drive for real (scripts/setup.sh test), check lint, format and types (scripts/check.sh), run
# the suite, then install pipeprof without Horovod in a venv of its own and run a compare under
# tf.distribute there (scripts/without_horovod.sh), the Keras 3 stack's tests in venvs of its
# own (scripts/keras3.sh) and the PyTorch stack's in one without TensorFlow (scripts/torch.sh).
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
bash scripts/setup.sh test
bash scripts/check.sh
.venv/bin/python -m pytest -q "$@"
if [ $# -eq 0 ]; then
  bash scripts/without_horovod.sh
  bash scripts/keras3.sh
  bash scripts/torch.sh
fi
