#!/usr/bin/env bash
# Set up .venv with TensorFlow 2.15 (Keras 2), Horovod 0.28.1 built from source, pipeprof and
# its test tools. Safe to run again: it does nothing when the environment is already complete.
#
#   bash scripts/setup.sh test   also installs the programs the tests drive for real: a
#                                Prometheus server, a headless Chromium, sshd and Open MPI
#                                (Debian's packages; as root, with apt-get; otherwise it says
#                                what to install), and builds Horovod with MPI as well as Gloo
#                                (the cluster tests launch with --mpi); the wheel is kept in
#                                ~/.cache/pipeprof/wheels, apart from pip's cache, whose key
#                                does not know the build flags
#
#   PIPEPROF_TF   the TensorFlow requirement (default tensorflow-cpu==2.15.1; on a GPU
#                 cluster: 'tensorflow[and-cuda]==2.15.1')
#   HOROVOD_*     Horovod build flags; defaults build TensorFlow + Gloo, no MPI. On a GPU
#                 cluster set HOROVOD_GPU_OPERATIONS=NCCL and HOROVOD_WITH_MPI=1 (see README).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      PY=$cand; break
    fi
  done
fi
[ -n "$PY" ] || { echo "setup: Python 3.11 is required (TensorFlow 2.15 + Horovod 0.28.1); set PYTHON=/path/to/python3.11" >&2; exit 2; }

if [ "${1:-}" = test ]; then
  missing=()
  command -v prometheus >/dev/null || missing+=(prometheus)
  command -v chromium >/dev/null || command -v chromium-browser >/dev/null || missing+=(chromium)
  [ -x /usr/sbin/sshd ] || missing+=(openssh-server)  # the cluster tests' hosts (never started as a service)
  { command -v mpirun >/dev/null && command -v mpicc >/dev/null; } \
    || missing+=(openmpi-bin libopenmpi-dev)  # Horovod's MPI controller, built for the cluster tests
  for p in slurmctld slurmd srun munged; do  # the Slurm the cluster tests start on their hosts
    command -v "$p" >/dev/null || { missing+=(slurmctld slurmd slurm-client munge); break; }
  done
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "setup: installing the test tools: ${missing[*]} (Debian packages)" >&2
      apt-get update -qq >/dev/null
      # no services: the tests start their own Prometheus on loopback
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d.pipeprof && chmod +x /usr/sbin/policy-rc.d.pipeprof
      [ -e /usr/sbin/policy-rc.d ] || cp /usr/sbin/policy-rc.d.pipeprof /usr/sbin/policy-rc.d
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
      cmp -s /usr/sbin/policy-rc.d /usr/sbin/policy-rc.d.pipeprof && rm -f /usr/sbin/policy-rc.d
      rm -f /usr/sbin/policy-rc.d.pipeprof
    else
      echo "setup: the tests need ${missing[*]}: install them (e.g. sudo apt-get install ${missing[*]})" >&2
    fi
  fi
fi

TF_REQ=${PIPEPROF_TF:-tensorflow-cpu==2.15.1}
stamp_want=$(cat pyproject.toml scripts/setup.sh | sha1sum | cut -c1-16)-$TF_REQ
# the tests need Horovod's MPI controller as well as Gloo (the user's set-up: Gloo alone)
want_mpi=0
[ "${1:-}" = test ] && command -v mpicc >/dev/null && want_mpi=1
has_mpi() { .venv/bin/python -c 'import horovod.tensorflow as h, sys; sys.exit(not h.mpi_built())' 2>/dev/null; }
# one import of TensorFlow says whether anything is left to do
if [ -f .venv/.pipeprof-setup ] && [ "$(cat .venv/.pipeprof-setup)" = "$stamp_want" ] \
   && .venv/bin/python -c "import horovod.tensorflow as h, pipeprof, pytest, xdist, mypy, sys; sys.exit($want_mpi and not h.mpi_built())" 2>/dev/null \
   && [ -x .venv/bin/ruff ]; then
  exit 0
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip=(.venv/bin/python -m pip --disable-pip-version-check)
echo "setup: installing TensorFlow ($TF_REQ) and the build tools Horovod needs" >&2
"${pip[@]}" install -q --upgrade pip 'setuptools<70' wheel 'cmake<4'
"${pip[@]}" install -q "$TF_REQ" 'numpy<2' 'pandas>=2.0,<2.3' 'scipy>=1.10,<1.14' 'nvidia-ml-py>=12' 'psutil>=5.9' 'rich>=13' 'pytest>=7' 'pytest-xdist>=3.6' \
  'matplotlib>=3.7,<3.10' 'prometheus-client>=0.17' 'jsonschema>=4' 'ruff==0.8.4' 'mypy==1.13.0'

if [ $want_mpi = 1 ] && ! has_mpi; then
  # the wheel's key: everything its build depends on that can differ (Python, the TensorFlow
  # asked for, the GPU operations), so no other build's wheel is taken for it
  pyver=$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  key=$(printf '%s' "py$pyver-$TF_REQ-${HOROVOD_GPU_OPERATIONS:-cpu}" | tr -c 'A-Za-z0-9.=_-' '_')
  wheels=${XDG_CACHE_HOME:-$HOME/.cache}/pipeprof/wheels/horovod-0.28.1-gloo-mpi-$key
  if ! ls "$wheels"/horovod-0.28.1-*.whl >/dev/null 2>&1; then
    echo "setup: building Horovod 0.28.1 with MPI and Gloo for the tests (about 5 minutes on 2 cores; kept in $wheels)" >&2
    mkdir -p "$wheels"
    HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
      "${pip[@]}" wheel -q --no-deps --no-build-isolation --no-cache-dir -w "$wheels" horovod==0.28.1
  fi
  "${pip[@]}" install -q --force-reinstall --no-deps "$wheels"/horovod-0.28.1-*.whl
fi

if ! .venv/bin/python -c 'import horovod.tensorflow' 2>/dev/null; then
  echo "setup: building Horovod 0.28.1 from source (about 4 minutes on 2 cores; cached by pip afterwards)" >&2
  export HOROVOD_WITH_TENSORFLOW=${HOROVOD_WITH_TENSORFLOW:-1}
  export HOROVOD_WITH_GLOO=${HOROVOD_WITH_GLOO:-1}
  export HOROVOD_WITHOUT_PYTORCH=${HOROVOD_WITHOUT_PYTORCH:-1}
  export HOROVOD_WITHOUT_MXNET=${HOROVOD_WITHOUT_MXNET:-1}
  [ "${HOROVOD_WITH_MPI:-0}" = 1 ] || export HOROVOD_WITHOUT_MPI=1
  # --no-build-isolation: the build must see the TensorFlow installed above
  "${pip[@]}" install -q --no-build-isolation horovod==0.28.1
fi

"${pip[@]}" install -q --no-build-isolation -e '.[test,horovod]'
echo "$stamp_want" > .venv/.pipeprof-setup
echo "setup: ready (.venv)" >&2
