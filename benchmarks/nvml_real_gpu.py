"""pipeprof's NVML sampling against a real GPU under a load whose busy share is known.

Runs where there is a CUDA GPU and PyTorch (to make the load); TensorFlow is not needed. One
process plays a rank: its main thread runs "steps" of a set period (100 ms) in which the GPU
computes for a set share of the period (matrix products back to back, timed on the GPU with
CUDA events: the truth) and idles for the rest (counted as input wait, as an input-bound step
would be), while pipeprof's own telemetry runs beside it exactly as in a rank: the sampler
thread (``RankTelemetry`` with the real ``pynvml``), the TCP stream to a ``Collector``, the
``Recorder`` writing the run directory, then ``write_summary`` and the dashboard. Beside it,
``nvidia-smi`` polls the same GPU every 100 ms.

It prints, per busy share, the truth, pipeprof's ``gpu_util_pct`` (summary.csv's figure), and
nvidia-smi's mean; then memory (a known allocation seen in ``mem_used_mb``), the slow fields
(clock, power, temperature), a GPU named by UUID in CUDA_VISIBLE_DEVICES, one NVML query's
cost and the sampler thread's CPU. The run directory is kept (``--out``) so the summary can be
recomputed elsewhere with the project's pinned pandas.

    python benchmarks/nvml_real_gpu.py --out DIR [--phase-s 4] [--period-ms 100]

``--smoke`` (CI, no GPU needed): the same rank, telemetry, collector, recorder, summary and
dashboard, with the load made on the CPU (numpy products timed by the process clock) for three
shares of 0.6 s; NVML is sampled where a driver answers, and where none does the check asks
that the summary leaves GPU utilisation blank and the output says why.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402
from pipeprof.records import StepRecord  # noqa: E402
from pipeprof.telemetry.agent import RankTelemetry  # noqa: E402
from pipeprof.telemetry.nvml import Nvml  # noqa: E402
from pipeprof.telemetry.recorder import Recorder  # noqa: E402
from pipeprof.telemetry.stream import Collector, StreamClient  # noqa: E402

DUTIES = (0.0, 0.25, 0.5, 0.75, 1.0)
TOLERANCE_POINTS = 5.0  # pipeprof's mean utilisation against the CUDA-event truth, per share
ALLOC_GIB = 8


def variant(duty: float) -> str:
    return f"busy-{round(duty * 100):03d}"


def smi_poll(path: Path) -> subprocess.Popen:
    fh = path.open("w")
    return subprocess.Popen(
        [
            "nvidia-smi",
            "--query-gpu=timestamp,utilization.gpu,memory.used",
            "--format=csv,noheader,nounits",
            "-lms",
            "100",
            "-i",
            "0",
        ],
        stdout=fh,
        stderr=subprocess.STDOUT,
    )


def smi_rows(path: Path) -> list[tuple[float, float, float]]:
    rows = []
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            t = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            rows.append((t, float(parts[1]), float(parts[2])))
        except (ValueError, IndexError):
            continue
    return rows


class Load:
    """Matrix products on GPU 0, with the GPU's own clock (CUDA events) as the truth."""

    def __init__(self, torch) -> None:
        self.torch = torch
        self.a = torch.randn(4096, 4096, device="cuda")
        self.b = torch.randn(4096, 4096, device="cuda")
        for _ in range(20):  # warm the kernels and the clocks
            self.a @ self.b
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(50):
            self.a @ self.b
        e.record()
        torch.cuda.synchronize()
        self.kernel_ms = s.elapsed_time(e) / 50

    def busy(self, ms: float) -> float:
        """Keep the GPU computing for about ``ms``; returns the GPU-timed busy milliseconds."""
        if ms <= 0:
            return 0.0
        torch = self.torch
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(max(1, round(ms / self.kernel_ms))):
            self.a @ self.b
        e.record()
        e.synchronize()
        return s.elapsed_time(e)


class CpuLoad:
    """The smoke run's stand-in for ``Load``: products of two numpy matrices on the CPU, the
    busy milliseconds timed by the process's own clock."""

    kernel_ms = 0.0

    def __init__(self) -> None:
        import numpy

        self.a = numpy.ones((128, 128), numpy.float32)

    def busy(self, ms: float) -> float:
        if ms <= 0:
            return 0.0
        t0 = time.perf_counter()
        while (time.perf_counter() - t0) * 1e3 < ms:
            self.a @ self.a
        return (time.perf_counter() - t0) * 1e3


def run_phases(
    load: Load | CpuLoad,
    agent: RankTelemetry,
    phase_s: float,
    period_ms: float,
    duties: tuple[float, ...] = DUTIES,
) -> dict:
    truth = {}
    step = 0
    for duty in duties:
        busy_total = wall_total = 0.0
        t_end = time.monotonic() + phase_s
        n = 0
        while time.monotonic() < t_end:
            t0 = time.monotonic()
            busy_ms = load.busy(duty * period_ms)
            left = period_ms / 1e3 - (time.monotonic() - t0)
            if left > 0:
                time.sleep(left)
            wall_ms = (time.monotonic() - t0) * 1e3
            warm = n < 3  # the first steps of each share cover NVML's last window of the one before
            if not warm:
                busy_total += busy_ms
                wall_total += wall_ms
            agent.put(
                "step",
                StepRecord(
                    np=1,
                    variant=variant(duty),
                    rank=0,
                    step=step,
                    warmup=warm,
                    input_wait_ms=max(0.0, wall_ms - busy_ms),
                    step_time_ms=wall_ms,
                    batch_size=1,
                    end_unix_s=time.time(),
                ),
            )
            step += 1
            n += 1
        truth[variant(duty)] = 100.0 * busy_total / wall_total
    return truth


def sampled_by_uuid(uuid: str, local_size: int, out: Path) -> dict:
    """A rank whose CUDA_VISIBLE_DEVICES names its GPU by UUID (as Slurm and Kubernetes may)."""
    os.environ["CUDA_VISIBLE_DEVICES"] = uuid
    rec = Recorder(out, flush_interval_s=0.0)
    try:
        with Collector(rec.write) as col:
            agent = RankTelemetry(
                StreamClient(col.address, rank=1),
                rank=1,
                local_rank=1 if local_size > 1 else 0,
                local_size=local_size,
                gpu_interval_s=0.1,
            ).start()
            time.sleep(1.5)
            agent.stop()
            time.sleep(0.3)
    finally:
        rec.close()
        del os.environ["CUDA_VISIBLE_DEVICES"]
    import pandas as pd

    path = out / "telemetry" / "gpu.csv"
    if not path.exists():
        return {"local_size": local_size, "samples": 0}
    g = pd.read_csv(path)
    return {
        "local_size": local_size,
        "samples": int(len(g)),
        "gpu_column": sorted(set(g["gpu"].astype(str))),
        "util_present": bool(g["gpu_util_pct"].notna().all()),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="a new folder for the run directory and results")
    ap.add_argument("--phase-s", type=float, default=4.0)
    ap.add_argument("--period-ms", type=float, default=100.0)
    ap.add_argument("--smoke", action="store_true", help="on the CPU, then check the figures (CI)")
    args = ap.parse_args(argv)
    if args.smoke:
        smoke(Path(args.out))
        return 0
    try:
        import torch
    except ImportError:
        print("nvml_real_gpu: needs PyTorch to make the GPU load", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print(
            "nvml_real_gpu: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr
        )
        return 2
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        print(f"nvml_real_gpu: --out {out} is not empty", file=sys.stderr)
        return 2
    run_dir = out / "run"
    run_dir.mkdir(parents=True)
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)

    nvml = Nvml()
    if not nvml.available:
        print(f"nvml_real_gpu: {nvml.reason}", file=sys.stderr)
        return 2
    inventory = nvml.inventory()
    h = nvml.query("nvmlDeviceGetHandleByIndex", 0)
    t0 = time.perf_counter()
    for _ in range(1000):
        nvml.query("nvmlDeviceGetUtilizationRates", h)
    util_query_us = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    for _ in range(200):
        nvml.query("nvmlDeviceGetMemoryInfo", h)
        nvml.query("nvmlDeviceGetClockInfo", h, 1)
        nvml.query("nvmlDeviceGetPowerUsage", h)
        nvml.query("nvmlDeviceGetTemperature", h, 0)
    slow_query_us = (time.perf_counter() - t0) / 200 / 4 * 1e6
    nvml.shutdown()

    load = Load(torch)
    smi = smi_poll(out / "nvidia-smi.csv")
    from pipeprof.tui.dashboard import render
    from pipeprof.tui.state import LiveState

    state = LiveState(scenario="nvml-real-gpu")
    rec = Recorder(run_dir, flush_interval_s=0.2)

    def on_record(r: dict) -> None:
        rec.write(r)
        state.apply(r)

    try:
        with Collector(on_record) as col:
            agent = RankTelemetry(
                StreamClient(col.address, rank=0),
                rank=0,
                local_rank=0,
                local_size=1,
                size=1,
                gpu_interval_s=0.1,
                host_interval_s=0.5,
            ).start()
            t_start = time.monotonic()
            truth = run_phases(load, agent, args.phase_s, args.period_ms)
            # memory: a known allocation, held while the slow fields are sampled several times
            torch.cuda.synchronize()
            time.sleep(1.2)
            t_before = time.time()
            free0, total = torch.cuda.mem_get_info()
            time.sleep(1.2)
            block = torch.ones(ALLOC_GIB * 2**30, dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()
            free1, _ = torch.cuda.mem_get_info()
            t_alloc = time.time()
            time.sleep(2.5)
            t_alloc_end = time.time()
            del block
            elapsed = time.monotonic() - t_start
            agent.stop()
            sampler_cpu_pct = 100.0 * agent.cpu_time_s / elapsed
            time.sleep(0.5)
        from rich.console import Console

        console = Console(record=True, width=140, color_system=None)
        console.print(render(state.snapshot()))
        (out / "dashboard.txt").write_text(console.export_text())
    finally:
        rec.close()
        smi.terminate()
        smi.wait()

    uuid = str(inventory[0]["uuid"])
    by_uuid = [
        sampled_by_uuid(uuid, 1, out / "uuid-1"),
        sampled_by_uuid(uuid, 2, out / "uuid-2"),
    ]

    import pandas as pd

    from pipeprof.workflows.summary import write_summary

    summary = write_summary(run_dir, set())
    gpu = pd.read_csv(run_dir / "telemetry" / "gpu.csv")
    steps = pd.read_csv(run_dir / "live" / "steps.csv")
    smi_all = smi_rows(out / "nvidia-smi.csv")
    rows = []
    for v, true_pct in truth.items():
        s = summary[summary["variant"] == v].iloc[0]
        m = steps[(steps["variant"] == v) & ~steps["warmup"].astype(bool)]
        a, b = m["end_unix_s"].min() - m["step_time_ms"].iloc[0] / 1e3, m["end_unix_s"].max()
        smi_v = [u for t, u, _ in smi_all if a <= t <= b]
        rows.append(
            {
                "variant": v,
                "truth_pct": round(true_pct, 1),
                "pipeprof_gpu_util_pct": round(float(s["gpu_util_pct"]), 1),
                "pipeprof_input_wait_pct": round(float(s["input_wait_pct"]), 1),
                "nvidia_smi_pct": round(statistics.mean(smi_v), 1) if smi_v else None,
                "warning": s["warning"] if isinstance(s["warning"], str) else "",
            }
        )
    slow = gpu[gpu["mem_used_mb"].notna()]
    before = slow[(slow["t_unix_s"] >= t_before) & (slow["t_unix_s"] <= t_before + 1.2)]
    during = slow[(slow["t_unix_s"] > t_alloc + 0.6) & (slow["t_unix_s"] <= t_alloc_end)]
    memory = {
        "allocated_mib": ALLOC_GIB * 1024,
        "torch_mem_get_info_delta_mib": round((free0 - free1) / 2**20, 1),
        "pipeprof_mem_used_delta_mib": round(
            float(during["mem_used_mb"].mean() - before["mem_used_mb"].mean()), 1
        )
        if len(before) and len(during)
        else None,
        "pipeprof_mem_total_mib": round(float(slow["mem_total_mb"].iloc[0]), 1),
        "torch_total_mib": round(total / 2**20, 1),
        "slow_samples_before_during": [int(len(before)), int(len(during))],
    }
    fields_seen = {c: bool(slow[c].notna().all()) for c in ("sm_clock_mhz", "power_w", "temp_c")}
    fields_range = {
        c: [round(float(slow[c].min()), 1), round(float(slow[c].max()), 1)]
        for c in ("sm_clock_mhz", "power_w", "temp_c")
        if slow[c].notna().any()
    }
    result = {
        "gpu": inventory[0],
        "load_kernel_ms": round(load.kernel_ms, 3),
        "phases": rows,
        "memory": memory,
        "slow_fields_present": fields_seen,
        "slow_fields_range": fields_range,
        "fast_samples": int(len(gpu)),
        "run_s": round(elapsed, 1),
        "util_query_us": round(util_query_us, 1),
        "slow_query_us": round(slow_query_us, 1),
        "sampler_thread_cpu_pct_of_a_core": round(sampler_cpu_pct, 3),
        "by_uuid": by_uuid,
    }
    (out / "result.json").write_text(json.dumps(result, indent=2, default=str))

    print(f"GPU: {inventory[0]['name']} ({inventory[0]['memory_total_mb']} MiB)")
    print(f"load: 4096x4096 fp32 products, {load.kernel_ms:.3f} ms each on the GPU")
    print(f"{'share':>9} {'truth %':>8} {'pipeprof %':>11} {'smi %':>7} {'wait %':>7}  within ±5")
    ok = True
    for r in rows:
        within = abs(r["pipeprof_gpu_util_pct"] - r["truth_pct"]) <= TOLERANCE_POINTS
        ok &= within
        print(
            f"{r['variant']:>9} {r['truth_pct']:8.1f} {r['pipeprof_gpu_util_pct']:11.1f} "
            f"{r['nvidia_smi_pct'] if r['nvidia_smi_pct'] is not None else float('nan'):7.1f} "
            f"{r['pipeprof_input_wait_pct']:7.1f}  {'yes' if within else 'NO'}"
        )
        said = [w for w in r["warning"].split("; ") if w and "no synthetic run" not in w]
        if said:  # (no synthetic twin here: that warning is this benchmark's, not the GPU's)
            print(f"{'':>9} warning: {'; '.join(said)}")
    print(f"memory: {json.dumps(memory)}")
    print(f"slow fields present: {fields_seen}; ranges {fields_range}")
    print(
        f"NVML utilisation query {util_query_us:.1f} us, slow queries {slow_query_us:.1f} us each; "
        f"sampler thread {sampler_cpu_pct:.3f}% of a core at 10 Hz"
    )
    print(f"by UUID: {by_uuid}")
    print("PASS" if ok else "FAIL: a share outside ±5 points of its truth")
    return 0 if ok else 1


def smoke(out: Path) -> None:
    """``--smoke``: a rank's telemetry beside a CPU load of three busy shares, through the
    collector and recorder to the summary and the dashboard, then checks of what came out."""
    import pandas as pd
    from rich.console import Console

    from pipeprof.tui.dashboard import render
    from pipeprof.tui.state import LiveState
    from pipeprof.workflows.summary import write_summary

    duties = (0.0, 0.5, 1.0)
    run_dir = out / "run"
    run_dir.mkdir(parents=True)
    nvml = Nvml()
    state = LiveState(scenario="nvml-smoke")
    rec = Recorder(run_dir, flush_interval_s=0.2)

    def on_record(r: dict) -> None:
        rec.write(r)
        state.apply(r)

    try:
        with Collector(on_record) as col:
            agent = RankTelemetry(
                StreamClient(col.address, rank=0),
                rank=0,
                local_rank=0,
                local_size=1,
                size=1,
                gpu_interval_s=0.1,
                host_interval_s=0.2,
            ).start()
            truth = run_phases(CpuLoad(), agent, 0.6, 50.0, duties)
            agent.stop()
            time.sleep(0.3)
    finally:
        rec.close()
    summary = write_summary(run_dir, set())
    console = Console(record=True, width=140, color_system=None)
    console.print(render(state.snapshot()))
    print(console.export_text())
    print(f"NVML: {'available' if nvml.available else nvml.reason}")
    print(f"{'share':>9} {'truth %':>8} {'gpu util %':>11} {'wait %':>7}")
    check = harness.smoke_check
    for v, true_pct in truth.items():
        rows = summary[summary["variant"] == v]
        check(len(rows) == 1, f"{v}: {len(rows)} summary rows")
        s = rows.iloc[0]
        print(
            f"{v:>9} {true_pct:8.1f} {float(s['gpu_util_pct']):11.1f} "
            f"{float(s['input_wait_pct']):7.1f}"
        )
        check(0 <= true_pct <= 100, f"{v}: a busy share of {true_pct}%")
        check(0 <= float(s["input_wait_pct"]) <= 100, f"{v}: input wait {s['input_wait_pct']}")
        if not nvml.available:  # no driver: the figure is blank, and the output said why
            check(
                bool(pd.isna(s["gpu_util_pct"])), f"{v}: GPU util {s['gpu_util_pct']} with no GPU"
            )
    check(nvml.available or bool(nvml.reason), "NVML unavailable and no reason given")


if __name__ == "__main__":
    harness.entry(main)
