#!/usr/bin/env bash
# The GPU check (benchmarks/gpu_check.py) on a GPU host that has Python 3.12 with PyTorch, JAX,
# pandas, rich, psutil, matplotlib, nvidia-ml-py and prometheus-client, but neither TensorFlow
# nor Keras, Grain or pipeprof, and no package index:
#
#   bash scripts/gpu_check.sh wheels [PYVER]   here: pipeprof's wheel, and Keras's, Grain's and
#                                              TensorBoard's (event files) for Python PYVER
#                                              (3.12), with the dependencies such a host lacks,
#                                              into .gpu-wheels/ (git ignores it; carry it)
#   bash scripts/gpu_check.sh run OUT [ARGS]   there: a venv that sees the host's own packages,
#                                              the wheels installed into it from .gpu-wheels/
#                                              alone, then the check, its run directories in OUT
#                                              (ARGS: more of gpu_check.py's, e.g. --smoke)
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=.gpu-wheels
case "${1:-}" in
  wheels)
    pyver=${2:-3.12}
    rm -rf "$wheels" && mkdir -p "$wheels"
    python3 -m pip wheel -q --no-deps -w "$wheels" . >/dev/null
    python3 -m pip download -q --only-binary=:all: --python-version "$pyver" \
      --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any \
      -d "$wheels" 'keras>=3.11' 'grain>=0.2.15' 'tensorboard>=2.15'
    # what the host has already (PyTorch's and JAX's stacks, and pipeprof's other needs)
    for have in numpy jax jaxlib ml_dtypes scipy opt_einsum pandas matplotlib rich pygments \
        markdown_it_py mdurl psutil prometheus_client nvidia_ml_py packaging typing_extensions \
        six python_dateutil pytz tzdata pillow fonttools kiwisolver pyparsing cycler contourpy \
        setuptools filelock fsspec jinja2 markupsafe; do
      rm -f "$wheels"/"$have"-[0-9]*.whl
    done
    echo "gpu_check: $(ls "$wheels" | wc -l) wheels, $(du -sh "$wheels" | cut -f1), in $wheels" ;;
  run)
    out=${2:?gpu_check.sh run OUT: a new folder for the run directories}
    shift 2
    [ -d "$wheels" ] || { echo "gpu_check: no $wheels here: make it with 'gpu_check.sh wheels'" >&2; exit 2; }
    venv=$(mktemp -d -t pipeprof-gpu-check.XXXXXX)
    trap 'rm -rf "$venv"' EXIT
    python3 -m venv --system-site-packages "$venv"
    "$venv/bin/python" -m pip install -q --no-index --find-links "$wheels" pipeprof keras grain
    "$venv/bin/python" -c "import torch, jax, keras, grain; print(f'torch {torch.__version__} (CUDA {torch.cuda.is_available()}), jax {jax.__version__} {jax.devices()}, keras {keras.__version__}')"
    "$venv/bin/python" benchmarks/gpu_check.py --out "$out" "$@" ;;
  *)
    echo "usage: gpu_check.sh wheels [PYVER] | run OUT [ARGS]" >&2
    exit 2 ;;
esac
