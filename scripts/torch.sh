#!/usr/bin/env bash
# The PyTorch stack's step: pipeprof's ddp engine and DataLoader pipelines in a venv of their
# own, holding torch and no TensorFlow. The CPU build of torch is installed first, pinned (a
# range would let pip take a newer CUDA build of several GB), then pipeprof with its torch
# extra, Keras 3 (its fit on the torch backend), Dask (--launcher dask) and Grain with JAX (Keras
# 3 on JAX fed by Grain: the stack of a GPU host without TensorFlow); the tests marked torch run
# there, and none of them may be skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
TORCH=${PIPEPROF_TORCH:-torch==2.13.0}
venv=.venv-torch
[ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$TORCH" -e '.[torch,keras-torch,dask,grain,test]' \
  > "$venv/pip.log" 2>&1 || { tail -20 "$venv/pip.log" >&2; exit 1; }
KERAS_BACKEND=torch "$venv/bin/python" -c "import torch, numpy, keras; print(f'torch ({torch.__version__}), keras {keras.__version__}, numpy {numpy.__version__}')"
bash scripts/marked_tests.sh "$venv" torch
