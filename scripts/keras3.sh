#!/usr/bin/env bash
# CI's Keras 3 step: pipeprof on where distributed Keras runs now, installed with pip in venvs
# of their own. The tests marked keras3 run in .venv-keras3 (pip install -e '.[jax,test]':
# Keras 3 on JAX, with TensorFlow for tf.data and for Keras 3 on TensorFlow), kept between
# runs; none of them may be skipped there. Then '.[tensorflow]' alone goes into a new venv,
# which is removed afterwards, and runs a compare. Each venv's versions are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
pip_quiet() {  # pip's output kept in a log, shown only when it fails
  local venv=$1; shift
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@" > "$venv/pip.log" 2>&1 \
    || { tail -20 "$venv/pip.log" >&2; exit 1; }
}
versions() {  # the stack a venv holds; numpy 2 and Keras 3.11 at least, or fail
  "$1/bin/python" - "$2" <<'PY'
import sys
from importlib import metadata

got = {}
for name in ("keras", "jax", "tensorflow-cpu", "numpy"):
    try:
        got[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        pass
print(f"keras3 ({sys.argv[1]}): " + ", ".join(f"{k} {v}" for k, v in got.items()))
major, minor = (int(p) for p in got["keras"].split(".")[:2])
assert (major, minor) >= (3, 11), f"Keras {got['keras']}: 3.11 or later expected"
assert int(got["numpy"].split(".")[0]) >= 2, f"numpy {got['numpy']}: 2 or later expected"
PY
}

venv=.venv-keras3
[ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
pip_quiet "$venv" -e '.[jax,test]'
versions "$venv" "pip install '.[jax]'"
bash scripts/marked_tests.sh "$venv" keras3

work=$(mktemp -d -t pipeprof-keras3-tf.XXXXXX)
trap 'rm -rf "$work"' EXIT
if [ -n "${PIPEPROF_CI_VENVS:-}" ]; then
  tfvenv=$PIPEPROF_CI_VENVS/keras3-tf  # installed by scripts/ci_venvs.sh, as CI runs it
else
  tfvenv=$work/venv
  "$PY" -m venv "$tfvenv"
  pip_quiet "$tfvenv" '.[tensorflow]'
fi
versions "$tfvenv" "pip install '.[tensorflow]'"
cat > "$work/s.toml" <<'TOML'
name = "keras3-tf"
[data]
source = "generated"
image_size = 32
num_classes = 3
[data.generate]
images = 90
size = 40
classes = 3
[train]
batch_size = 8
warmup_steps = 3
measure_steps = 12
TOML
PIPEPROF_DATA_DIR="$work/data" "$tfvenv/bin/pipeprof" compare "$work/s.toml" --np 1,2 \
  --out "$work/run" --no-report --no-dashboard > "$work/compare.log" 2>&1 \
  || { cat "$work/compare.log" >&2; exit 1; }
head -1 "$work/compare.log" | grep -q "engine mirrored (TensorFlow installed)" \
  || { echo "keras3: auto did not take mirrored on the TensorFlow stack:" >&2; head -3 "$work/compare.log" >&2; exit 1; }
"$tfvenv/bin/python" - "$work/run" <<'PY'
import json, sys
import pandas as pd
run = sys.argv[1]
s = pd.read_csv(f"{run}/summary.csv")
assert sorted(zip(s["np"], s["variant"])) == [(1, "real"), (1, "synthetic"), (2, "real"), (2, "synthetic")]
assert json.load(open(f"{run}/model.json"))["framework"] == "keras3"
PY
echo "keras3: the tests marked keras3 in '.[jax]', and a compare of '.[tensorflow]' alone: ok"
