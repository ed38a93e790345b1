"""What telemetry and the live dashboard cost training, measured side by side in one run.

Part 1: training throughput with telemetry and the dashboard ON (pipeprof under a
pseudo-terminal, so the rich Live dashboard really redraws, NVML/psutil sampling and the TCP
record stream running) against OFF (``--no-telemetry --no-dashboard``). Each round runs both,
in ABBA order so machine drift hits both sides; the verdict is the median of the per-round
ON/OFF ratios. Target: >= 0.99.

Part 2: the sampler thread's own CPU time at 10 Hz GPU sampling (the default: GPUs every
100 ms, host and process every 500 ms), from ``time.thread_time`` inside the thread, over a
fixed wall time. Without a GPU on this machine, the GPU path is exercised with the test
fake of NVML (two GPUs), so the figure covers pipeprof's own work and psutil, not the
driver's ioctl cost. Target: under 1% of one core.

    .venv/bin/python benchmarks/telemetry_overhead.py [--rounds 3] [--steps 300]
"""

from __future__ import annotations

import argparse
import os
import pty
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
PIPEPROF = str(REPO / ".venv" / "bin" / "pipeprof")


def run_pipeprof(args: list[str], out: Path, terminal: bool) -> pd.DataFrame:
    cmd = [PIPEPROF, *args, "--out", str(out)]
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="150", LINES="50")
    if not terminal:
        subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=REPO)
    else:
        master, slave = pty.openpty()
        proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=REPO, close_fds=True)
        os.close(slave)
        while True:  # drain the terminal so the dashboard never blocks on a full buffer
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    if not os.read(master, 65536):
                        break
                except OSError:
                    break
            elif proc.poll() is not None:
                break
        proc.wait()
        os.close(master)
        if proc.returncode != 0:
            raise SystemExit(f"pipeprof failed under the terminal: {proc.returncode}")
    return pd.read_csv(out / "summary.csv")


def part1(rounds: int, steps: int) -> None:
    base = ["run", "quickstart", "--np", "1", "--with-synthetic", "--steps", str(steps), "--warmup", "20"]
    sides = {"ON": ([], True), "OFF": (["--no-telemetry", "--no-dashboard"], False)}
    ratios: dict[str, list[float]] = {"synthetic": [], "real": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            order = ["ON", "OFF"] if r % 2 == 0 else ["OFF", "ON"]  # ABBA: drift hits both sides alike
            got: dict[str, pd.DataFrame] = {}
            for side in order:
                extra, terminal = sides[side]
                got[side] = run_pipeprof(base + extra, Path(tmp) / f"{side}{r}", terminal).set_index("variant")
            line = []
            for v in ratios:
                on, off = float(got["ON"].loc[v, "samples_per_s"]), float(got["OFF"].loc[v, "samples_per_s"])
                ratios[v].append(on / off)
                line.append(f"{v} ON {on:7.1f} OFF {off:7.1f} ratio {on / off:.3f}")
            print(f"  round {r + 1} ({'-'.join(order)}): " + " | ".join(line), flush=True)
    print()
    print(f"  {'variant':<10} {'median ON/OFF (paired)':>23}  range            target >= 0.99")
    for v, rs in ratios.items():
        m = statistics.median(rs)
        print(f"  {v:<10} {m:23.3f}  {min(rs):.3f}..{max(rs):.3f}   {'PASS' if m >= 0.99 else 'FAIL'}")


def part2(seconds: float) -> None:
    from pipeprof.telemetry.agent import RankTelemetry
    from pipeprof.telemetry.nvml import Nvml
    from pipeprof.telemetry.recorder import Recorder
    from pipeprof.telemetry.stream import Collector, StreamClient
    from tests.fakes.nvml import FakeGpu, FakeNvml

    fake2 = FakeNvml(gpus=[FakeGpu(uuid=f"GPU-{i}") for i in range(2)])
    fake8 = FakeNvml(gpus=[FakeGpu(uuid=f"GPU-{i}") for i in range(8)])
    for label, factory, local in (("real NVML (none on this host) + psutil", Nvml, 2),
                                  ("fake 2-GPU NVML + psutil", lambda: Nvml(fake2), 2),
                                  ("fake 8-GPU NVML + psutil (an 8-GPU node)", lambda: Nvml(fake8), 8)):
        with tempfile.TemporaryDirectory() as tmp:
            rec = Recorder(Path(tmp))
            with Collector(rec.write) as col:
                agent = RankTelemetry(StreamClient(col.address, rank=0), rank=0, local_rank=0, local_size=local,
                                      gpu_interval_s=0.1, host_interval_s=0.5, nvml_factory=factory).start()
                t0 = time.monotonic()
                time.sleep(seconds)
                agent.stop()
                wall = time.monotonic() - t0
            rec.close()
            pct = 100 * agent.cpu_time_s / wall
            print(f"  {label:<42} {agent.cpu_time_s * 1e3:7.1f} ms CPU in {wall:4.1f} s = {pct:5.2f}% of one core "
                  f"({rec.counts.get('gpu', 0)} GPU, {rec.counts.get('host', 0)} host samples)  "
                  f"{'PASS' if pct < 1.0 else 'FAIL'} (< 1%)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--sampler-seconds", type=float, default=20.0)
    ap.add_argument("--sampler-only", action="store_true", help="part 2 alone")
    args = ap.parse_args()
    if not args.sampler_only:
        print(f"telemetry overhead · {os.cpu_count()} cores · quickstart, np=1, {args.steps} measured steps per variant")
        print("part 1: training samples/s, telemetry + live dashboard ON vs OFF (alternating rounds)")
        part1(args.rounds, args.steps)
        print()
    print(f"part 2: the sampler thread's own CPU at 10 Hz, over {args.sampler_seconds:.0f} s")
    part2(args.sampler_seconds)


if __name__ == "__main__":
    main()
