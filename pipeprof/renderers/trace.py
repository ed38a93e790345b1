"""``trace.json``: the run as a timeline in the Chrome trace event format, which Perfetto
(ui.perfetto.dev) and chrome://tracing open.

One process per rank; in it one track per variant, with a span per step split into its
input wait and the rest (compute, allreduce, update), and a track of worker-count spans; the
rank's process CPU and its GPU's utilisation as counters. Each host's CPU is a counter in a
process of its own. Times are microseconds from the run's first step.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from pipeprof import atomic
from pipeprof.analysis import views
from pipeprof.rundir import Run

FILE = "trace.json"
HOST_PID_BASE = 1_000_000  # host processes sort after every rank
WORKER_COUNT_TID = 0


def _us(t: float, t0: float) -> float:
    return round((t - t0) * 1e6, 1)


def _meta(kind: str, pid: int, value: Any, tid: int | None = None) -> dict[str, Any]:
    event = {
        "ph": "M",
        "name": kind,
        "pid": pid,
        "args": {"name" if "name" in kind else "sort_index": value},
    }
    if tid is not None:
        event["tid"] = tid
    return event


def _gpu_owner(run: Run, spans: pd.DataFrame) -> list[tuple[float, float, str, str, int]]:
    """(start, end, host, local rank, rank) for each launch: who used which local GPU when."""
    out = []
    for n, rows in spans.groupby("np"):
        for h in run.hellos(int(n)):
            out.append(
                (
                    float(rows["start"].min()),
                    float(rows["end"].max()),
                    str(h.get("host", "")),
                    str(h.get("local_rank", "")),
                    int(h["rank"]),
                )
            )
    return out


def trace_events(run: Run) -> list[dict[str, Any]]:
    steps = run.steps
    gpu, host, proc = (run.telemetry.get(k) for k in ("gpu", "host", "proc"))
    t0 = views.run_start(steps, gpu, host, proc)
    events: list[dict[str, Any]] = []
    hosts = {int(h["rank"]): str(h.get("host", "")) for h in run.hellos()}
    if "host" in steps.columns:  # the steps say it too (with telemetry off, only they do)
        for r, h in steps[steps["host"].fillna("") != ""].groupby("rank")["host"].first().items():
            hosts.setdefault(int(r), str(h))
    ranks = sorted(set(int(r) for r in steps["rank"].unique())) if not steps.empty else []
    for r in ranks:
        events.append(
            _meta("process_name", r, f"rank {r}" + (f" ({hosts[r]})" if hosts.get(r) else ""))
        )
        events.append(_meta("process_sort_index", r, r))
        events.append(_meta("thread_name", r, "worker count", WORKER_COUNT_TID))
    if not steps.empty:
        s = steps.assign(start=steps["end_unix_s"] - steps["step_time_ms"] / 1e3)
        paired = (
            s["paired"].fillna("").astype(str) if "paired" in s else pd.Series("", index=s.index)
        )
        s = s.assign(
            track=[f"synthetic (paired with {p})" if p else v for v, p in zip(s["variant"], paired)]
        )
        tracks = {
            name: i + 1 for i, name in enumerate(dict.fromkeys(s.sort_values("start")["track"]))
        }
        for r in ranks:
            for name, tid in tracks.items():
                events.append(_meta("thread_name", r, name, tid))
                events.append(_meta("thread_sort_index", r, tid, tid))
        for row in s.itertuples(index=False):
            tid, pid = tracks[row.track], int(row.rank)
            start, wait = _us(row.start, t0), max(0.0, float(row.input_wait_ms)) * 1e3
            total = max(0.0, float(row.step_time_ms)) * 1e3
            args = {
                "np": int(row.np),
                "step": int(row.step),
                "warmup": bool(row.warmup),
                "round": int(getattr(row, "round", -1)),
            }
            events.append(
                {
                    "ph": "X",
                    "name": "input wait",
                    "cat": "input",
                    "pid": pid,
                    "tid": tid,
                    "ts": start,
                    "dur": round(min(wait, total), 1),
                    "args": args,
                }
            )
            events.append(
                {
                    "ph": "X",
                    "name": "compute",
                    "cat": "step",
                    "pid": pid,
                    "tid": tid,
                    "ts": round(start + min(wait, total), 1),
                    "dur": round(max(0.0, total - wait), 1),
                    "args": args,
                }
            )
        launches = s.groupby(["np", "rank"], as_index=False).agg(
            start=("start", "min"), end=("end_unix_s", "max")
        )
        for row in launches.itertuples(index=False):
            events.append(
                {
                    "ph": "X",
                    "name": f"np={int(row.np)}",
                    "cat": "launch",
                    "pid": int(row.rank),
                    "tid": WORKER_COUNT_TID,
                    "ts": _us(row.start, t0),
                    "dur": round((row.end - row.start) * 1e6, 1),
                    "args": {"np": int(row.np)},
                }
            )
    if proc is not None and not proc.empty:
        for row in proc.itertuples(index=False):
            if int(row.rank) in ranks and not math.isnan(row.cpu_pct):
                events.append(
                    {
                        "ph": "C",
                        "name": "process CPU %",
                        "pid": int(row.rank),
                        "ts": _us(row.t_unix_s, t0),
                        "args": {"cpu_pct": round(float(row.cpu_pct), 1)},
                    }
                )
    host_pids = {}
    for i, h in enumerate(sorted(set(host["host"]) if host is not None and not host.empty else [])):
        host_pids[h] = HOST_PID_BASE + i
        events.append(_meta("process_name", HOST_PID_BASE + i, f"host {h}"))
        events.append(_meta("process_sort_index", HOST_PID_BASE + i, HOST_PID_BASE + i))
    if host is not None and not host.empty:
        for row in host.itertuples(index=False):
            events.append(
                {
                    "ph": "C",
                    "name": "host CPU %",
                    "pid": host_pids[row.host],
                    "ts": _us(row.t_unix_s, t0),
                    "args": {"cpu_pct": round(float(row.cpu_pct), 1)},
                }
            )
    if gpu is not None and not gpu.empty:
        owners = _gpu_owner(run, views.variant_spans(steps))
        for row in gpu.dropna(subset=["gpu_util_pct"]).itertuples(index=False):
            t = float(row.t_unix_s)
            local = str(row.local_ranks).split(";")[0]
            gpu_pid = next(
                (
                    rank
                    for a, b, h, lr, rank in owners
                    if a - 1 <= t <= b + 1 and h == row.host and lr == local
                ),
                host_pids.get(row.host),
            )
            if gpu_pid is None:
                continue
            events.append(
                {
                    "ph": "C",
                    "name": f"GPU {row.gpu} utilisation %",
                    "pid": gpu_pid,
                    "ts": _us(t, t0),
                    "args": {"gpu_util_pct": round(float(row.gpu_util_pct), 1)},
                }
            )
    return events


class ChromeTrace:
    name = "trace"

    def render(self, run: Run, dest: Path) -> list[Path]:
        path = dest / FILE
        doc = {
            "traceEvents": trace_events(run),
            "displayTimeUnit": "ms",
            "otherData": {
                "pipeprof_run": str(run.path),
                "scenario": (run.manifest.get("scenario") or {}).get("name", ""),
            },
        }
        atomic.write_text(path, json.dumps(doc, separators=(",", ":")))
        return [path]
