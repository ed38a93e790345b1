"""What the Prometheus exporter costs training, and what the report costs to render.

Part 1: training samples/s with ``--metrics-port`` on (and a scraper reading /metrics every
second, as Prometheus would) against off, side by side: each round runs both in ABBA order
so the machine's drift hits both sides; the figure is the median of the per-round ratios.
Target: >= 0.99.

Part 2: render time and file sizes of report.html, trace.json and the TensorBoard events for
a 32-rank run directory made with emulated devices (``--run-dir`` reuses one; otherwise
``compare seed-gap --np 32`` makes it, a few minutes here).

    .venv/bin/python benchmarks/report_cost.py [--rounds 6] [--steps 300] [--run-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
PIPEPROF = str(REPO / ".venv" / "bin" / "pipeprof")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Scraper(threading.Thread):
    """Reads http://127.0.0.1:PORT/metrics every second until stopped, as a Prometheus would."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.url, self.stop, self.scrapes, self.bytes = f"http://127.0.0.1:{port}/metrics", threading.Event(), 0, 0

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self.bytes = len(urllib.request.urlopen(self.url, timeout=2).read())
                self.scrapes += 1
            except OSError:
                pass  # not serving yet, or already stopped


def run_side(base: list[str], out: Path, metrics: bool) -> tuple[pd.DataFrame, int, int]:
    port = free_port()
    scraper = Scraper(port)
    extra = ["--metrics-port", str(port)] if metrics else []
    if metrics:
        scraper.start()
    try:
        subprocess.run([PIPEPROF, *base, *extra, "--out", str(out)], check=True, capture_output=True, cwd=REPO)
    finally:
        scraper.stop.set()
    return pd.read_csv(out / "summary.csv").set_index("variant"), scraper.scrapes, scraper.bytes


def part1(rounds: int, steps: int) -> None:
    base = ["run", "quickstart", "--np", "1", "--with-synthetic", "--steps", str(steps), "--warmup", "20",
            "--no-dashboard", "--no-report"]
    ratios: dict[str, list[float]] = {"synthetic": [], "real": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            order = ["ON", "OFF"] if r % 2 == 0 else ["OFF", "ON"]
            got, scraped = {}, (0, 0)
            for side in order:
                got[side], n, size = run_side(base, Path(tmp) / f"{side}{r}", side == "ON")
                scraped = (n, size) if side == "ON" else scraped
            line = []
            for v in ratios:
                on, off = float(got["ON"].loc[v, "samples_per_s"]), float(got["OFF"].loc[v, "samples_per_s"])
                ratios[v].append(on / off)
                line.append(f"{v} ON {on:7.1f} OFF {off:7.1f} ratio {on / off:.3f}")
            print(f"  round {r + 1} ({'-'.join(order)}): " + " | ".join(line)
                  + f" | {scraped[0]} scrapes of {scraped[1] / 1e3:.0f} kB", flush=True)
    print()
    print(f"  {'variant':<10} {'median ON/OFF (paired)':>23}  range            target >= 0.99")
    for v, rs in ratios.items():
        m = statistics.median(rs)
        print(f"  {v:<10} {m:23.3f}  {min(rs):.3f}..{max(rs):.3f}   {'PASS' if m >= 0.99 else 'FAIL'}")


def part2(run_dir: Path | None) -> None:
    from pipeprof.renderers import FORMATS, renderer
    from pipeprof.workflows.report import load_run

    with tempfile.TemporaryDirectory() as tmp:
        if run_dir is None:
            run_dir = Path(tmp) / "seed-gap-32"
            t0 = time.monotonic()
            subprocess.run([PIPEPROF, "compare", "seed-gap", "--np", "32", "--oversubscribe", "--steps", "40",
                            "--no-dashboard", "--no-report", "--out", str(run_dir)], check=True, capture_output=True,
                           cwd=REPO)
            print(f"  made {run_dir.name}: compare seed-gap --np 32 (emulated) in {time.monotonic() - t0:.0f} s")
        t0 = time.perf_counter()
        run = load_run(run_dir)
        load_s = time.perf_counter() - t0
        steps, ranks = len(run.steps), run.steps["rank"].nunique()
        print(f"  run: {ranks} ranks at most, {steps:,} step records, "
              f"{sum(len(f) for f in run.telemetry.values() if f is not None):,} telemetry samples; loaded in {load_s:.2f} s")
        total = load_s
        for name in FORMATS:
            t0 = time.perf_counter()
            paths = renderer(name).render(run, run_dir)
            took = time.perf_counter() - t0
            total += took
            size = sum(p.stat().st_size for p in paths)
            print(f"  {name:<12} {took:6.2f} s  {size / 2**20:7.2f} MB in {len(paths)} file(s)")
        print(f"  all formats, load included: {total:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--run-dir", type=Path, help="a 32-rank run directory to render (default: make one)")
    ap.add_argument("--report-only", action="store_true", help="part 2 alone")
    args = ap.parse_args()
    if not args.report_only:
        print(f"exporter cost · {os.cpu_count()} cores · quickstart, np=1, {args.steps} measured steps per variant")
        print("part 1: training samples/s with --metrics-port (scraped every second) vs without, alternating rounds")
        part1(args.rounds, args.steps)
        print()
    print("part 2: rendering a 32-rank run directory")
    part2(args.run_dir)


if __name__ == "__main__":
    main()
