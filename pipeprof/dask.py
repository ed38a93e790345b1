"""pipeprof from Python, for a user who already holds a Dask ``Client``: what
dask_pytorch_ddp's ``dispatch.run(client, train)`` did for training, ``compare`` does for the
measurement, on that client's cluster.

    import pipeprof.dask
    summary = pipeprof.dask.compare(client, "quickstart", "--np", "1,2")
    summary = pipeprof.dask.compare(client, "--np", "1,2", "--", "python", "train.py")

It runs ``pipeprof compare ARGS --engine ddp --launcher dask --scheduler ADDR`` (ADDR: the
client's scheduler) as a user runs it, its output passed on line by line, and returns the
run's summary table (``summary.csv``, a pandas DataFrame). The cluster is left as it was
found. A failed compare raises ``PipeprofError`` with its one line; what it measured is kept
in its run directory, named on the line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pipeprof.errors import PipeprofError

OURS = ("--engine", "--launcher", "--scheduler")  # what compare() sets itself


def compare(client: Any, *args: str, out: str | os.PathLike[str] | None = None) -> Any:
    """``pipeprof compare ARGS`` with each rank a task on ``client``'s cluster; returns the
    summary table. ``out``: the run directory (default: a new one under the system's
    temporary folder, named on the first line of output)."""
    import pandas as pd

    args = tuple(str(a) for a in args)
    options = args[: args.index("--")] if "--" in args else args
    for flag in OURS:
        if any(a == flag or a.startswith(flag + "=") for a in options):
            raise PipeprofError(
                f"pipeprof.dask.compare: {flag} is set by compare itself (train.engine ddp, "
                "the dask launcher on the client's scheduler): leave it out"
            )
    address = getattr(getattr(client, "scheduler", None), "address", None)
    if not address:
        raise PipeprofError(
            f"pipeprof.dask.compare: {type(client).__name__} is not a connected "
            "dask.distributed Client (it has no scheduler address)"
        )
    run_dir = (
        Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="pipeprof-dask-")) / "run"
    )
    ours = ["--engine", "ddp", "--launcher", "dask", "--scheduler", address, "--out", str(run_dir)]
    at = args.index("--") if "--" in args else len(args)
    argv = [
        sys.executable, "-m", "pipeprof", "compare", *args[:at], *ours, "--no-dashboard",
        *args[at:],
    ]  # fmt: skip
    # a LocalCluster held in this process set its nannies' variables here (one OpenMP
    # thread, ...): the compare gets this process's environment without them
    from pipeprof.launch.dask_rank import without_nanny_settings

    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=without_nanny_settings(dict(os.environ)),
    )
    last = ""
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # passed on as it comes (a notebook shows a child's output so)
            print(line, end="", flush=True)
            if line.strip():
                last = line.strip()
        proc.wait()
    finally:  # interrupted (a notebook's stop): the compare stops its ranks, then itself
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if proc.returncode != 0:
        raise PipeprofError(last or f"pipeprof compare exited with {proc.returncode}")
    return pd.read_csv(run_dir / "summary.csv")
