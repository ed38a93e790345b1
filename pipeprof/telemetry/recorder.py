"""Launcher side: keep every streamed record in the run directory as CSV.

RUN_DIR/live/steps.csv        step records as they streamed in (all ranks, all variants)
RUN_DIR/telemetry/gpu.csv     NVML samples, one row per GPU and sample
RUN_DIR/telemetry/host.csv    host samples (CPU per core, memory, disk and network rates)
RUN_DIR/telemetry/proc.csv    each rank's process tree (CPU %, RSS)
RUN_DIR/live/events.jsonl     hellos and progress events
RUN_DIR/live/malformed.txt    the first streamed line that was not a record, and why (if any)
"""

from __future__ import annotations

import csv
import json
import threading
import time
from pathlib import Path
from typing import IO, Any

from pipeprof.records import STEP_COLUMNS
from pipeprof.telemetry.samples import GpuSample, HostSample, ProcSample
from pipeprof.telemetry.stream import record_problem

FILES = {
    "step": ("live/steps.csv", STEP_COLUMNS),
    "gpu": ("telemetry/gpu.csv", GpuSample.columns()),
    "host": ("telemetry/host.csv", HostSample.columns()),
    "proc": ("telemetry/proc.csv", ProcSample.columns()),
}


class Recorder:
    def __init__(self, run_dir: Path, flush_interval_s: float = 0.5) -> None:
        self.run_dir = run_dir
        self._lock = threading.Lock()
        # each kind's file, its CSV writer and its columns (a row is the record's values in
        # that order: a list built here costs a third of what csv.DictWriter's rows did)
        self._writers: dict[str, tuple[IO[str], Any, tuple[str, ...]]] = {}
        self._events: IO[str] | None = None
        self._flush_interval_s = flush_interval_s
        self._last_flush = time.monotonic()
        self.counts: dict[str, int] = {}
        self.malformed_path = run_dir / "live" / "malformed.txt"
        self.malformed_count = 0

    def write(self, record: dict[str, Any]) -> None:
        kind = record.get("kind", "")
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if kind in FILES:
                rel, columns = FILES[kind]
                if kind not in self._writers:
                    path = self.run_dir / rel
                    path.parent.mkdir(parents=True, exist_ok=True)
                    fh = path.open("w", newline="")
                    w = csv.writer(fh)
                    w.writerow(columns)
                    self._writers[kind] = (fh, w, tuple(columns))
                _, w, cols = self._writers[kind]
                get = record.get
                w.writerow([get(c, "") for c in cols])
            else:
                if self._events is None:
                    (self.run_dir / "live").mkdir(parents=True, exist_ok=True)
                    self._events = (self.run_dir / "live" / "events.jsonl").open("w")
                self._events.write(json.dumps(record) + "\n")
            if time.monotonic() - self._last_flush > self._flush_interval_s:
                self._flush_locked()

    def malformed(self, reason: str, line: bytes | str) -> None:
        """Count a line that was not a record; keep the first, with why, in live/malformed.txt."""
        with self._lock:
            self.malformed_count += 1
            if self.malformed_count > 1:
                return
            text = line.decode("utf-8", "backslashreplace") if isinstance(line, bytes) else line
            self.malformed_path.parent.mkdir(parents=True, exist_ok=True)
            self.malformed_path.write_text(
                f"the first malformed stream record: {reason}\n{text[:4096]}\n"
            )

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        for fh, _, _ in self._writers.values():
            fh.flush()
        if self._events is not None:
            self._events.flush()
        self._last_flush = time.monotonic()

    def ingest_fallback_files(self) -> int:
        """Records ranks wrote to RUN_DIR/stream/*.jsonl because they could not reach us."""
        n = 0
        for path in sorted((self.run_dir / "stream").glob("rank*.jsonl")):
            for line in path.read_bytes().splitlines():
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except (
                    ValueError
                ):  # a line cut short when the rank died, or bytes that are not JSON
                    self.malformed(f"not JSON, in {path.name}", line)
                    continue
                if (problem := record_problem(record)) is not None:
                    self.malformed(f"{problem}, in {path.name}", line)
                    continue
                self.write(record)
                n += 1
            path.rename(path.with_suffix(".jsonl.ingested"))
        return n

    def close(self) -> None:
        with self._lock:
            if self.malformed_count > 1:
                with self.malformed_path.open("a") as out:
                    out.write(f"({self.malformed_count} malformed records in all)\n")
            self._flush_locked()
            for fh, _, _ in self._writers.values():
                fh.close()
            if self._events is not None:
                self._events.close()
            self._writers.clear()
            self._events = None
