"""What telemetry and the live dashboard cost training, measured side by side in one run.

Part 1: training throughput with telemetry and the dashboard ON (pipeprof under a
pseudo-terminal, so the rich Live dashboard really redraws, NVML/psutil sampling and the TCP
record stream running) against OFF (``--no-telemetry --no-dashboard``). Each round runs both
at once, taking turns on the machine a second at a time (``timeslice``: the other side's
processes stopped meanwhile), so the machine's drift hits both alike; a side's rate counts
its measured steps inside its own turns. The verdict is the median of the per-round ON/OFF
ratios. Target: >= 0.99.

Part 2: the sampler thread's own CPU time at 10 Hz GPU sampling (the default: GPUs every
100 ms, host and process every 500 ms), from ``time.thread_time`` inside the thread, over a
fixed wall time. Without a GPU on this machine, the GPU path is exercised with a stand-in
for NVML (``StandInNvml``: two GPUs, and eight), so the figure covers pipeprof's own work and
psutil, not the driver's ioctl cost. Target: under 1% of one core.

Part 3: the same comparison in CPU time, which machine drift barely moves: the launcher's
extra CPU in the ON runs of part 1 over the OFF runs (collector, recorder, dashboard), the
rank's per-step put into the record stream (timed here) and its sampler thread (part 2),
against the ranks' own CPU. Training that keeps the cores busy loses at most that share.

``--smoke``: all parts, tiny (1 round, 32 px, batch 8, 30 steps, 1 s sampling), then checks figures.

    .venv/bin/python benchmarks/telemetry_overhead.py [--rounds 6] [--steps 300] [--slice-s 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

# run as a file (python benchmarks/NAME.py): this checkout's benchmarks and pipeprof first
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness, timeslice  # noqa: E402

# --smoke: the defaults it gives the other flags (one given explicitly still wins)
SMOKE = dict(
    rounds=1,
    steps=30,
    warmup=3,
    slice_s=0.5,
    sampler_seconds=1.0,
    sets=[
        "train.batch_size=8",
        "data.image_size=32",
        "data.generate.images=64",
        "data.generate.size=96",
    ],
)


@dataclass(frozen=True)
class StandInGpu:
    """What a stand-in GPU answers (a busy H100's figures); also its NVML handle."""

    uuid: str
    util_pct: int = 50
    mem_util_pct: int = 20
    mem_used: int = 4 * 2**30
    mem_total: int = 80 * 2**30
    sm_clock_mhz: int = 1980
    power_mw: int = 300_000
    temp_c: int = 60


class StandInNvml:
    """The functions of the ``pynvml`` module that pipeprof's GPU sampler calls (through
    ``pipeprof.telemetry.nvml.Nvml``), answered from memory for ``n`` GPUs: the GPU path on a
    host without one. Every query answers, so none is marked unsupported and each sample makes
    as many calls as on a real GPU; what it leaves out is the driver's own cost."""

    NVML_ERROR_NOT_SUPPORTED = 3  # read by Nvml only when a query raises; none does here

    def __init__(self, n: int) -> None:
        self.gpus = [StandInGpu(uuid=f"GPU-{i}") for i in range(n)]

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> StandInGpu:
        return self.gpus[i]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> StandInGpu:
        return next(g for g in self.gpus if g.uuid == uuid)

    def nvmlDeviceGetUtilizationRates(self, h: StandInGpu) -> SimpleNamespace:
        return SimpleNamespace(gpu=h.util_pct, memory=h.mem_util_pct)

    def nvmlDeviceGetMemoryInfo(self, h: StandInGpu) -> SimpleNamespace:
        return SimpleNamespace(used=h.mem_used, total=h.mem_total, free=h.mem_total - h.mem_used)

    def nvmlDeviceGetClockInfo(self, h: StandInGpu, clock_type: int) -> int:
        return h.sm_clock_mhz

    def nvmlDeviceGetPowerUsage(self, h: StandInGpu) -> int:
        return h.power_mw

    def nvmlDeviceGetTemperature(self, h: StandInGpu, sensor: int) -> int:
        return h.temp_c


class Cpu:
    """CPU seconds of a pipeprof launcher itself (collector, recorder, dashboard, printing) and
    of its rank processes, read each time its side is paused (the last reading before exit)."""

    def __init__(self) -> None:
        self.launcher_s = 0.0
        self.ranks: dict[int, float] = {}

    def sample(self, side: timeslice.Side) -> None:
        import psutil

        try:
            launcher = psutil.Process(side.pid)
            t = launcher.cpu_times()
            self.launcher_s = t.user + t.system
            for child in launcher.children(recursive=True):
                if "pipeprof.rank" in " ".join(child.cmdline()):
                    c = child.cpu_times()
                    self.ranks[child.pid] = c.user + c.system
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass

    @property
    def ranks_s(self) -> float:
        return sum(self.ranks.values())


def part1(
    rounds: int,
    steps: int,
    slice_s: float,
    warmup: int = 20,
    sets: list[str] | None = None,
    ratios: dict[str, list[float]] | None = None,
) -> dict[str, list[float]]:
    """Throughput ON/OFF per round; returns the launcher's and ranks' CPU per side for part 3.
    ``sets``: ``--set KEY=VALUE`` overrides of every run; ``ratios``, where given, receives
    each variant's per-round ratios."""
    sets = sets or []
    base = [
        *harness.PIPEPROF,
        "run",
        "quickstart",
        "--np",
        "1",
        "--with-synthetic",
        "--steps",
        str(steps),
        "--warmup",
        str(warmup),
        "--no-report",
        *(arg for s in sets for arg in ("--set", s)),
    ]
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="150", LINES="50")
    ratios = {} if ratios is None else ratios
    ratios.update(synthetic=[], real=[])
    cpu: dict[str, list[float]] = {
        "launcher ON": [],
        "launcher OFF": [],
        "ranks ON": [],
        "running ON": [],
        "running OFF": [],
        "step ms ON": [],
    }
    harness.prepared_with("quickstart", sets)  # once, before two runs would both want to
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            used = {"ON": Cpu(), "OFF": Cpu()}
            outs = {side: Path(tmp) / f"{side}{r}" for side in used}
            on = timeslice.Side(
                "ON",
                base + ["--out", str(outs["ON"])],
                env=env,
                terminal=True,
                cwd=str(harness.REPO),
                on_pause=used["ON"].sample,
            )
            off = timeslice.Side(
                "OFF",
                base + ["--no-telemetry", "--no-dashboard", "--out", str(outs["OFF"])],
                env=env,
                cwd=str(harness.REPO),
                on_pause=used["OFF"].sample,
            )
            first, second = harness.turns([on, off], r)  # who starts: alternate
            timeslice.run_sliced(first, second, slice_s=slice_s)
            for side in (on, off):
                timeslice.check(side)
                cpu[f"launcher {side.name}"].append(used[side.name].launcher_s)
                cpu[f"running {side.name}"].append(side.running_s)
            cpu["ranks ON"].append(used["ON"].ranks_s)
            summary = harness.summary(outs["ON"])
            cpu["step ms ON"].append(
                float(summary["step_time_ms_mean"].min())
            )  # the fastest variant's
            line = []
            for v in ratios:
                (r_on, n_on), (r_off, n_off) = (
                    timeslice.run_rate(outs[s.name], v, s.windows) for s in (on, off)
                )
                ratios[v].append(r_on / r_off)
                line.append(
                    f"{v} ON {r_on:7.1f} ({n_on} steps) OFF {r_off:7.1f} ({n_off}) ratio {r_on / r_off:.3f}"
                )
            print(f"  round {r + 1} ({first.name} first): " + " | ".join(line), flush=True)
    print()
    timeslice.print_medians(ratios, 0.99)
    return cpu


def put_cost(n: int = 20000) -> float:
    """Seconds of the training thread's CPU per ``telemetry.put`` of one step record, into a
    real stream to a real collector (what a rank does after every step)."""
    from pipeprof.records import StepRecord
    from pipeprof.telemetry.agent import RankTelemetry
    from pipeprof.telemetry.nvml import Nvml
    from pipeprof.telemetry.recorder import Recorder
    from pipeprof.telemetry.stream import Collector, StreamClient

    with tempfile.TemporaryDirectory() as tmp:
        rec = Recorder(Path(tmp))
        with Collector(rec.write) as col:
            agent = RankTelemetry(
                StreamClient(col.address, rank=0),
                rank=0,
                local_rank=0,
                local_size=1,
                gpu_interval_s=0.1,
                host_interval_s=0.5,
                nvml_factory=Nvml,
            ).start()
            record = StepRecord(
                np=1,
                variant="real",
                rank=0,
                step=0,
                warmup=False,
                input_wait_ms=0.1,
                step_time_ms=20.0,
                batch_size=32,
                end_unix_s=time.time(),
            )
            t0 = time.thread_time()
            for _ in range(n):
                agent.put("step", record)
            spent = time.thread_time() - t0
            agent.stop()
        rec.close()
    return spent / n


def part3(cpu: dict[str, list[float]], sampler_pct: float) -> dict[str, float]:
    """The instrument's CPU against the training's, per second of an ON run: the launcher's
    extra CPU over an OFF run (collector, recorder, dashboard), the rank's sampler thread and
    its per-step puts. On a host whose cores training keeps busy, that CPU is what training
    loses at most: ON/OFF >= 1 - instrument / (training + instrument)."""
    on, off = (
        [a / t for a, t in zip(cpu[f"launcher {side}"], cpu[f"running {side}"])]
        for side in ("ON", "OFF")
    )
    extra = statistics.median(
        [a - b for a, b in zip(on, off)]
    )  # can come out below 0: noise around a small figure
    launcher = max(0.0, extra)
    ranks = statistics.median([a / t for a, t in zip(cpu["ranks ON"], cpu["running ON"])])
    per_put = put_cost()
    steps_per_s = 1000 / statistics.median(
        cpu["step ms ON"]
    )  # the fastest variant's rate: puts at their most often
    puts = per_put * steps_per_s
    sampler = sampler_pct / 100
    instrument = launcher + puts + sampler
    bound = 1 - instrument / (ranks + instrument)
    figures = dict(
        launcher=extra,
        put=per_put,
        sampler=sampler,
        ranks=ranks,
        steps_per_s=steps_per_s,
        bound=bound,
    )
    print(
        f"  launcher's extra CPU (ON - OFF, median)   {1e3 * extra:7.1f} ms per s of run "
        f"(ON {1e3 * statistics.median(on):.1f}, OFF {1e3 * statistics.median(off):.1f}: start-up and summary "
        "included on both sides)"
    )
    print(
        f"  rank's per-step put                       {1e6 * per_put:7.1f} µs per step × {steps_per_s:.0f} steps/s "
        f"= {1e3 * puts:5.2f} ms per s"
    )
    print(f"  rank's sampler thread (part 2, this host)  {1e3 * sampler:7.2f} ms per s")
    print(f"  training's own CPU (ranks, ON runs)       {1e3 * ranks:7.1f} ms per s")
    print(
        f"  ON/OFF at worst: 1 - {1e3 * instrument:.1f} / ({1e3 * ranks:.1f} + {1e3 * instrument:.1f}) = {bound:.3f}"
        f"   {'PASS' if bound >= 0.99 else 'FAIL'} (target >= 0.99)"
    )
    return figures


def part2(seconds: float, samplers: list[tuple[str, float, int, int]] | None = None) -> float:
    """Prints each sampler's CPU; returns the host-only (no GPU) sampler's % of one core.
    ``samplers``, where given, receives each one's (label, % of a core, GPU and host samples)."""
    first: float | None = None
    from pipeprof.telemetry.agent import RankTelemetry
    from pipeprof.telemetry.nvml import Nvml
    from pipeprof.telemetry.recorder import Recorder
    from pipeprof.telemetry.stream import Collector, StreamClient

    fake2, fake8 = StandInNvml(2), StandInNvml(8)
    for label, factory, local in (
        ("real NVML (none on this host) + psutil", Nvml, 2),
        ("fake 2-GPU NVML + psutil", lambda: Nvml(fake2), 2),
        ("fake 8-GPU NVML + psutil (an 8-GPU node)", lambda: Nvml(fake8), 8),
    ):
        with tempfile.TemporaryDirectory() as tmp:
            rec = Recorder(Path(tmp))
            with Collector(rec.write) as col:
                agent = RankTelemetry(
                    StreamClient(col.address, rank=0),
                    rank=0,
                    local_rank=0,
                    local_size=local,
                    gpu_interval_s=0.1,
                    host_interval_s=0.5,
                    nvml_factory=factory,
                ).start()
                t0 = time.monotonic()
                time.sleep(seconds)
                agent.stop()
                wall = time.monotonic() - t0
            rec.close()
            pct = 100 * agent.cpu_time_s / wall
            first = pct if first is None else first
            if samplers is not None:
                samplers.append((label, pct, rec.counts.get("gpu", 0), rec.counts.get("host", 0)))
            print(
                f"  {label:<42} {agent.cpu_time_s * 1e3:7.1f} ms CPU in {wall:4.1f} s = {pct:5.2f}% of one core "
                f"({rec.counts.get('gpu', 0)} GPU, {rec.counts.get('host', 0)} host samples)  "
                f"{'PASS' if pct < 1.0 else 'FAIL'} (< 1%)"
            )
    assert first is not None
    return first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--slice-s", type=float, default=1.0, help="each side's turn on the machine")
    ap.add_argument("--sampler-seconds", type=float, default=20.0)
    ap.add_argument("--sampler-only", action="store_true", help="part 2 alone")
    ap.add_argument("--warmup", type=int, default=20, help="warm-up steps of each variant")
    ap.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a scenario override given to every run of part 1 (repeatable)",
    )
    ap.add_argument(
        "--smoke", action="store_true", help="every part, tiny, then a check of its figures (CI)"
    )
    args = harness.parse_smoke(ap, SMOKE)
    cpu = None
    ratios: dict[str, list[float]] = {}
    samplers: list[tuple[str, float, int, int]] = []
    figures: dict[str, float] = {}
    if not args.sampler_only:
        print(
            f"telemetry overhead · {os.cpu_count()} cores · quickstart, np=1, {args.steps} measured steps per variant"
        )
        print(
            f"part 1: training samples/s, telemetry + live dashboard ON vs OFF (taking turns every {args.slice_s:g} s)"
        )
        cpu = part1(args.rounds, args.steps, args.slice_s, args.warmup, args.sets, ratios)
        print()
    print(f"part 2: the sampler thread's own CPU at 10 Hz, over {args.sampler_seconds:.0f} s")
    sampler_pct = part2(args.sampler_seconds, samplers)
    if cpu is not None:
        print()
        print(
            "part 3: the instrument's CPU against the training's (CPU time: none of part 1's machine drift)"
        )
        figures = part3(cpu, sampler_pct)
    if args.smoke:
        smoke_check(ratios, samplers, figures, parts=2 if args.sampler_only else 3)


def smoke_check(
    ratios: dict[str, list[float]],
    samplers: list[tuple[str, float, int, int]],
    figures: dict[str, float],
    parts: int,
) -> None:
    """The figures the parts printed, there and sane: each variant's ON/OFF ratio finite and
    > 0 (part 1), each sampler's CPU share finite and >= 0 with host samples taken, and GPU
    samples from the stand-in GPUs (part 2), part 3's CPU figures finite, its bound in (0, 1].
    Not the targets: those take a full run on a quiet machine."""
    if parts == 3:
        for variant in ("synthetic", "real"):
            got = ratios.get(variant, [])
            harness.smoke_check(bool(got), f"part 1: no ON/OFF ratio of {variant}")
            for r, ratio in enumerate(got, 1):
                harness.smoke_check(
                    harness.finite_positive(ratio),
                    f"part 1 round {r}: {variant} ON/OFF = {ratio!r}",
                )
    harness.smoke_check(len(samplers) == 3, f"part 2: {len(samplers)} of 3 samplers measured")
    for i, (label, pct, gpu, host) in enumerate(samplers):
        harness.smoke_check(pct == pct and 0 <= pct < float("inf"), f"part 2: {label}: {pct!r}%")
        harness.smoke_check(host > 0, f"part 2: {label}: no host sample")
        # the first is this host's own NVML, none here; the others are the stand-in's GPUs
        harness.smoke_check(gpu > 0 or i == 0, f"part 2: {label}: no GPU sample")
    if parts == 3:
        for name in ("launcher", "put", "sampler", "ranks", "steps_per_s", "bound"):
            value = figures.get(name, float("nan"))
            harness.smoke_check(
                value == value and abs(value) < float("inf"), f"part 3: {name} = {value!r}"
            )
        for name in ("put", "ranks", "steps_per_s"):
            harness.smoke_check(
                harness.finite_positive(figures[name]), f"part 3: {name} = {figures[name]!r}"
            )
        harness.smoke_check(0 < figures["bound"] <= 1, f"part 3: bound = {figures['bound']!r}")
    print(f"smoke: ok ({'parts 1 to 3' if parts == 3 else 'part 2'}: every figure there, finite)")


if __name__ == "__main__":
    harness.entry(main)
