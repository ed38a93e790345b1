"""The maintained benchmarks: scripts that print figures measured side by side, each for a
target that docs/validation.md states with its latest figure.

Every benchmark has a smoke mode, ``--smoke``: its real code path at tiny sizes, ending with a
check of the figures it printed (exit 1, one line, where one is missing or absurd). CI runs
every smoke mode: those that start no ranks in the fast tier (``tests/unit/test_benchmarks.py``)
but for the two that run TensorFlow pipelines for seconds of CPU, those and the ones that start
ranks in the slow tier (``tests/integration/test_benchmark_smokes.py``). A smoke mode says the benchmark still runs, never whether
its target is met: that takes the full run, on a quiet machine.

``BENCHMARKS`` lists them, ``HELPERS`` the modules they share or run; a file of benchmarks/ in
neither fails the test.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Benchmark:
    path: str  # under benchmarks/
    launches: bool  # starts ranks (horovodrun, a compare): the slow tier
    # starts no ranks but runs TensorFlow pipelines for seconds of CPU: the slow tier too, as
    # on 2 cores the fast tier cannot hold them under its minute (docs/development.md)
    heavy: bool = False
    # the smoke run's arguments besides ``--smoke``: ``{out}`` is a new folder for it to write
    # in, ``{bench}`` the benchmarks/ folder
    args: tuple[str, ...] = ()
    # the venv whose tier runs its smoke mode, where not the main one: "torch", the torch
    # venv (scripts/torch.sh), which holds PyTorch, JAX and Grain and no TensorFlow
    venv: str = ""


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("synthetic_overhead.py", launches=True),
    Benchmark("hook_overhead.py", launches=True),
    Benchmark("telemetry_overhead.py", launches=True),
    Benchmark("report_cost.py", launches=True),
    Benchmark("engines.py", launches=True),
    Benchmark("truth/run.py", launches=True, args=("--keep", "--out", "{out}")),
    # the fits read a kept truth run: the one truth/fixtures/ holds
    Benchmark("truth/hop_fit.py", launches=False, args=("{bench}/truth/fixtures/kept-smoke",)),
    Benchmark("truth/busy_fit.py", launches=False, args=("{bench}/truth/fixtures/kept-smoke",)),
    Benchmark("truth/truth_spread.py", launches=False),
    Benchmark("collector.py", launches=False),
    Benchmark("tune_vs_grid.py", launches=False, heavy=True),
    Benchmark("bad_file_checks.py", launches=False, heavy=True),
    Benchmark("suite_cost.py", launches=False),
    Benchmark("nvml_real_gpu.py", launches=False, args=("--out", "{out}")),
    Benchmark("gpu_check.py", launches=True, args=("--out", "{out}"), venv="torch"),
)

HELPERS: tuple[str, ...] = (
    "__init__.py",
    "harness.py",  # paths, runs, results, rounds
    "timeslice.py",  # two runs taking turns on the machine
    "plain_keras_synthetic.py",  # synthetic_overhead's plain side, run under horovodrun
    "plain_keras3_synthetic.py",  # its plain side on the Keras 3 engines
    "plain_ddp_synthetic.py",  # and on PyTorch DDP
    "truth/__init__.py",
    "truth/inject.py",  # the truth suite's injected costs
    "truth/reference.py",  # the truth suite's plain loop: under horovodrun, or one engine process
)
