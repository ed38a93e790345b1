"""The maintained benchmarks (benchmarks/__init__.py) still run: each file of benchmarks/ is a
listed benchmark or helper, each benchmark has a smoke mode, and the smoke modes of those that
start no ranks and run no TensorFlow pipelines run here, in the fast tier
(tests/integration/test_benchmark_smokes.py runs the others). A smoke run checks its own
printed figures and exits 1 naming what is missing."""

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import BENCHMARKS, HELPERS, Benchmark

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"


def run_smoke(bench: Benchmark, tmp_path: Path) -> Path:
    """``python benchmarks/PATH --smoke ARGS`` to its end, exit 0; the folder ``{out}`` named."""
    out = tmp_path / bench.path.replace("/", "-").removesuffix(".py")
    args = [a.format(out=out, bench=BENCH) for a in bench.args]
    proc = subprocess.run(
        [sys.executable, str(BENCH / bench.path), "--smoke", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
    assert proc.returncode == 0, f"{bench.path} --smoke exited {proc.returncode}:\n{tail}"
    return out


def test_every_file_of_benchmarks_is_a_listed_benchmark_or_helper():
    files = {p.relative_to(BENCH).as_posix() for p in BENCH.rglob("*.py")}
    listed = {b.path for b in BENCHMARKS}
    assert not (files - listed - set(HELPERS)), (
        "a file in benchmarks/ that is neither a benchmark with a smoke mode (BENCHMARKS) nor a "
        f"helper (HELPERS): {sorted(files - listed - set(HELPERS))}"
    )
    assert not (listed | set(HELPERS)) - files, "listed but gone"
    assert not listed & set(HELPERS)


def test_every_benchmark_has_a_smoke_mode():
    missing = [b.path for b in BENCHMARKS if "--smoke" not in (BENCH / b.path).read_text()]
    assert not missing, f"benchmarks without a --smoke option: {missing}"


FAST = [b for b in BENCHMARKS if not b.launches and not b.heavy]


@pytest.mark.parametrize("bench", FAST, ids=[b.path for b in FAST])
def test_smoke_mode_of_a_benchmark_that_starts_no_ranks(bench, tmp_path, monkeypatch):
    monkeypatch.setenv("PIPEPROF_DATA_DIR", str(tmp_path / "data"))
    run_smoke(bench, tmp_path)
