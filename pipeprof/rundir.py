"""The run directory: the output contract that later features and users' scripts read.

    RUN_DIR/
      manifest.json      versions, host, CPU cores, GPUs, the resolved scenario, the command line
      steps/npN-VARIANT.csv   per-rank, per-step records (warm-up steps flagged)
      variants.jsonl     one line per (np, variant) run: batch sizes, learning rate, mean loss
      summary.csv        one row per (np, variant): throughput ±95%, gap, efficiency, verdict
      logs/npN.log       everything horovodrun printed for that worker count
      live/, telemetry/  everything the ranks streamed while running (see telemetry.recorder)
"""

from __future__ import annotations

import json
import platform
import socket
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from pipeprof import __version__, atomic
from pipeprof.launch import topology
from pipeprof.records import STEP_COLUMNS


def new_run_dir(out: str | None, scenario_name: str) -> Path:
    if out:
        path = Path(out)
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = Path("runs") / f"{stamp}-{scenario_name}"
        n = 1
        while path.exists():
            n += 1
            path = Path("runs") / f"{stamp}-{scenario_name}-{n}"
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        from pipeprof.errors import PipeprofError

        what = "directory exists and is not empty" if path.is_dir() else "exists and is not a directory"
        raise PipeprofError(f"--out {path}: {what} (pipeprof never overwrites a run)")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _version(*dists: str) -> str | None:
    for d in dists:
        try:
            return metadata.version(d)
        except metadata.PackageNotFoundError:
            continue
    return None


def manifest(scenario: dict[str, Any], argv: list[str], gpus: list[dict[str, Any]], extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "pipeprof": __version__,
        "python": platform.python_version(),
        "tensorflow": _version("tensorflow", "tensorflow-cpu", "tensorflow-gpu"),
        "horovod": _version("horovod"),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_cores": topology.usable_cores(),  # the cores this run could use (its CPU affinity)
        "gpus": gpus,
        "started_unix_s": time.time(),
        "command_line": [Path(sys.argv[0]).name, *argv],
        "scenario": scenario,
        **extra,
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic.write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def write_csv(path: Path, frame: pd.DataFrame, float_format: str | None = "%.4g") -> None:
    atomic.write_text(path, frame.to_csv(index=False, float_format=float_format))


def _read_csv(path: Path) -> pd.DataFrame | None:
    try:
        return pd.read_csv(path)
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return None


def _with_defaults(frame: pd.DataFrame) -> pd.DataFrame:
    """Step files written before a column existed read as that column's default."""
    if "paired" not in frame.columns:
        frame["paired"] = ""
    if "round" not in frame.columns:
        frame["round"] = -1
    frame["paired"] = frame["paired"].fillna("").astype(str)
    return frame


def load_steps(run_dir: Path, paired: bool = False) -> pd.DataFrame:
    """Step records: rank 0's complete files, plus streamed ones for any (np, variant) that
    never completed (an interrupted or failed launch), so what was measured is not lost.

    Synthetic steps measured in alternation with a real variant (``paired``) are left out
    unless asked for: only the gap computation needs them."""
    frames = [_with_defaults(f) for f in (_read_csv(p) for p in sorted((run_dir / "steps").glob("np*.csv")))
              if f is not None]
    done = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=STEP_COLUMNS)
    live = _read_csv(run_dir / "live" / "steps.csv")
    if live is not None and not live.empty:
        live = _with_defaults(live)
        have = set(zip(done["np"], done["variant"], done["paired"]))
        partial = live[[(n, v, p) not in have for n, v, p in zip(live["np"], live["variant"], live["paired"])]]
        if not partial.empty:
            done = pd.concat([done, partial[STEP_COLUMNS]], ignore_index=True) if not done.empty else partial[STEP_COLUMNS]
    done = _with_defaults(done)
    return done if paired else done[done["paired"] == ""].reset_index(drop=True)


def load_telemetry(run_dir: Path) -> dict[str, pd.DataFrame | None]:
    return {k: _read_csv(run_dir / "telemetry" / f"{k}.csv") for k in ("gpu", "host", "proc")}


def load_variant_runs(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "variants.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
