"""``pipeprof watch -- CMD ...``: run your own training command and show the live dashboard
from what ``pipeprof.keras.PipeprofCallback`` streams, keeping everything in a run directory."""

from __future__ import annotations

import argparse
from typing import Any

from pipeprof.cli.common import (
    add_metrics_arguments,
    add_report_argument,
    console_for_output,
    finish,
    metrics_exporter,
)
from pipeprof.errors import PipeprofError
from pipeprof.reporting import FanOut, Reporter
from pipeprof.tui.reporter import DashboardReporter, PlainReporter
from pipeprof.workflows.watch import watch


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "watch",
        help="run your own training (with pipeprof.keras) under the live dashboard",
        description="Run CMD (e.g. horovodrun -np 4 python train.py) with the address of a "
        "collector in PIPEPROF_STREAM; PipeprofCallback in the script streams to it.",
    )
    p.add_argument("--out", metavar="DIR", help="run directory (default: runs/<time>-watch)")
    p.add_argument(
        "--no-dashboard", action="store_true", help="pass the command's output through instead"
    )
    p.add_argument(
        "--timeout",
        type=int,
        default=0,
        metavar="S",
        help="kill the command after S seconds (0: never)",
    )
    p.add_argument(
        "--stream-host", metavar="ADDR", help="the address ranks stream to (default: loopback)"
    )
    add_metrics_arguments(p)
    add_report_argument(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command to run")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise PipeprofError(
            "pipeprof watch: give the command to run after --, e.g. "
            "pipeprof watch -- horovodrun -np 2 python train.py"
        )
    console = console_for_output()
    dashboard = console.is_terminal and not args.no_dashboard
    exporter = metrics_exporter(args, console, command="watch", scenario=" ".join(cmd)[:60])
    ui: Reporter = (
        DashboardReporter(console, command="watch", scenario=" ".join(cmd)[:60], steps_total=0)
        if dashboard
        else PlainReporter(console)
    )
    reporter = FanOut(ui, exporter) if exporter is not None else ui
    try:
        result = watch(
            cmd,
            out=args.out,
            argv=argv,
            reporter=reporter,
            timeout_s=args.timeout,
            stream_host=args.stream_host,
            on_line=None if dashboard else console.out,
            report=not args.no_report,
        )
    finally:
        reporter.close()
    failure, result.failure = result.failure, None  # the summary first, then the command's failure
    code = finish(result, console, "pipeprof watch")
    if failure:
        raise PipeprofError(failure, exit_code=result.exit_code)
    return code
