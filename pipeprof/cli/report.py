"""``pipeprof report RUN_DIR``: render a run directory as report.html, trace.json and
TensorBoard event files (compare, run, watch, tune and predict do it when they end)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pipeprof.cli.common import console_for_output
from pipeprof.errors import PipeprofError
from pipeprof.renderers import FORMATS
from pipeprof.workflows.report import report


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="render a run directory: report.html, trace.json, TensorBoard events",
        description="Render what a run measured as one self-contained HTML page, a Chrome/Perfetto "
        "trace and TensorBoard event files, inside the run directory.",
    )
    p.add_argument("run_dir", help="a pipeprof run directory (compare, run, watch, tune)")
    p.add_argument(
        "--format",
        dest="formats",
        default=",".join(FORMATS),
        metavar="LIST",
        help=f"which of {', '.join(FORMATS)} (default: all)",
    )
    p.add_argument(
        "--against",
        metavar="RUN_DIR",
        help="an earlier run: the report gains a section of what changed since it (pipeprof diff)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    formats = tuple(f.strip() for f in args.formats.split(",") if f.strip())
    if not formats or any(f not in FORMATS for f in formats):
        raise PipeprofError(
            f"report: --format {args.formats}: expected some of {', '.join(FORMATS)}"
        )
    console = console_for_output()
    against = Path(args.against) if args.against else None
    result = report(Path(args.run_dir), formats, against)
    if result.partial:
        console.print(f"[yellow]partial report[/]: the run is {result.partial}")
    for path in result.paths:
        console.print(f"written: {path}")
    console.print(f"rendered in {result.seconds:.1f}s")
    return 0
