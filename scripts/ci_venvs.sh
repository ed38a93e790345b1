#!/usr/bin/env bash
# CI's other venvs, installed side by side while scripts/setup.sh makes .venv (scripts/test.sh
# starts this in the background and waits for it before the suite): pip spends most of an
# install on one core and the disk, so the four installs take about 3 minutes together, not
# 5 one after the other (175 s against 301 s on the 2-core development machine, 2026-11-29).
#
#   bash scripts/ci_venvs.sh wheel DIR     pipeprof built once, into DIR/dist
#   bash scripts/ci_venvs.sh install DIR   the venvs, from that wheel, side by side
#
# The wheel is built before anything else starts (setuptools writes its build folders in the
# source tree, which two builds at once, or setup.sh's editable install, would share); each
# venv then takes pipeprof from it with its extras:
#   DIR/no-horovod   '[cpu]'          scripts/without_horovod.sh takes it (PIPEPROF_CI_VENVS=DIR)
#   DIR/keras3-tf    '[tensorflow]'   scripts/keras3.sh's compare of '.[tensorflow]' alone
#   .venv-keras3     '[jax,test]'     scripts/keras3.sh reinstalls pipeprof there editable
#   .venv-torch      torch's CPU build and '[torch,keras-torch,dask,grain,test]'  (likewise scripts/torch.sh)
# Each install's output is kept in DIR/NAME.log and shown when it fails.
set -euo pipefail
cd "$(dirname "$0")/.."
step=$1 dir=$2
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
TORCH=${PIPEPROF_TORCH:-torch==2.13.0}
if [ "$step" = wheel ]; then
  mkdir -p "$dir"
  "$PY" -m venv "$dir/build"
  "$dir/build/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps -w "$dir/dist" . \
    > "$dir/build.log" 2>&1 || { tail -20 "$dir/build.log" >&2; exit 1; }
  exit 0
fi
[ "$step" = install ] || { echo "ci_venvs: $step: expected wheel or install" >&2; exit 2; }
wheel=$(ls "$dir"/dist/pipeprof-*.whl)

install() {  # install VENV LOG PIP-ARGS...: a venv (made where missing) and what it holds
  local venv=$1 log=$2; shift 2
  { [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"; } > "$log" 2>&1 \
    && "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@" >> "$log" 2>&1
}

pids=() names=()
start() { install "$@" & pids+=($!); names+=("$2"); }
start "$dir/no-horovod" "$dir/no-horovod.log" "pipeprof[cpu] @ file://$wheel"
start "$dir/keras3-tf" "$dir/keras3-tf.log" "pipeprof[tensorflow] @ file://$wheel"
start .venv-keras3 "$dir/keras3.log" "pipeprof[jax,test] @ file://$wheel"
start .venv-torch "$dir/torch.log" "$TORCH" "pipeprof[torch,keras-torch,dask,grain,test] @ file://$wheel"
failed=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "ci_venvs: the install logged in ${names[$i]} failed:" >&2
    tail -20 "${names[$i]}" >&2
    failed=1
  fi
done
exit $failed
