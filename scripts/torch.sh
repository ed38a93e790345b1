#!/usr/bin/env bash
# The PyTorch stack's step: pipeprof's ddp engine and DataLoader pipelines in a venv of their
# own, holding torch and no TensorFlow. The CPU build of torch is installed first, pinned (a
# range would let pip take a newer CUDA build of several GB), then pipeprof with its torch
# extra; the tests marked torch run there, and none of them may be skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
TORCH=${PIPEPROF_TORCH:-torch==2.13.0}
venv=.venv-torch
[ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$TORCH" -e '.[torch,test]' \
  > "$venv/pip.log" 2>&1 || { tail -20 "$venv/pip.log" >&2; exit 1; }
"$venv/bin/python" -c "import torch, numpy; print(f'torch ({torch.__version__}), numpy {numpy.__version__}')"
files=$(grep -rlE "pytest\.mark\.torch" tests --include='test_*.py')
# as scripts/keras3.sh: the files that hold the cores alone first, in one process, then the rest
alone=$(grep -lE "pytest\.mark\.alone" $files || true)
shared=$(grep -LE "pytest\.mark\.alone" $files || true)
: > "$venv/pytest.log"
for part in alone shared; do
  [ -n "${!part}" ] || continue
  workers=$([ "$part" = alone ] && echo 0 || echo auto)
  "$venv/bin/python" -m pytest -q -m torch -p no:cacheprovider -rs -n "$workers" ${!part} 2>&1 \
    | tee -a "$venv/pytest.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
done
if grep -qE "[0-9]+ skipped" "$venv/pytest.log"; then
  echo "torch: a test was skipped in the torch venv (above)" >&2
  exit 1
fi
