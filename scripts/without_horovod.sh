#!/usr/bin/env bash
# CI's second step: pipeprof installed WITHOUT Horovod (pip install pipeprof, the cpu extra
# for TensorFlow, no horovod extra), in a venv of its own that is removed afterwards. It must
# run a compare under tf.distribute's MirroredStrategy (train.engine auto takes mirrored) and, where
# Open MPI is installed, MultiWorkerMirroredStrategy with mpirun starting its workers, and
# give the Horovod engine's one-line error naming what to install. pip's cache keeps this
# quick.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
work=$(mktemp -d -t pipeprof-no-horovod.XXXXXX)
trap 'rm -rf "$work"' EXIT
if [ -n "${PIPEPROF_CI_VENVS:-}" ]; then
  venv=$PIPEPROF_CI_VENVS/no-horovod  # installed by scripts/ci_venvs.sh, as CI runs it
else
  venv=$work/venv
  "$PY" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "./[cpu]" \
    > "$work/pip.log" 2>&1 || { tail -20 "$work/pip.log" >&2; exit 1; }
fi
if "$venv/bin/python" -c "import horovod" 2>/dev/null; then
  echo "without_horovod: Horovod is importable in the venv that must lack it" >&2; exit 1
fi
cat > "$work/s.toml" <<'TOML'
name = "no-horovod"
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
device = "emulated:10"
warmup_steps = 3
measure_steps = 12
TOML
export PIPEPROF_DATA_DIR="$work/data"
# no --engine: auto takes mirrored where TensorFlow is and Horovod is not, and says so first
"$venv/bin/pipeprof" compare "$work/s.toml" --np 1,2 \
  --out "$work/run" --no-report --no-dashboard > "$work/mirrored.log" 2>&1 \
  || { cat "$work/mirrored.log" >&2; exit 1; }
head -1 "$work/mirrored.log" | grep -q "engine mirrored (TensorFlow installed), launcher local" \
  || { echo "without_horovod: the first line did not say auto took mirrored:" >&2; head -3 "$work/mirrored.log" >&2; exit 1; }
"$venv/bin/python" - "$work/run/summary.csv" <<'PY'
import sys
import pandas as pd
s = pd.read_csv(sys.argv[1])
rows = sorted(zip(s["np"], s["variant"]))
assert rows == [(1, "real"), (1, "synthetic"), (2, "real"), (2, "synthetic")], rows
assert s["samples_per_s"].gt(0).all() and s[s["variant"] == "real"]["gap_pct"].notna().all()
PY
# MultiWorkerMirroredStrategy too: with no horovodrun, mpirun starts its workers (where Open
# MPI is installed, as `setup.sh test` installs it)
if command -v mpirun >/dev/null; then
  "$venv/bin/pipeprof" compare "$work/s.toml" --engine multi_worker_mirrored --np 1,2 \
    --out "$work/mwms" --no-report --no-dashboard > "$work/mwms.log" 2>&1 \
    || { cat "$work/mwms.log" >&2; exit 1; }
  head -1 "$work/mwms.log" | grep -q "launcher mpirun (train.engine multi_worker_mirrored with no Horovod installed" \
    || { echo "without_horovod: the first line did not say mpirun starts the workers:" >&2; head -3 "$work/mwms.log" >&2; exit 1; }
  "$venv/bin/python" - "$work/mwms/summary.csv" <<'PY'
import sys
import pandas as pd
s = pd.read_csv(sys.argv[1])
rows = sorted(zip(s["np"], s["variant"]))
assert rows == [(1, "real"), (1, "synthetic"), (2, "real"), (2, "synthetic")], rows
assert s["samples_per_s"].gt(0).all() and s[s["variant"] == "real"]["gap_pct"].notna().all()
PY
  mwms=", a multi_worker_mirrored compare at np 1, 2 under mpirun"
fi
set +e
"$venv/bin/pipeprof" compare "$work/s.toml" --engine horovod --np 1 --out "$work/refused" \
  --no-report --no-dashboard > "$work/horovod.out" 2> "$work/horovod.err"
code=$?
set -e
want="pipeprof: error: horovodrun not found: train.engine horovod needs Horovod: pip install 'pipeprof[horovod]' (bash scripts/setup.sh builds it), or use --engine mirrored"
if [ "$code" != 2 ] || [ "$(cat "$work/horovod.err")" != "$want" ] || [ -e "$work/refused" ]; then
  echo "without_horovod: the Horovod engine's error was not the one line expected (exit $code):" >&2
  cat "$work/horovod.err" >&2; exit 1
fi
echo "without Horovod: a mirrored compare at np 1, 2${mwms:-}, and the Horovod engine's one line: ok"
