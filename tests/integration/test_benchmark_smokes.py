"""The smoke modes of the benchmarks that start ranks (horovodrun, compare), and of the two that
run TensorFlow pipelines for seconds of CPU: each runs its real path at tiny sizes and checks
the figures it printed (benchmarks/__init__.py). The truth suite's is its CI slice, whose
verdicts test_truth_slice.py asks for too: it runs there."""

import pytest

from benchmarks import BENCHMARKS
from tests.unit.test_benchmarks import run_smoke

pytestmark = pytest.mark.horovod

# the truth suite's runs in test_truth_slice.py; a benchmark of another venv, in its tier's tests
SLOW = [
    b for b in BENCHMARKS if (b.launches or b.heavy) and b.path != "truth/run.py" and not b.venv
]


@pytest.mark.parametrize("bench", SLOW, ids=[b.path for b in SLOW])
def test_smoke_mode_of_a_slow_benchmark(bench, tmp_path, data_cache_dir, monkeypatch):
    monkeypatch.setenv("PIPEPROF_DATA_DIR", str(data_cache_dir))
    run_smoke(bench, tmp_path)
