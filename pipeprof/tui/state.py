"""What the live dashboard shows, as plain data; and the thread-safe state that builds it from
streamed records. No rich here: the dashboard renders a ``DashboardState``; tests feed canned ones.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeprof.analysis import straggler
from pipeprof.progress import Event, Launch, Precision, VariantStart

RECENT_STEPS = 20  # the per-rank window the dashboard's rates come from
# A terminal shows a few dozen lines: past these, the dashboard shows the ranks that wait
# longest on input (the ones a user looks for) and the busiest hosts, and counts the rest.
# A snapshot then costs the same at 1,024 ranks as at 16 (benchmarks/collector.py).
SHOWN_RANKS = 16
SHOWN_HOSTS = 4


def _number(value: float) -> float:
    """A step's time or wait for the running sums: NaN (not measured) counts as 0."""
    return 0.0 if math.isnan(value) else float(value)


@dataclass(frozen=True)
class RankView:
    rank: int
    host: str = ""
    samples_per_s: float | None = None
    step_time_ms_p50: float | None = None
    step_time_ms_p95: float | None = None
    input_wait_pct: float | None = None
    gpu_util_pct: float | None = None
    gpu_mem_used_mb: float | None = None
    gpu_mem_total_mb: float | None = None
    cpu_pct: float | None = None
    rss_mb: float | None = None
    steps: int = 0
    slow: bool = False  # its input wait stays above the other ranks' (analysis.straggler)


@dataclass(frozen=True)
class HostView:
    host: str
    cpu_per_core_pct: list[float] = field(default_factory=list)
    mem_used_mb: float | None = None
    mem_total_mb: float | None = None
    ranks_rss_mb: float | None = None
    disk_read_mb_per_s: float | None = None
    net_mb_per_s: float | None = None


@dataclass(frozen=True)
class ResultRow:
    np: int
    variant: str
    samples_per_s: float
    gap_pct: float | None


@dataclass(frozen=True)
class DashboardState:
    command: str = "compare"
    scenario: str = ""
    np: int | None = None
    variant: str = ""
    variant_index: int = 0  # 1-based; 0 before the first
    variants_total: int = 0
    elapsed_s: float = 0.0
    steps_done: int = 0
    steps_total: int = 0
    eta_s: float | None = None
    ranks: list[RankView] = field(default_factory=list)  # at most SHOWN_RANKS
    hosts: list[HostView] = field(default_factory=list)  # at most SHOWN_HOSTS
    ranks_total: int = 0  # every rank heard from (``ranks`` may show fewer)
    hosts_total: int = 0
    results: list[ResultRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # adaptive measurement: the interval's half-width now and the target it narrows to
    half_pct: float | None = None
    target_pct: float | None = None
    precision_is_gap: bool = False


class LiveState:
    """Applies streamed records (from the collector thread) and progress events; snapshots on demand."""

    def __init__(
        self,
        *,
        command: str = "compare",
        scenario: str = "",
        steps_total: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._t0 = clock()
        self.command, self.scenario, self.steps_total = command, scenario, steps_total
        self._np: int | None = None
        self._variant, self._vi, self._vn = "", 0, 0
        self._steps_done = 0
        self._steps: dict[int, deque] = {}
        # per rank, over its recent steps: [step ms, input wait ms], kept as records arrive so
        # a snapshot ranks every rank without reading its steps
        self._sums: dict[int, list[float]] = {}
        self._rank_host: dict[int, tuple[str, int]] = {}
        self._gpu: dict[tuple[str, int], dict[str, Any]] = {}  # (host, local_rank) -> latest sample
        self._host: dict[str, dict[str, Any]] = {}
        self._proc: dict[int, dict[str, Any]] = {}
        self._results: list[ResultRow] = []
        self._notes: dict[str, str] = {}
        self._precision: Precision | None = None

    def apply_event(self, event: Event) -> None:
        """A progress event (``pipeprof.progress``)."""
        with self._lock:
            if isinstance(event, Precision):
                self._precision = event
            elif isinstance(event, Launch | VariantStart):
                self._precision = None
                self._np = event.np if event.np is not None else self._np
                self._vn = event.of_variants
                if isinstance(event, Launch):
                    self._steps.clear()
                    self._sums.clear()
                else:
                    self._variant, self._vi = event.variant, event.index + 1

    def apply(self, record: dict[str, Any]) -> None:
        """A record a rank streamed (``telemetry.stream``: its ``kind`` says which)."""
        kind = record.get("kind")
        with self._lock:
            if kind == "step":
                rank = int(record["rank"])
                if rank == 0:
                    self._steps_done += 1
                if record.get("paired"):  # a twin step between the real variant's: not its rate
                    return
                if record.get("variant") != self._variant or record.get("np") != self._np:
                    self._np, self._variant = record.get("np"), record.get("variant", "")
                    self._steps.clear()
                    self._sums.clear()
                recent = self._steps.setdefault(rank, deque(maxlen=RECENT_STEPS))
                sums = self._sums.setdefault(rank, [0.0, 0.0])
                if len(recent) == RECENT_STEPS:  # the oldest leaves the window
                    sums[0] -= _number(recent[0]["step_time_ms"])
                    sums[1] -= _number(recent[0]["input_wait_ms"])
                recent.append(record)
                sums[0] += _number(record["step_time_ms"])
                sums[1] += _number(record["input_wait_ms"])  # NaN: a wait not measured
            elif kind == "hello":
                self._rank_host[int(record["rank"])] = (
                    record.get("host", ""),
                    int(record.get("local_rank", 0)),
                )
                if record.get("nvml") not in (None, "ok", "not sampled"):
                    self._notes["nvml"] = str(record["nvml"])
            elif kind == "gpu":
                for lr in str(record.get("local_ranks", "")).split(";"):
                    if lr != "":
                        key = (record.get("host", ""), int(lr))
                        # fast samples carry utilisation only: keep the slow fields of the last full one
                        self._gpu[key] = {
                            **self._gpu.get(key, {}),
                            **{k: v for k, v in record.items() if v is not None},
                        }
            elif kind == "host":
                self._host[record.get("host", "")] = record
            elif kind == "proc":
                self._proc[int(record["rank"])] = record
            elif kind == "variant_start":  # pipeprof.keras's callback under watch says what runs
                self._precision = None
                self._np = record.get("np", self._np)
                self._variant = record.get("variant", self._variant)
                self._vi = int(record.get("index", 0)) + 1
                self._vn = int(record.get("of_variants", self._vn))

    def set_results(self, rows: list[ResultRow]) -> None:
        with self._lock:
            self._results = list(rows)

    def note(self, key: str, text: str) -> None:
        with self._lock:
            self._notes[key] = text

    def snapshot(self) -> DashboardState:
        with self._lock:
            elapsed = self._clock() - self._t0
            every = set(self._steps) | set(self._rank_host) | set(self._proc)
            slow = self._slow_rank()
            ranks = [
                dataclasses.replace(v, slow=True) if v.rank == slow else v
                for v in (self._rank_view(r) for r in self._shown_ranks(every))
            ]
            rss = self._rss_per_host()
            hosts = [self._host_view(h, self._host[h], rss.get(h)) for h in self._shown_hosts()]
            eta = None
            if self.steps_total and self._steps_done:
                eta = elapsed / self._steps_done * max(0, self.steps_total - self._steps_done)
            return DashboardState(
                command=self.command,
                scenario=self.scenario,
                np=self._np,
                variant=self._variant,
                variant_index=self._vi,
                variants_total=self._vn,
                elapsed_s=elapsed,
                steps_done=self._steps_done,
                steps_total=self.steps_total,
                eta_s=eta,
                ranks=ranks,
                hosts=hosts,
                ranks_total=len(every),
                hosts_total=len(self._host),
                results=list(self._results),
                notes=list(self._notes.values()),
                **self._precision_view(),
            )

    def _precision_view(self) -> dict[str, Any]:
        p = self._precision
        if p is None:
            return {}
        return dict(
            half_pct=None if math.isnan(p.half_pct) else float(p.half_pct),
            target_pct=float(p.target_pct),
            precision_is_gap=p.gap,
        )

    def _slow_rank(self) -> int | None:
        """The rank whose mean input wait over its recent steps stands above the median of the
        other ranks' by the straggler margin and ratio (analysis.straggler: ``MARGIN_MS`` or
        ``MARGIN_SHARE`` of the median step, ``RATIO``); from the sums kept per rank, so a snapshot of a
        thousand ranks stays cheap. The summary's rule also asks it to be the slowest at most
        steps; here the window of recent steps is what "stays" means."""
        means = {
            rank: (sums[0] / n, sums[1] / n)
            for rank, sums in self._sums.items()
            if (n := len(self._steps.get(rank, ()))) > 0
        }
        if len(means) < 2:
            return None
        rank = max(means, key=lambda r: means[r][1])
        others = [w for r, (_, w) in means.items() if r != rank]
        step = float(np.median([t for t, _ in means.values()]))
        margin = max(straggler.MARGIN_MS, straggler.MARGIN_SHARE * step)
        mine, rest = means[rank][1], float(np.median(others))
        return rank if mine - rest > margin and mine >= straggler.RATIO * rest else None

    def _shown_ranks(self, every: set[int]) -> list[int]:
        """All ranks, in order, up to SHOWN_RANKS; past that, those waiting longest on input."""
        if len(every) <= SHOWN_RANKS:
            return sorted(every)

        def wait_share(rank: int) -> float:
            step_ms, wait_ms = self._sums.get(rank, (0.0, 0.0))
            return wait_ms / step_ms if step_ms > 0 else -1.0

        return sorted(sorted(every, key=wait_share, reverse=True)[:SHOWN_RANKS])

    def _shown_hosts(self) -> list[str]:
        """All hosts, in order, up to SHOWN_HOSTS; past that, the busiest (mean of cores)."""
        if len(self._host) <= SHOWN_HOSTS:
            return sorted(self._host)

        def busy(host: str) -> float:
            cores = [c for c in str(self._host[host].get("cpu_per_core_pct", "")).split(";") if c]
            return sum(map(float, cores)) / len(cores) if cores else -1.0

        return sorted(sorted(self._host, key=busy, reverse=True)[:SHOWN_HOSTS])

    def _rss_per_host(self) -> dict[str, float]:
        """The ranks' RSS summed per host, in one pass over the ranks."""
        out: dict[str, float] = {}
        for rank, proc in self._proc.items():
            host = self._rank_host.get(rank, ("",))[0]
            out[host] = out.get(host, 0.0) + (proc.get("rss_mb") or 0.0)
        return out

    def _rank_view(self, rank: int) -> RankView:
        host, local_rank = self._rank_host.get(rank, ("", rank))
        recent = list(self._steps.get(rank, ()))
        kw: dict[str, Any] = {}
        if recent:
            times = np.array([r["step_time_ms"] for r in recent], dtype=float)
            waits = np.array([r["input_wait_ms"] for r in recent], dtype=float)
            kw = dict(
                samples_per_s=1e3 * sum(r["batch_size"] for r in recent) / times.sum(),
                step_time_ms_p50=float(np.percentile(times, 50)),
                step_time_ms_p95=float(np.percentile(times, 95)),
                input_wait_pct=float(100 * waits.sum() / times.sum()),
                steps=int(recent[-1]["step"]) + 1,
            )
        gpu = self._gpu.get((host, local_rank))
        if gpu:
            kw.update(
                gpu_util_pct=gpu.get("gpu_util_pct"),
                gpu_mem_used_mb=gpu.get("mem_used_mb"),
                gpu_mem_total_mb=gpu.get("mem_total_mb"),
            )
        proc = self._proc.get(rank)
        if proc:
            kw.update(cpu_pct=proc.get("cpu_pct"), rss_mb=proc.get("rss_mb"))
        return RankView(rank=rank, host=host, **kw)

    def _host_view(self, host: str, rec: dict[str, Any], rss: float | None) -> HostView:
        cores = [float(c) for c in str(rec.get("cpu_per_core_pct", "")).split(";") if c != ""]
        return HostView(
            host=host,
            cpu_per_core_pct=cores,
            mem_used_mb=rec.get("mem_used_mb"),
            mem_total_mb=rec.get("mem_total_mb"),
            ranks_rss_mb=rss,
            disk_read_mb_per_s=rec.get("disk_read_mb_per_s"),
            net_mb_per_s=rec.get("net_mb_per_s"),
        )
