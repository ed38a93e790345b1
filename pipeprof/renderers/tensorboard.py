"""TensorBoard event files in ``RUN_DIR/tensorboard/``, so ``tensorboard --logdir runs/``
shows every run beside the others:

    tensorboard/by_np/VARIANT/   scalars against the worker count (the x axis is np):
                                 samples_per_s, samples_per_s_per_worker, gap_pct,
                                 input_wait_pct, scaling_efficiency_pct, gpu_util_pct, cpu_util_pct
    tensorboard/npN/VARIANT/     scalars against the step: step_time_ms, input_wait_ms,
                                 samples_per_s (ranks' mean step; measured steps only)

Written with TensorBoard's own record format (no TensorFlow needed), one file per folder
under a fixed name and replaced whole, so rendering again does not double a run's points.
"""

from __future__ import annotations

import io
import math
import re
import socket
import time
from pathlib import Path

import pandas as pd
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

from pipeprof import atomic
from pipeprof.analysis import views
from pipeprof.rundir import Run

DIR = "tensorboard"
BY_NP = (
    "samples_per_s",
    "samples_per_s_per_worker",
    "gap_pct",
    "input_wait_pct",
    "scaling_efficiency_pct",
    "gpu_util_pct",
    "cpu_util_pct",
)


def _file_name() -> str:
    # TensorBoard finds files by "tfevents" in the name; the fixed stamp keeps one file a folder
    return f"events.out.tfevents.0000000000.{socket.gethostname()}.pipeprof"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", name)


class _Events:
    """The events of one folder, gathered in memory and written in one go."""

    def __init__(self) -> None:
        self._buf = io.BytesIO()
        self._writer = RecordWriter(self._buf)
        self._add(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def _add(self, event: event_pb2.Event) -> None:
        self._writer.write(event.SerializeToString())

    def scalar(self, tag: str, value: float, step: int, wall_time: float) -> None:
        if value is None or math.isnan(value):
            return
        summary = summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=tag, simple_value=float(value))]
        )
        self._add(event_pb2.Event(wall_time=wall_time, step=int(step), summary=summary))

    def save(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / _file_name()
        atomic.write_bytes(path, self._buf.getvalue())
        return path


class TensorBoardEvents:
    name = "tensorboard"

    def render(self, run: Run, dest: Path) -> list[Path]:
        root = dest / DIR
        written = []
        summary = run.summary
        now = time.time()
        if summary is not None and not summary.empty:
            for variant, rows in summary.groupby("variant", sort=False):
                ev = _Events()
                for _, r in rows.sort_values("np").iterrows():
                    for col in BY_NP:
                        if col in r and isinstance(r[col], (int, float)):
                            ev.scalar(col, float(r[col]), int(r["np"]), now)
                written.append(ev.save(root / "by_np" / _safe(str(variant))))
        own = views.own_steps(run.steps)
        for (n, variant), rows in own.groupby(["np", "variant"], sort=True):
            per_step = rows.groupby("step", sort=True).agg(
                step_time_ms=("step_time_ms", "mean"),
                input_wait_ms=("input_wait_ms", "mean"),
                samples=("batch_size", "sum"),
                wall=("end_unix_s", "max"),
            )
            ev = _Events()
            for step, r in per_step.iterrows():
                ev.scalar("step_time_ms", r["step_time_ms"], int(step), float(r["wall"]))
                ev.scalar("input_wait_ms", r["input_wait_ms"], int(step), float(r["wall"]))
                if r["step_time_ms"] > 0:
                    ev.scalar(
                        "samples_per_s",
                        1e3 * r["samples"] / r["step_time_ms"],
                        int(step),
                        float(r["wall"]),
                    )
            written.append(ev.save(root / f"np{int(n)}" / _safe(str(variant))))
        return written


def read_scalars(folder: Path) -> dict[str, pd.DataFrame]:
    """Read one folder back with TensorBoard's own reader: tag -> (step, value) frame."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {
        tag: pd.DataFrame([(e.step, e.value) for e in acc.Scalars(tag)], columns=["step", "value"])
        for tag in acc.Tags().get("scalars", [])
    }
