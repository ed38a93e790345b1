"""What the Prometheus exporter costs training, and what the report costs to render.

Part 1: training samples/s with ``--metrics-port`` on (and a scraper reading /metrics every
second, as Prometheus would) against off. Each round runs both at once, taking turns on the
machine a second at a time (``timeslice``: the other side's processes stopped meanwhile),
so the machine's drift hits both alike; the figure is the median of the per-round ratios.
Target: >= 0.99.

Part 2: render time and file sizes of report.html, trace.json and the TensorBoard events for
a 32-rank run directory made with emulated devices (``--run-dir`` reuses one; otherwise
``compare seed-gap --np 32`` makes it, a few minutes here).

``--smoke``: both parts, tiny (1 round, 32 px, batch 8; part 2 renders part 1's run), then
checks the figures.

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
from typing import Any

# run as a file (python benchmarks/NAME.py): this checkout's benchmarks and pipeprof first
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness, timeslice  # noqa: E402

# --smoke: the defaults it gives the other flags (one given explicitly still wins)
SMOKE = dict(
    rounds=1,
    steps=30,
    warmup=3,
    slice_s=0.5,
    report_np=1,
    report_steps=5,
    sets=[
        "train.batch_size=8",
        "train.warmup_steps=2",  # part 2's (part 1's runs are given --warmup)
        "data.image_size=32",
        "data.generate.images=64",
        "data.generate.size=96",
    ],
)


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


def part1(
    work: Path,
    rounds: int,
    steps: int,
    slice_s: float,
    warmup: int = 20,
    sets: list[str] | None = None,
) -> tuple[dict[str, list[float]], list[int]]:
    """Throughput ON/OFF per round (``sets``: ``--set KEY=VALUE`` overrides of every run), the
    runs' directories in ``work`` (``ON0``, ``OFF0``, ...); returns each variant's per-round
    ratios and each round's scrapes."""
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
        "--no-dashboard",
        "--no-report",
        *(arg for s in sets for arg in ("--set", s)),
    ]
    ratios: dict[str, list[float]] = {"synthetic": [], "real": []}
    scrapes: list[int] = []
    harness.prepared_with("quickstart", sets)  # once, before two runs would both want to
    for r in range(rounds):
        port = free_port()
        scraper = Scraper(port)
        outs = {side: work / f"{side}{r}" for side in ("ON", "OFF")}
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
        scrapes.append(scraper.scrapes)
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
    return ratios, scrapes


def part2(
    run_dir: Path | None, np: int = 32, steps: int = 40, sets: list[str] | None = None
) -> dict[str, Any]:
    """Renders every format of ``run_dir``, or of a run directory ``compare seed-gap`` makes at
    ``np`` ranks and ``steps`` steps (``sets``: its ``--set`` overrides); returns the figures."""
    from pipeprof.renderers import FORMATS, renderer
    from pipeprof.workflows.report import load_run

    with tempfile.TemporaryDirectory() as tmp:
        if run_dir is None:
            run_dir = Path(tmp) / f"seed-gap-{np}"
            t0 = time.monotonic()
            harness.pipeprof(
                [
                    "compare",
                    "seed-gap",
                    "--np",
                    str(np),
                    "--oversubscribe",
                    "--steps",
                    str(steps),
                    "--no-dashboard",
                    "--no-report",
                    "--out",
                    str(run_dir),
                    *(arg for s in sets or [] for arg in ("--set", s)),
                ]
            )
            print(
                f"  made {run_dir.name}: compare seed-gap --np {np} (emulated) in {time.monotonic() - t0:.0f} s"
            )
        t0 = time.perf_counter()
        run = load_run(run_dir)
        load_s = time.perf_counter() - t0
        n_steps, ranks = len(run.steps), run.steps["rank"].nunique()
        print(
            f"  run: {ranks} ranks at most, {n_steps:,} step records, "
            f"{sum(len(f) for f in run.telemetry.values() if f is not None):,} telemetry samples; loaded in {load_s:.2f} s"
        )
        total = load_s
        figures: dict[str, Any] = {"ranks": ranks, "steps": n_steps, "load_s": load_s}
        for name in FORMATS:
            t0 = time.perf_counter()
            paths = renderer(name).render(run, run_dir)
            took = time.perf_counter() - t0
            total += took
            size = sum(p.stat().st_size for p in paths)
            print(f"  {name:<12} {took:6.2f} s  {size / 2**20:7.2f} MB in {len(paths)} file(s)")
            figures[name] = (took, size, len(paths))
        print(f"  all formats, load included: {total:.2f} s")
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--slice-s", type=float, default=1.0, help="each side's turn on the machine")
    ap.add_argument(
        "--run-dir", type=Path, help="a 32-rank run directory to render (default: make one)"
    )
    ap.add_argument("--report-only", action="store_true", help="part 2 alone")
    ap.add_argument("--warmup", type=int, default=20, help="warm-up steps of each variant")
    ap.add_argument(
        "--report-np", type=int, default=32, help="ranks of the run directory made for part 2"
    )
    ap.add_argument(
        "--report-steps", type=int, default=40, help="steps of the run directory made for part 2"
    )
    ap.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a scenario override given to every run the script makes (repeatable)",
    )
    ap.add_argument(
        "--smoke", action="store_true", help="both parts, tiny, then a check of their figures (CI)"
    )
    args = harness.parse_smoke(ap, SMOKE)
    measured: tuple[dict[str, list[float]], list[int]] | None = None
    with tempfile.TemporaryDirectory(prefix="pipeprof-report-cost-") as work:
        if not args.report_only:
            print(
                f"exporter cost · {os.cpu_count()} cores · quickstart, np=1, {args.steps} measured steps per variant"
            )
            print(
                f"part 1: training samples/s with --metrics-port (scraped every second) vs without, taking turns every {args.slice_s:g} s"
            )
            measured = part1(
                Path(work), args.rounds, args.steps, args.slice_s, args.warmup, args.sets
            )
            print()
            if args.smoke and args.run_dir is None:  # a launch fewer: part 1's run rendered
                args.run_dir = Path(work) / "ON0"
        print(f"part 2: rendering a {args.report_np}-rank run directory")
        figures = part2(args.run_dir, args.report_np, args.report_steps, args.sets)
    if args.smoke:
        smoke_check(measured, figures)


def smoke_check(
    measured: tuple[dict[str, list[float]], list[int]] | None, figures: dict[str, Any]
) -> None:
    """The figures the parts printed, there and sane: each variant's ON/OFF ratio finite and
    > 0 and the exporter scraped (part 1); steps loaded and every format rendered into files
    of some size, in a finite time (part 2). Not the target: that takes a full, quiet run."""
    from pipeprof.renderers import FORMATS

    if measured is not None:
        ratios, scrapes = measured
        for variant in ("synthetic", "real"):
            got = ratios.get(variant, [])
            harness.smoke_check(bool(got), f"part 1: no ON/OFF ratio of {variant}")
            for r, ratio in enumerate(got, 1):
                harness.smoke_check(
                    harness.finite_positive(ratio),
                    f"part 1 round {r}: {variant} ON/OFF = {ratio!r}",
                )
        for r, n in enumerate(scrapes, 1):
            harness.smoke_check(n > 0, f"part 1 round {r}: /metrics never scraped")
    harness.smoke_check(figures["ranks"] > 0, "part 2: no rank in the run directory")
    harness.smoke_check(figures["steps"] > 0, "part 2: no step record in the run directory")
    for name in FORMATS:
        harness.smoke_check(name in figures, f"part 2: {name} not rendered")
        took, size, files = figures[name]
        harness.smoke_check(files > 0 and size > 0, f"part 2: {name}: {files} file(s), {size} B")
        harness.smoke_check(0 <= took < float("inf"), f"part 2: {name}: {took!r} s")
    print("smoke: ok (both parts: every figure there, finite)")


if __name__ == "__main__":
    harness.entry(main)
