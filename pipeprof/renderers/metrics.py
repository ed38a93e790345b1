"""The live figures for Prometheus: ``--metrics-port`` serves them while a run goes on.

The exporter is a ``Reporter``: it sees the same streamed records and progress events as the
live dashboard, in the launcher, and turns them into metrics with Prometheus's naming
conventions (the ``pipeprof_`` prefix, base units, ratios 0..1, ``_total`` for counters),
labelled with rank, host, np and variant. It serves them over HTTP with the official client
library, on loopback unless ``--metrics-addr`` names another address.

    pipeprof_steps_total, pipeprof_samples_total, pipeprof_input_wait_seconds_total   counters per rank
    pipeprof_step_duration_seconds            histogram per rank
    pipeprof_samples_per_second, pipeprof_input_wait_ratio   per rank, over its last 20 steps
    pipeprof_gpu_utilization_ratio, pipeprof_gpu_memory_used_bytes   per GPU (and the rank on it)
    pipeprof_host_cpu_utilization_ratio, pipeprof_host_memory_used_bytes   per host
    pipeprof_process_resident_memory_bytes    per rank
    pipeprof_bad_files_total                  per rank, np and variant
    pipeprof_gap_ratio, pipeprof_gap_ci95_ratio   per np and variant, once measured
    pipeprof_run_progress_ratio, pipeprof_variants_completed_total, pipeprof_worker_count, pipeprof_run_info
"""

from __future__ import annotations

import errno
import functools
import math
import threading
from collections import defaultdict, deque
from typing import Any

import pandas as pd
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, start_http_server

from pipeprof.errors import PipeprofError
from pipeprof.progress import Event, Launch, Plan, VariantDone, VariantStart
from pipeprof.reporting import Reporter

RANK_LABELS = ("rank", "host", "np", "variant")
WINDOW_STEPS = 20  # the recent-rate gauges' window, as the dashboard's
STEP_BUCKETS_S = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


def _share(sums: list[float], of: int) -> float:
    """``sums[of]`` per step second over a series' recent window (0 before its first step)."""
    return sums[of] / sums[0] if sums[0] > 0 else 0.0


class MetricsExporter(Reporter):
    """Serve the run's live metrics on ``addr:port`` until ``close()``; ``port=0`` picks a free one."""

    def __init__(
        self,
        port: int,
        addr: str = "127.0.0.1",
        *,
        command: str = "compare",
        scenario: str = "",
        run_dir: str = "",
    ) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.steps = Counter("pipeprof_steps", "Training steps finished", RANK_LABELS, registry=r)
        self.samples = Counter("pipeprof_samples", "Samples trained", RANK_LABELS, registry=r)
        self.wait = Counter(
            "pipeprof_input_wait_seconds",
            "Time blocked on the input pipeline",
            RANK_LABELS,
            registry=r,
        )
        self.step_time = Histogram(
            "pipeprof_step_duration_seconds",
            "Duration of one training step",
            RANK_LABELS,
            buckets=STEP_BUCKETS_S,
            registry=r,
        )
        self.rate = Gauge(
            "pipeprof_samples_per_second",
            f"Samples per second over the rank's last {WINDOW_STEPS} " "steps",
            RANK_LABELS,
            registry=r,
        )
        self.wait_ratio = Gauge(
            "pipeprof_input_wait_ratio",
            f"Share of step time blocked on input over the rank's " f"last {WINDOW_STEPS} steps",
            RANK_LABELS,
            registry=r,
        )
        gpu_labels = ("host", "gpu", "rank", "np", "variant")
        self.gpu_util = Gauge(
            "pipeprof_gpu_utilization_ratio",
            "NVML GPU utilisation (share of time a kernel ran)",
            gpu_labels,
            registry=r,
        )
        self.gpu_mem = Gauge(
            "pipeprof_gpu_memory_used_bytes", "GPU memory in use", gpu_labels, registry=r
        )
        host_labels = ("host", "np", "variant")
        self.host_cpu = Gauge(
            "pipeprof_host_cpu_utilization_ratio",
            "Host CPU utilisation, all cores",
            host_labels,
            registry=r,
        )
        self.host_mem = Gauge(
            "pipeprof_host_memory_used_bytes", "Host memory in use", host_labels, registry=r
        )
        self.rss = Gauge(
            "pipeprof_process_resident_memory_bytes",
            "A rank's process tree resident memory",
            ("rank", "host"),
            registry=r,
        )
        self.bad = Counter(
            "pipeprof_bad_files", "Bad files skipped by the input pipeline", RANK_LABELS, registry=r
        )
        self.gap = Gauge(
            "pipeprof_gap_ratio",
            "Synthetic-vs-real gap: 1 - real / synthetic samples per second",
            ("np", "variant"),
            registry=r,
        )
        self.gap_ci = Gauge(
            "pipeprof_gap_ci95_ratio",
            "Half-width of the gap's 95% interval",
            ("np", "variant"),
            registry=r,
        )
        self.progress_ratio = Gauge(
            "pipeprof_run_progress_ratio", "Share of the run's variants finished", registry=r
        )
        self.completed = Counter(
            "pipeprof_variants_completed", "(np, variant) measurements finished", registry=r
        )
        self.workers = Gauge(
            "pipeprof_worker_count", "Horovod ranks in the launch now running", registry=r
        )
        Info("pipeprof_run", "The run being served", registry=r).info(
            {"command": command, "scenario": scenario, "run_dir": run_dir}
        )
        self._lock = threading.Lock()
        self._hosts: dict[int, str] = {}  # rank -> host, from the ranks' hellos
        self._local: dict[tuple[str, str], int] = {}  # (host, local rank) -> rank
        self._recent: dict[tuple, deque] = defaultdict(lambda: deque(maxlen=WINDOW_STEPS))
        # per label set: its series (prometheus_client's label lookup, six per step record,
        # was half the collector thread's time at 1,024 ranks) and its window's running sums
        self._series: dict[tuple, tuple[Any, ...]] = {}
        self._sums: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        self._gauges: dict[tuple, Any] = {}  # (gauge, *labels) -> its series
        self._np = ""
        self._variant = ""
        self._total = 0
        self._done = 0
        try:
            self._server, self._thread = start_http_server(port, addr=addr, registry=r)
        except OSError as exc:
            why = "already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
            raise PipeprofError(
                f"--metrics-port {port}: cannot serve metrics on {addr}:{port}: {why}"
            ) from None
        self.port = self._server.server_port
        self.addr = addr

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    # --- Reporter --------------------------------------------------------------------------

    def progress(self, event: Event) -> None:
        with self._lock:
            if isinstance(event, Plan):
                self._total = len(event.worker_counts) * len(event.variants)
                self.progress_ratio.set(0.0)
            elif isinstance(event, Launch) and event.np is not None:
                self._np = str(event.np)
                self.workers.set(float(event.np))
            elif isinstance(event, VariantStart):
                self._np, self._variant = str(event.np), event.variant
            elif isinstance(event, VariantDone):
                self._done += 1
                self.completed.inc()
                if self._total:
                    self.progress_ratio.set(min(1.0, self._done / self._total))

    def record(self, record: dict) -> None:
        kind = record.get("kind")
        with self._lock:
            if kind == "hello":
                self._hosts[int(record["rank"])] = str(record.get("host", ""))
                self._local[(str(record.get("host", "")), str(record.get("local_rank", "")))] = int(
                    record["rank"]
                )
            elif kind == "variant_start":  # pipeprof watch: the callback says what runs
                self._np, self._variant = str(record.get("np", "")), str(record.get("variant", ""))
                self.workers.set(float(record.get("np") or 0))
            elif kind == "step":
                self._step(record)
            elif kind == "gpu":
                self._gpu(record)
            elif kind == "host":
                labels = (str(record.get("host", "")), self._np, self._variant)
                self._set(self.host_cpu, labels, _ratio(record.get("cpu_pct")))
                self._set(self.host_mem, labels, _mb(record.get("mem_used_mb")))
            elif kind == "proc":
                rank = int(record["rank"])
                self._set(
                    self.rss,
                    (str(rank), self._hosts.get(rank, str(record.get("host", "")))),
                    _mb(record.get("rss_mb")),
                )
            elif kind == "bad_file":
                rank = int(record.get("rank", -1))
                self.bad.labels(
                    str(rank),
                    self._hosts.get(rank, ""),
                    str(record.get("np", self._np)),
                    str(record.get("variant", self._variant)),
                ).inc()

    def _step(self, rec: dict[str, Any]) -> None:
        rank = int(rec["rank"])
        variant = str(rec.get("variant", ""))
        if rec.get("paired"):  # a twin's step measured in alternation with a real variant
            variant = f"synthetic (paired with {rec['paired']})"
        labels = (str(rank), self._hosts.get(rank, ""), str(rec.get("np", self._np)), variant)
        step_s, wait_s, batch = (
            float(rec["step_time_ms"]) / 1e3,
            max(0.0, float(rec["input_wait_ms"]) / 1e3),
            float(rec["batch_size"]),
        )
        series = self._series.get(labels)
        if series is None:
            sums = self._sums[labels]  # step s, wait s, samples over the recent window
            # the recent rate and wait share are worked out when Prometheus scrapes, not at
            # every step: two gauge writes a step were a tenth of the launcher's record path
            self.rate.labels(*labels).set_function(functools.partial(_share, sums, 2))
            self.wait_ratio.labels(*labels).set_function(functools.partial(_share, sums, 1))
            series = self._series[labels] = tuple(
                m.labels(*labels) for m in (self.steps, self.samples, self.wait, self.step_time)
            )
            # a known counter is served from its first sample at 0 (Prometheus's convention),
            # so rate() and alerts see a series before the first bad file, not only after it
            self.bad.labels(*labels)
        steps, samples, wait, step_time = series
        steps.inc()
        samples.inc(batch)
        wait_s = 0.0 if math.isnan(wait_s) else wait_s
        wait.inc(wait_s)
        step_time.observe(step_s)
        recent, sums = self._recent[labels], self._sums[labels]
        if len(recent) == recent.maxlen:  # the oldest leaves the window
            old = recent[0]
            sums[0], sums[1], sums[2] = sums[0] - old[0], sums[1] - old[1], sums[2] - old[2]
        recent.append((step_s, wait_s, batch))
        sums[0], sums[1], sums[2] = sums[0] + step_s, sums[1] + wait_s, sums[2] + batch

    def _set(self, gauge: Gauge, labels: tuple, value: float | None) -> None:
        if value is None:
            return
        child = self._gauges.get((gauge, *labels))  # looked up once per label set
        if child is None:
            child = self._gauges[(gauge, *labels)] = gauge.labels(*labels)
        child.set(value)

    def _gpu(self, rec: dict[str, Any]) -> None:
        host = str(rec.get("host", ""))
        local = str(rec.get("local_ranks", "")).split(";")[0]
        rank = self._local.get((host, local))
        labels = (
            host,
            str(rec.get("gpu", "")),
            "" if rank is None else str(rank),
            self._np,
            self._variant,
        )
        self._set(self.gpu_util, labels, _ratio(rec.get("gpu_util_pct")))
        self._set(self.gpu_mem, labels, _mb(rec.get("mem_used_mb")))

    def results(self, summary: pd.DataFrame) -> None:
        with self._lock:
            for _, r in summary.iterrows():
                if not isinstance(r.get("gap_pct"), float) or math.isnan(r["gap_pct"]):
                    continue
                labels = (str(int(r["np"])), str(r["variant"]))
                self.gap.labels(*labels).set(r["gap_pct"] / 100.0)
                if not math.isnan(r["gap_pct_ci95"]):
                    self.gap_ci.labels(*labels).set(r["gap_pct_ci95"] / 100.0)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _ratio(pct: Any) -> float | None:
    return (
        None if pct is None or (isinstance(pct, float) and math.isnan(pct)) else float(pct) / 100.0
    )


def _mb(mb: Any) -> float | None:
    return None if mb is None or (isinstance(mb, float) and math.isnan(mb)) else float(mb) * 2**20
