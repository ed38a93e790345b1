"""Does the launcher keep up with a cluster's record stream, and what does that cost it?

Simulated ranks stream over loopback into the launcher as pipeprof wires it: a
``RecordStream`` (the collector, and the recorder writing the run directory) whose reporter
fans out to the live dashboard (drawing real frames at its own cadence onto a terminal that
keeps nothing) and the Prometheus exporter (scraped every ``--scrape-s`` seconds, as
Prometheus would). Each rank is a real ``StreamClient`` with a connection of its own, sending
what ``RankTelemetry`` sends at the default cadence: a hello, 20 step records a second, its
process sample twice a second and, on each host's local rank 0, the host twice a second and
its 8 GPUs at 10 Hz (the slow GPU fields every 0.5 s); a flush every 0.5 s. Hosts hold 8
ranks and 96 logical CPUs (an 8-GPU cloud node). ``--senders`` processes share the ranks,
each keeping an absolute schedule: a sender that falls behind sends less, and says so (its
share of the schedule), instead of stretching the run. The senders run at nice 19 so that
on a small machine they, not the launcher, give way; the launcher's collector and dashboard
threads run at the nice 10 pipeprof gives them.

Each rank count runs in a fresh launcher process, so its memory figures start from the same
baseline. Figures, over the measured window after a warm-up unless said otherwise:

* records lost: sent, minus written to the run directory (live, or from the files ranks
  fall back to when their connection fails), once the stream has drained;
* malformed records, the backlog when the ranks stopped and how long it took to drain;
* how late step records reach the reporters (arrival minus the step's end; a flush every
  0.5 s makes up to 0.5 s of it);
* launcher CPU (the whole process: collector, recorder, dashboard, exporter) in cores, and
  per 100 ranks;
* dashboard frames: each redraw's wall and CPU time;
* Prometheus scrapes: time and size;
* launcher RSS before anything starts, at the window's start and end, and its peak.

Targets are this benchmark's own, except the 0 records lost that the issue asks for:

* launcher CPU <= 0.05 cores per 100 ranks: a 1,024-rank launcher within half a core on a
  host whose cores feed its own ranks, and with room for the collector, one thread under the
  GIL, to double before it has none;
* dashboard frame CPU p95 <= CPU_BUDGET x MAX_INTERVAL_S (4 ms): the largest frame the
  dashboard's own CPU budget allows at its slowest redraw (``pipeprof.tui.dashboard``);
* step records delivered p95 <= 1 s: the 0.5 s flush, and as much again for the launcher;
* a scrape <= 1 s: a tenth of Prometheus's default 10 s scrape timeout;
* memory <= 10 MB per 100 ranks over the baseline (a 1,024-rank launcher within ~100 MB
  more), and growth within the window <= 1 MB per 100 ranks: what the launcher keeps per
  rank is bounded (recent steps, latest samples, one set of series), so more means it keeps
  something per record.

Per-100-rank figures include the launcher's fixed costs (the exporter, the dashboard's
frame, Python's own memory), so they read high at a few dozen ranks. It is a benchmark, not
a test: it exits 0 whatever the figures, 1 only when it could not measure.

    .venv/bin/python -m benchmarks.collector [--ranks 256,1024] [--seconds 20] [--senders 4]

``--smoke`` (CI): 16 ranks from one sender for 2 s after 1 s of warm-up, scraped every
second, then a check that records were sent and written, frames drawn and scrapes answered.
"""

from __future__ import annotations

import argparse
import heapq
import io
import logging
import math
import multiprocessing
import os
import queue
import random
import resource
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from multiprocessing import queues
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file, too
from benchmarks import harness  # noqa: E402
from pipeprof.records import StepRecord  # noqa: E402
from pipeprof.scenario import TelemetryConfig  # noqa: E402
from pipeprof.telemetry.samples import GpuSample, HostSample, ProcSample  # noqa: E402
from pipeprof.telemetry.stream import StreamClient  # noqa: E402

STEPS_PER_S = 20
GPU_S = TelemetryConfig.gpu_interval_ms / 1e3  # the agent's defaults: GPUs at 10 Hz,
HOST_S = TelemetryConfig.host_interval_ms / 1e3  # host and process samples, and a flush
STEP_S = 1.0 / STEPS_PER_S
RANKS_PER_HOST = 8  # one rank per GPU on an 8-GPU node
CORES_PER_HOST = 96  # logical CPUs of an 8-GPU cloud node: one figure per core per host sample
VARIANT = "real"
BATCH = 64
WARMUP_STEPS = 10  # the first steps of a rank carry warmup=True, as pipeprof's own do
READY_TIMEOUT_S = 120.0  # connecting 1,024 ranks takes seconds; minutes means something hangs
DONE_TIMEOUT_S = 60.0  # a sender blocked in sendall gives up after 5 s per flush
DRAIN_TIMEOUT_S = 30.0
DELAY_BIN_S = 0.01  # step delivery delays, kept as a histogram: no memory per record
DELAY_BINS = 1000

TARGET_CPU_PER_100 = 0.05  # cores
TARGET_DELAY_P95_S = 1.0
TARGET_SCRAPE_S = 1.0
TARGET_MB_PER_100 = 10.0
TARGET_GROWTH_MB_PER_100 = 1.0

STEP, GPU, TICK = 0, 1, 2  # a simulated rank's events; TICK: host and process samples, flush


# --- the ranks -------------------------------------------------------------------------------


def host_of(rank: int) -> str:
    return f"node{rank // RANKS_PER_HOST:04d}"


def hello(rank: int, np: int) -> dict[str, Any]:
    """The hello ``RankTelemetry`` puts first; local rank 0 samples its host's GPUs."""
    local = rank % RANKS_PER_HOST
    return {
        "rank": rank,
        "local_rank": local,
        "host": host_of(rank),
        "np": np,
        "t_unix_s": time.time(),
        "nvml": "ok" if local == 0 else "not sampled",
        "gpus": [str(g) for g in range(RANKS_PER_HOST)] if local == 0 else [],
    }


class SimRank:
    """One rank's records, shaped as the rank's own code builds them."""

    def __init__(self, rank: int, np: int, client: StreamClient) -> None:
        self.rank, self.np, self.client = rank, np, client
        self.host, self.local = host_of(rank), rank % RANKS_PER_HOST
        self.rng = random.Random(rank)
        self.step = 0
        self.gpu_ticks = 0
        self.pending = 0  # records put since the last flush

    def put_step(self) -> int:
        wait = self.rng.expovariate(1 / 4.0)
        self.client.put(
            "step",
            StepRecord(
                np=self.np,
                variant=VARIANT,
                rank=self.rank,
                step=self.step,
                warmup=self.step < WARMUP_STEPS,
                input_wait_ms=wait,
                step_time_ms=1e3 * STEP_S + wait + self.rng.gauss(0, 2),
                batch_size=BATCH,
                end_unix_s=time.time(),
                cpu_ms=self.rng.uniform(30, 60),
                host=self.host,
            ),
        )
        self.step += 1
        return 1

    def put_gpus(self) -> int:
        slow = self.gpu_ticks % round(HOST_S / GPU_S) == 0  # as the agent's slow clock
        self.gpu_ticks += 1
        now = time.time()
        for g in range(RANKS_PER_HOST):
            self.client.put(
                "gpu",
                GpuSample(
                    t_unix_s=now,
                    host=self.host,
                    gpu=str(g),
                    local_ranks=str(g),
                    gpu_util_pct=self.rng.uniform(60, 100),
                    mem_util_pct=self.rng.uniform(20, 60),
                    mem_used_mb=self.rng.uniform(30e3, 70e3) if slow else None,
                    mem_total_mb=81920.0 if slow else None,
                    sm_clock_mhz=1410.0 if slow else None,
                    power_w=self.rng.uniform(250, 400) if slow else None,
                    temp_c=self.rng.uniform(50, 75) if slow else None,
                ).to_dict(),
            )
        return RANKS_PER_HOST

    def put_tick(self) -> int:
        now, n = time.time(), 1
        if self.local == 0:
            cores = [self.rng.uniform(0, 100) for _ in range(CORES_PER_HOST)]
            self.client.put(
                "host",
                HostSample(
                    t_unix_s=now,
                    host=self.host,
                    cpu_pct=sum(cores) / len(cores),
                    cpu_per_core_pct=";".join(f"{c:.0f}" for c in cores),
                    mem_used_mb=self.rng.uniform(200e3, 400e3),
                    mem_total_mb=1024e3,
                    disk_read_mb_per_s=self.rng.uniform(0, 500),
                    net_mb_per_s=self.rng.uniform(0, 2000),
                ).to_dict(),
            )
            n += 1
        self.client.put(
            "proc",
            ProcSample(
                t_unix_s=now,
                host=self.host,
                rank=self.rank,
                cpu_pct=self.rng.uniform(100, 800),
                rss_mb=self.rng.uniform(3e3, 6e3),
            ).to_dict(),
        )
        return n


@dataclass
class Sent:
    """What one sender did: records by kind, what its schedule asked for, where they went."""

    by_kind: dict[str, int] = field(default_factory=dict)
    scheduled: dict[str, int] = field(default_factory=dict)
    tcp: int = 0  # records flushed over the ranks' connections
    fallback: int = 0  # records flushed to the run directory (the connection failed)
    connected: int = 0
    connect_s_max: float = 0.0
    lag_s_max: float = 0.0
    cpu_s: float = 0.0

    def add(self, kind: str, n: int, *, sent: bool = True) -> None:
        self.scheduled[kind] = self.scheduled.get(kind, 0) + n
        if sent:
            self.by_kind[kind] = self.by_kind.get(kind, 0) + n


def _flushed(sim: SimRank, sent: Sent) -> None:
    # a flush whose send fails writes the same lines to the fallback file; mode says which
    if sim.client.mode == "tcp":
        sent.tcp += sim.pending
    else:
        sent.fallback += sim.pending
    sim.pending = 0


def sender(
    index: int,
    address: str,
    token: str,
    run_dir: str,
    ranks: range,
    np: int,
    run_s: float,
    go: queues.Queue[float],
    out: queues.Queue[tuple[str, int, Any]],
) -> None:
    """Ranks ``ranks`` of ``np``, each on its own connection, from the start time ``go`` hands
    out for ``run_s`` seconds; puts ("ready", index, None), then ("done", index, Sent) on ``out``.
    Events keep their place in the schedule however late they run; whatever is still due when
    the time is up is counted as missed, not sent late."""
    os.nice(19 - os.nice(0))
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115  a failed connect prints a progress line
    logging.getLogger("pipeprof.stream").setLevel(logging.ERROR)  # counted in Sent instead
    sent = Sent()
    sims = []
    for rank in ranks:
        t = time.perf_counter()
        client = StreamClient(address, token=token, rank=rank, fallback_dir=run_dir)
        sent.connect_s_max = max(sent.connect_s_max, time.perf_counter() - t)
        sent.connected += client.mode == "tcp"
        client.put("hello", hello(rank, np))
        sent.add("hello", 1)
        sims.append(SimRank(rank, np, client))
        sims[-1].pending = 1
    out.put(("ready", index, None))
    start = go.get(timeout=READY_TIMEOUT_S)
    end = start + run_s
    # ranks start apart, as real ones do: each its own phase of the flush and of the steps
    events: list[tuple[float, int, int]] = []
    for i, sim in enumerate(sims):
        tick = start + sim.rng.uniform(0, HOST_S)
        events.append((start + sim.rng.uniform(0, STEP_S), STEP, i))
        events.append((tick, TICK, i))
        if sim.local == 0:
            events.append((tick, GPU, i))
    heapq.heapify(events)
    interval = {STEP: STEP_S, GPU: GPU_S, TICK: HOST_S}
    cpu0 = time.process_time()
    while events and events[0][0] < end and (now := time.monotonic()) < end:
        due, what, i = heapq.heappop(events)
        if now < due:
            time.sleep(due - now)
        else:
            sent.lag_s_max = max(sent.lag_s_max, now - due)
        sim = sims[i]
        if what == STEP:
            sim.pending += sim.put_step()
            sent.add("step", 1)
        elif what == GPU:
            sim.pending += sim.put_gpus()
            sent.add("gpu", RANKS_PER_HOST)
        else:
            n = sim.put_tick()
            sim.pending += n
            sent.add("proc", 1)
            if n > 1:
                sent.add("host", 1)
            sim.client.flush()
            _flushed(sim, sent)
        # the next one at its place in the schedule, however late this one was
        heapq.heappush(events, (due + interval[what], what, i))
    for due, what, i in events:  # what the schedule asked for and the sender had no time to do
        missed = math.ceil((end - due) / interval[what]) if due < end else 0
        if what == STEP:
            sent.add("step", missed, sent=False)
        elif what == GPU:
            sent.add("gpu", missed * RANKS_PER_HOST, sent=False)
        else:
            sent.add("proc", missed, sent=False)
            if sims[i].local == 0:
                sent.add("host", missed, sent=False)
    for sim in sims:  # as the agent's stop: what is queued goes out, then the connection closes
        sim.client.close()
        _flushed(sim, sent)
    sent.cpu_s = time.process_time() - cpu0
    out.put(("done", index, sent))


def scraper(
    url: str,
    every_s: float,
    warmup_s: float,
    seconds: float,
    go: queues.Queue[float],
    out: queues.Queue[tuple[str, int, Any]],
) -> None:
    """Read ``url`` every ``every_s`` through the measured window, as Prometheus would; puts
    ("done", -1, [(seconds, bytes), ...]) on ``out``."""
    os.nice(19 - os.nice(0))
    start = go.get(timeout=READY_TIMEOUT_S) + warmup_s
    scrapes: list[tuple[float, int]] = []
    at = start
    while at < start + seconds:
        time.sleep(max(0.0, at - time.monotonic()))
        t = time.perf_counter()
        with urllib.request.urlopen(url, timeout=30) as resp:
            size = len(resp.read())
        scrapes.append((time.perf_counter() - t, size))
        at += every_s
    out.put(("done", -1, scrapes))


# --- the launcher ----------------------------------------------------------------------------


@dataclass
class Figures:
    ranks: int
    senders: int
    seconds: float
    warmup_s: float
    asked_per_s: dict[str, float]
    sent: dict[str, int]
    scheduled: dict[str, int]
    connected: int
    connect_s_max: float
    lag_s_max: float
    senders_cpu_s: float
    sent_tcp: int
    sent_fallback: int
    received: int
    received_in_window: int
    written: int
    ingested: int
    malformed: int
    backlog: int
    drain_s: float
    delay_s: tuple[float, float, float]  # p50, p95, max of step delivery
    cpu_cores: float
    cpu_threads: dict[str, float]  # cores, by thread
    frames: list[tuple[float, float]]  # (wall s, CPU s) of each frame in the window
    scrapes: list[tuple[float, int]]
    rss_mb: tuple[float, float, float, float]  # before, window start, window end, peak
    threads_left: list[str]
    exit_codes: list[int | None]


class Discard(io.StringIO):
    """A terminal that keeps nothing: frames are rendered and written, then dropped."""

    def isatty(self) -> bool:
        return True

    def write(self, s: str) -> int:
        return len(s)


def launcher(
    n: int, senders: int, seconds: float, warmup_s: float, scrape_s: float, out: Any
) -> None:
    """One rank count's measurement, in a process of its own; puts its ``Figures`` on ``out``."""
    try:
        out.put(measure(n, senders, seconds, warmup_s, scrape_s))
    except harness.Failed as exc:
        sys.exit(f"error: {exc}")


def measure(n: int, senders: int, seconds: float, warmup_s: float, scrape_s: float) -> Figures:
    # imported here, not at the top: the load processes spawn from this module and need none
    # of it (pandas and rich would double their start-up and their memory)
    import psutil
    from rich.console import Console

    from pipeprof.progress import Launch, Plan, VariantStart
    from pipeprof.renderers.metrics import MetricsExporter
    from pipeprof.reporting import FanOut, Reporter
    from pipeprof.tui.dashboard import LiveDashboard
    from pipeprof.tui.reporter import DashboardReporter
    from pipeprof.tui.state import DashboardState
    from pipeprof.workflows.live import RecordStream

    class Tally(Reporter):
        """Counts the records the collector hands on, and how late the steps come."""

        def __init__(self) -> None:
            self.total = 0
            self.measuring = False
            self.delays = [0] * (DELAY_BINS + 1)

        def record(self, record: dict) -> None:
            if record["kind"] == "bye":  # what a client's close adds: not sent by the ranks
                return
            self.total += 1
            if self.measuring and record["kind"] == "step":
                late = time.time() - record["end_unix_s"]
                self.delays[min(DELAY_BINS, max(0, int(late / DELAY_BIN_S)))] += 1

    class TimedDashboard(LiveDashboard):
        """The dashboard, keeping each redraw's times (its own loop keeps only its pacing)."""

        def __init__(
            self,
            snapshot: Callable[[], DashboardState],
            console: Console,
            frames: list[tuple[float, float, float]],
        ) -> None:
            super().__init__(snapshot, console)
            self.frame_times = frames  # (when it ended, wall s, CPU s)

        def redraw(self) -> float:
            t = time.perf_counter()
            cpu = super().redraw()
            self.frame_times.append((time.monotonic(), time.perf_counter() - t, cpu))
            return cpu

    class TimedDashboardReporter(DashboardReporter):
        """The dashboard's reporter, drawing the same frames through a ``TimedDashboard``."""

        def __init__(self, console: Console) -> None:
            super().__init__(console, command="compare", scenario="collector", steps_total=0)
            self.frames: list[tuple[float, float, float]] = []

        def _ensure_live(self) -> None:  # DashboardReporter's, with the timed dashboard
            if self._dash is None:
                dash = TimedDashboard(self.state.snapshot, self.console, self.frames)
                self._dash = dash.__enter__()

    me = psutil.Process()
    rss_before = me.memory_info().rss / 2**20
    ctx = multiprocessing.get_context("spawn")
    go: queues.Queue[float] = ctx.Queue()
    done: queues.Queue[tuple[str, int, Any]] = ctx.Queue()
    children: list[multiprocessing.process.BaseProcess] = []
    tally = Tally()
    ui = TimedDashboardReporter(Console(file=Discard(), force_terminal=True, width=200, height=60))
    # closed in the reverse order: the recorder, the reporters, the load; the run directory last
    with tempfile.TemporaryDirectory(prefix="pipeprof-collector-bench-") as tmp, ExitStack() as up:
        up.callback(_end, children)
        exporter = MetricsExporter(0, command="compare", scenario="collector", run_dir=tmp)
        reporter = FanOut(tally, ui, exporter)
        up.callback(reporter.close)
        stream = RecordStream(Path(tmp), reporter)
        up.callback(stream.close)
        with stream:
            reporter.progress(Plan(worker_counts=[n], variants=[VARIANT]))
            reporter.progress(Launch(np=n, of_variants=1))
            stream.begin_launch()
            reporter.progress(VariantStart(np=n, variant=VARIANT, index=0, of_variants=1))
            per = -(-n // senders)
            for k in range(senders):
                ranks = range(k * per, min(n, (k + 1) * per))
                load = (k, stream.address, stream.token, tmp, ranks, n, warmup_s + seconds)
                children.append(
                    ctx.Process(
                        target=sender, args=(*load, go, done), name=f"sender{k}", daemon=True
                    )
                )
            scrape = (exporter.url, scrape_s, warmup_s, seconds, go, done)
            children.append(ctx.Process(target=scraper, args=scrape, name="scraper", daemon=True))
            for p in children:
                p.start()
            for _ in range(senders):
                _get(done, children, READY_TIMEOUT_S, "ready")
            start = time.monotonic() + 0.5
            for _ in children:
                go.put(start)
            w0, w1 = start + warmup_s, start + warmup_s + seconds
            time.sleep(max(0.0, w0 - time.monotonic()))
            cpu0, threads0, got0 = time.process_time(), _thread_cpu(me), tally.total
            rss0 = me.memory_info().rss / 2**20
            tally.measuring = True
            time.sleep(max(0.0, w1 - time.monotonic()))
            tally.measuring = False
            cpu1, threads1, got1 = time.process_time(), _thread_cpu(me), tally.total
            rss1 = me.memory_info().rss / 2**20
            sent, scrapes = Sent(), []
            for _ in children:
                _, k, what = _get(done, children, DONE_TIMEOUT_S, "done")
                if k < 0:
                    scrapes = what
                else:
                    _merge(sent, what)
            # the ranks have stopped: what they sent and the collector has not read yet
            backlog, t = sent.tcp - tally.total, time.monotonic()
            while tally.total < sent.tcp and time.monotonic() - t < DRAIN_TIMEOUT_S:
                time.sleep(0.05)
            drain_s = time.monotonic() - t
            live = _records(stream.recorder.counts)
            stream.after_launch()  # takes in the files of ranks whose connection failed
            written = _records(stream.recorder.counts)
    wall = w1 - w0
    cores = (cpu1 - cpu0) / wall
    busy = {name: (threads1[name] - threads0.get(name, 0.0)) / wall for name in threads1}
    busy["other"] = cores - sum(busy.values())
    return Figures(
        ranks=n,
        senders=senders,
        seconds=seconds,
        warmup_s=warmup_s,
        asked_per_s=_asked_per_s(n),
        sent=sent.by_kind,
        scheduled=sent.scheduled,
        connected=sent.connected,
        connect_s_max=sent.connect_s_max,
        lag_s_max=sent.lag_s_max,
        senders_cpu_s=sent.cpu_s,
        sent_tcp=sent.tcp,
        sent_fallback=sent.fallback,
        received=tally.total,
        received_in_window=got1 - got0,
        written=written,
        ingested=written - live,
        malformed=stream.recorder.malformed_count,
        backlog=max(0, backlog),
        drain_s=drain_s,
        delay_s=_binned_quantiles(tally.delays),
        cpu_cores=cores,
        cpu_threads=busy,
        frames=[(w, c) for at, w, c in ui.frames if w0 <= at < w1],
        scrapes=scrapes,
        rss_mb=(rss_before, rss0, rss1, _peak_rss_mb()),
        threads_left=[t.name for t in threading.enumerate() if t.name.startswith("pipeprof")],
        exit_codes=[p.exitcode for p in children],
    )


def _end(children: list[multiprocessing.process.BaseProcess]) -> None:
    """Wait for the load processes; end those that outlive their work (after a failure)."""
    for p in children:
        p.join(timeout=10)
        if p.is_alive():
            p.terminate()
            p.join()


def _records(counts: dict[str, int]) -> int:
    """Records the recorder wrote, less the bye each client's close adds (not counted sent)."""
    return sum(n for kind, n in counts.items() if kind != "bye")


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10  # KiB on Linux


def _get(
    q: queues.Queue[tuple[str, int, Any]],
    children: list[multiprocessing.process.BaseProcess],
    timeout_s: float,
    what: str,
) -> tuple[str, int, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return q.get(timeout=1.0)
        except queue.Empty:
            if dead := [p.name for p in children if p.exitcode not in (None, 0)]:
                raise harness.Failed(f"{', '.join(dead)} ended before saying '{what}'") from None
    raise harness.Failed(f"no '{what}' from the load processes in {timeout_s:g} s")


def _merge(into: Sent, part: Sent) -> None:
    for kind, n in part.by_kind.items():
        into.by_kind[kind] = into.by_kind.get(kind, 0) + n
    for kind, n in part.scheduled.items():
        into.scheduled[kind] = into.scheduled.get(kind, 0) + n
    into.tcp += part.tcp
    into.fallback += part.fallback
    into.connected += part.connected
    into.connect_s_max = max(into.connect_s_max, part.connect_s_max)
    into.lag_s_max = max(into.lag_s_max, part.lag_s_max)
    into.cpu_s += part.cpu_s


def _thread_cpu(proc: Any) -> dict[str, float]:
    """CPU seconds of the launcher's own threads so far, by name."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    wanted = ("pipeprof-collector", "pipeprof-dashboard")
    return {
        names[t.id]: t.user_time + t.system_time
        for t in proc.threads()
        if names.get(t.id) in wanted
    }


def _asked_per_s(n: int) -> dict[str, float]:
    hosts = -(-n // RANKS_PER_HOST)
    return {
        "step": n * STEPS_PER_S,
        "proc": n / HOST_S,
        "gpu": hosts * RANKS_PER_HOST / GPU_S,
        "host": hosts / HOST_S,
    }


def _binned_quantiles(bins: list[int]) -> tuple[float, float, float]:
    total = sum(bins)
    if not total:
        return (float("nan"),) * 3
    found, seen = [], 0
    wanted = [0.5 * total, 0.95 * total]
    for i, c in enumerate(bins):
        seen += c
        while wanted and seen >= wanted[0]:
            found.append((i + 1) * DELAY_BIN_S)
            wanted.pop(0)
    top = max(i for i, c in enumerate(bins) if c)
    return found[0], found[1], (top + 1) * DELAY_BIN_S


# --- output ----------------------------------------------------------------------------------


def _q(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return (
        ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")
    )


def _row(label: str, figure: str, target: str = "", ok: bool | None = None) -> None:
    verdict = "" if ok is None else "PASS" if ok else "FAIL"
    print(f"  {label:<30} {figure:<44} {target:<18} {verdict}".rstrip())


def print_block(f: Figures) -> None:
    from pipeprof.tui.dashboard import CPU_BUDGET, MAX_INTERVAL_S

    hosts = -(-f.ranks // RANKS_PER_HOST)
    asked = sum(f.asked_per_s.values())
    print(
        f"{f.ranks:,} ranks ({hosts} hosts x {RANKS_PER_HOST}) · {f.senders} sender processes · "
        f"{f.seconds:g} s measured after {f.warmup_s:g} s warm-up · {os.cpu_count()} cores here"
    )
    _row(
        "load asked",
        f"{asked:,.0f} records/s ("
        + ", ".join(f"{k} {v:,.0f}" for k, v in f.asked_per_s.items())
        + f"), {f.ranks / HOST_S:,.0f} flushes/s",
    )
    sent, scheduled = sum(f.sent.values()), sum(f.scheduled.values())
    share = sent / scheduled if scheduled else float("nan")
    _row(
        "ranks connected over TCP",
        f"{f.connected:,}/{f.ranks:,} (slowest {1e3 * f.connect_s_max:.0f} ms)",
    )
    _row(
        "senders kept the schedule",
        f"{100 * share:.1f}% (late by {f.lag_s_max:.2f} s at most; "
        f"{f.senders_cpu_s / (f.seconds + f.warmup_s):.2f} cores)",
        "below 99%: the load was lighter than asked" if share < 0.99 else "",
    )
    _row("records sent", f"{sent:,} ({f.sent_fallback:,} to fallback files)")
    _row(
        "received by the collector",
        f"{f.received:,} ({f.received_in_window / f.seconds:,.0f}/s in the window)",
    )
    _row("written to the run directory", f"{f.written:,} ({f.ingested:,} from fallback files)")
    lost = sent - f.written
    twice = " (fewer than written: a failed flush's lines went both ways)" if lost < 0 else ""
    _row("records lost", f"{lost:,}{twice}", "target 0", lost == 0)
    _row("malformed", f"{f.malformed:,}", "target 0", f.malformed == 0)
    _row("backlog when the ranks stopped", f"{f.backlog:,} records, drained in {f.drain_s:.1f} s")
    p50, p95, top = f.delay_s
    _row(
        "step delivery p50/p95/max",
        f"{p50:.2f}/{p95:.2f}/{top:.2f} s",
        f"p95 <= {TARGET_DELAY_P95_S:g} s",
        p95 <= TARGET_DELAY_P95_S,
    )
    by = ", ".join(f"{k.removeprefix('pipeprof-')} {v:.3f}" for k, v in f.cpu_threads.items())
    _row("launcher CPU", f"{f.cpu_cores:.3f} cores ({by})")
    per_100 = 100 * f.cpu_cores / f.ranks
    _row(
        "launcher CPU per 100 ranks",
        f"{per_100:.3f} cores",
        f"<= {TARGET_CPU_PER_100:g} cores",
        per_100 <= TARGET_CPU_PER_100,
    )
    walls, cpus = [w for w, _ in f.frames], [c for _, c in f.frames]
    target_frame_s = CPU_BUDGET * MAX_INTERVAL_S
    every = f" (one per {f.seconds / len(walls):.2f} s)" if walls else ""
    _row(
        "dashboard frames, wall",
        f"{len(walls)}{every}; p50/p95/max "
        f"{1e3 * _q(walls, 0.5):.1f}/{1e3 * _q(walls, 0.95):.1f}/{1e3 * max(walls, default=float('nan')):.1f} ms",
    )
    _row(
        "dashboard frame CPU",
        f"p50/p95/max {1e3 * _q(cpus, 0.5):.1f}/{1e3 * _q(cpus, 0.95):.1f}/"
        f"{1e3 * max(cpus, default=float('nan')):.1f} ms",
        f"p95 <= {1e3 * target_frame_s:g} ms",
        bool(cpus) and _q(cpus, 0.95) <= target_frame_s,
    )
    took = [s for s, _ in f.scrapes]
    _row(
        "Prometheus scrape",
        f"{len(took)} x, p50/max {_q(took, 0.5):.3f}/{max(took, default=float('nan')):.3f} s, "
        f"{max((b for _, b in f.scrapes), default=0) / 2**20:.2f} MB",
        f"<= {TARGET_SCRAPE_S:g} s",
        bool(took) and max(took) <= TARGET_SCRAPE_S,
    )
    before, w0, w1, peak = f.rss_mb
    _row(
        "launcher RSS",
        f"{before:.0f} before, {w0:.0f} -> {w1:.0f} in the window, peak {peak:.0f} MB",
    )
    per_100_mb = 100 * (peak - before) / f.ranks
    _row(
        "memory per 100 ranks",
        f"{per_100_mb:.1f} MB",
        f"<= {TARGET_MB_PER_100:g} MB",
        per_100_mb <= TARGET_MB_PER_100,
    )
    growth = 100 * (w1 - w0) / f.ranks
    _row(
        "growth in the window",
        f"{growth:.2f} MB per 100 ranks",
        f"<= {TARGET_GROWTH_MB_PER_100:g} MB",
        growth <= TARGET_GROWTH_MB_PER_100,
    )
    clean = not f.threads_left and all(c == 0 for c in f.exit_codes)
    _row(
        "shut down",
        "clean" if clean else f"threads left {f.threads_left or 'none'}, exit codes {f.exit_codes}",
    )
    print()


# --- main ------------------------------------------------------------------------------------


def _room_for(n: int) -> str | None:
    """Raise the open files limit to its hard limit if ``n`` connections need it; why it cannot
    be done, else None."""
    need = n + 256  # the launcher holds every connection, its run files, the exporter's socket
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            return f"the open files limit is {hard} (hard); {n} ranks need {need}: raise it (ulimit -Hn)"
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        print(f"(raised the open files limit from {soft} to {hard}, its hard limit)")
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", default="256,1024", help="simulated rank counts, comma-separated")
    ap.add_argument("--seconds", type=float, default=20.0, help="the measured window")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds before the window")
    ap.add_argument("--senders", type=int, default=4, help="processes the ranks are shared by")
    ap.add_argument("--scrape-s", type=float, default=5.0, help="Prometheus's scrape interval")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, then check the figures (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.ranks, args.seconds, args.warmup, args.senders, args.scrape_s = "16", 2.0, 1.0, 1, 1.0
    counts = [int(x) for x in args.ranks.split(",") if x.strip()]
    ctx = multiprocessing.get_context("spawn")
    for n in counts:
        if (why := _room_for(n)) is not None:
            print(f"{n:,} ranks: skipped: {why}\n")
            continue
        out: queues.Queue[Figures] = ctx.Queue()
        proc = ctx.Process(
            target=launcher,
            args=(n, min(args.senders, n), args.seconds, args.warmup, args.scrape_s, out),
            name=f"launcher{n}",
        )
        proc.start()
        figures = None
        while figures is None and (proc.is_alive() or not out.empty()):
            try:
                figures = out.get(timeout=1.0)
            except queue.Empty:
                continue
        proc.join()
        if figures is None:
            raise harness.Failed(
                f"{n} ranks: the launcher process ended (exit {proc.exitcode}) without figures"
            )
        print_block(figures)
        if args.smoke:
            smoke_checks(figures)
    return 0


def smoke_checks(f: Figures) -> None:
    """``--smoke``: every rank connected, records went out and were written, none malformed,
    the dashboard drew and the exporter answered: the path ran, whatever its figures' targets."""
    check = harness.smoke_check
    check(f.connected == f.ranks, f"{f.connected} of {f.ranks} ranks connected")
    check(_records(f.sent) > 0 and f.written > 0, f"sent {f.sent}, written {f.written}")
    check(f.malformed == 0, f"{f.malformed} malformed records")
    check(bool(f.frames), "the dashboard drew no frame in the window")
    check(bool(f.scrapes) and all(size > 0 for _, size in f.scrapes), f"scrapes {f.scrapes}")
    check(harness.finite_positive(f.cpu_cores), f"the launcher's CPU {f.cpu_cores}")


if __name__ == "__main__":
    harness.entry(main)
