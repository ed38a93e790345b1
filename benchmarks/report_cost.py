"""What the Prometheus exporter costs training, and what the report costs to render.

Part 1: training samples/s with ``--metrics-port`` on (and a scraper reading /metrics every
second, as Prometheus would) against off. Each round runs both at once, taking turns on the
machine a second at a time (``timeslice``: the other side's processes stopped meanwhile),
so the machine's drift hits both alike; the figure is the median of the per-round ratios.
Target: >= 0.99.

Part 2: render time and file sizes of report.html, trace.json and the TensorBoard events for
a 32-rank run directory made with emulated devices (``--run-dir`` reuses one; otherwise
``compare seed-gap --np 32`` makes it, a few minutes here).

    .venv/bin/python benchmarks/report_cost.py [--rounds 6] [--steps 300] [--slice-s 1] [--run-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

# run as a file (python benchmarks/NAME.py): this checkout's benchmarks and pipeprof first
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness, timeslice  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Scraper(threading.Thread):
    """Reads http://127.0.0.1:PORT/metrics every second of its side's turns, as a Prometheus
    would: ``on_resume`` and ``on_pause`` are the side's hooks, so no scrape waits on a stopped
    exporter or spans a pause."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.url, self.scrapes, self.bytes = f"http://127.0.0.1:{port}/metrics", 0, 0
        self.done, self.turn, self.idle = threading.Event(), threading.Event(), threading.Event()
        self.idle.set()

    def on_resume(self, side) -> None:
        self.turn.set()

    def on_pause(self, side) -> None:
        self.turn.clear()
        self.idle.wait(3.0)  # a scrape under way finishes first

    def run(self) -> None:
        while not self.done.wait(1.0):
            if not self.turn.wait(0.5):
                continue
            self.idle.clear()
            try:
                if self.turn.is_set():
                    self.bytes = len(urllib.request.urlopen(self.url, timeout=2).read())
                    self.scrapes += 1
            except OSError:
                pass  # not serving yet, or already stopped
            finally:
                self.idle.set()


def part1(rounds: int, steps: int, slice_s: float) -> None:
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
        "20",
        "--no-dashboard",
        "--no-report",
    ]
    ratios: dict[str, list[float]] = {"synthetic": [], "real": []}
    harness.prepared("quickstart")  # once, before two runs would both want to
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            port = free_port()
            scraper = Scraper(port)
            outs = {side: Path(tmp) / f"{side}{r}" for side in ("ON", "OFF")}
            on = timeslice.Side(
                "ON",
                base + ["--metrics-port", str(port), "--out", str(outs["ON"])],
                cwd=str(harness.REPO),
                on_resume=scraper.on_resume,
                on_pause=scraper.on_pause,
            )
            off = timeslice.Side("OFF", base + ["--out", str(outs["OFF"])], cwd=str(harness.REPO))
            first, second = harness.turns([on, off], r)
            scraper.start()
            try:
                timeslice.run_sliced(first, second, slice_s=slice_s)
            finally:
                scraper.done.set()
            line = []
            for side in (on, off):
                timeslice.check(side)
            for v in ratios:
                (r_on, n_on), (r_off, n_off) = (
                    timeslice.run_rate(outs[s.name], v, s.windows) for s in (on, off)
                )
                ratios[v].append(r_on / r_off)
                line.append(
                    f"{v} ON {r_on:7.1f} ({n_on} steps) OFF {r_off:7.1f} ({n_off}) ratio {r_on / r_off:.3f}"
                )
            print(
                f"  round {r + 1} ({first.name} first): "
                + " | ".join(line)
                + f" | {scraper.scrapes} scrapes of {scraper.bytes / 1e3:.0f} kB",
                flush=True,
            )
    print()
    timeslice.print_medians(ratios, 0.99)


def part2(run_dir: Path | None) -> None:
    from pipeprof.renderers import FORMATS, renderer
    from pipeprof.workflows.report import load_run

    with tempfile.TemporaryDirectory() as tmp:
        if run_dir is None:
            run_dir = Path(tmp) / "seed-gap-32"
            t0 = time.monotonic()
            harness.pipeprof(
                [
                    "compare",
                    "seed-gap",
                    "--np",
                    "32",
                    "--oversubscribe",
                    "--steps",
                    "40",
                    "--no-dashboard",
                    "--no-report",
                    "--out",
                    str(run_dir),
                ]
            )
            print(
                f"  made {run_dir.name}: compare seed-gap --np 32 (emulated) in {time.monotonic() - t0:.0f} s"
            )
        t0 = time.perf_counter()
        run = load_run(run_dir)
        load_s = time.perf_counter() - t0
        steps, ranks = len(run.steps), run.steps["rank"].nunique()
        print(
            f"  run: {ranks} ranks at most, {steps:,} step records, "
            f"{sum(len(f) for f in run.telemetry.values() if f is not None):,} telemetry samples; loaded in {load_s:.2f} s"
        )
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
    ap.add_argument("--slice-s", type=float, default=1.0, help="each side's turn on the machine")
    ap.add_argument(
        "--run-dir", type=Path, help="a 32-rank run directory to render (default: make one)"
    )
    ap.add_argument("--report-only", action="store_true", help="part 2 alone")
    args = ap.parse_args()
    if not args.report_only:
        print(
            f"exporter cost · {os.cpu_count()} cores · quickstart, np=1, {args.steps} measured steps per variant"
        )
        print(
            f"part 1: training samples/s with --metrics-port (scraped every second) vs without, taking turns every {args.slice_s:g} s"
        )
        part1(args.rounds, args.steps, args.slice_s)
        print()
    print("part 2: rendering a 32-rank run directory")
    part2(args.run_dir)


if __name__ == "__main__":
    harness.entry(main)
