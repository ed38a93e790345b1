"""``pipeprof doctor [SCENARIO]``: one screen on what works here, before a cluster run."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipeprof import scenario as scen
from pipeprof.cli.common import add_set_argument, console_for_output
from pipeprof.doctor import Report, diagnose
from pipeprof.errors import PipeprofError

SHOWN_BAD_FILES = 20
_MARK = {
    "ok": "[green]✓[/]",
    "note": "[blue]·[/]",
    "warn": "[yellow]![/]",
    "fail": "[bold red]✗[/]",
}


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "doctor",
        help="check Python, TensorFlow, Horovod, GPUs, cores and a scenario's data",
        description="Say what works before a cluster run: versions and Horovod's build, GPUs as "
        "NVML and TensorFlow see them, CPU cores and affinity, and, given a scenario, "
        "its launch and its data (files, classes, bytes, bad files). Exits 1 when "
        "something the scenario needs is missing.",
    )
    p.add_argument(
        "scenario",
        nargs="?",
        default=None,
        help="scenario TOML file or built-in name (without one: the environment only)",
    )
    add_set_argument(p, help="override a scenario key, as compare does (repeatable)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    console = console_for_output()
    scenario, error = None, ""
    if args.scenario is not None or args.sets:
        try:
            scenario = scen.load(args.scenario, [scen.parse_override(s) for s in args.sets])
        except PipeprofError as exc:  # still check the rest: one screen says everything
            error = exc.message
    with console.status(
        "checking TensorFlow, Horovod, GPUs" + (" and the data" if scenario else "") + " …"
    ):
        report = diagnose(scenario, scenario_error=error)
    title = "pipeprof doctor" + (
        f" · {scenario.name} ({scenario.source_file})"
        if scenario
        else f" · {args.scenario}"
        if args.scenario
        else ""
    )
    render(report, console, title)
    return 1 if report.failures else 0


def render(report: Report, console: Console, title: str) -> None:
    table = Table(title=title, title_justify="left", header_style="bold", show_edge=False)
    for name in ("", "area", "check", "result"):
        table.add_column(name, overflow="fold")
    for f in report.findings:
        table.add_row(_MARK[f.status], f.area, escape(f.what), escape(f.detail))
    console.print(table)
    if report.bad_files:
        console.print(f"[yellow]bad files[/] ({len(report.bad_files):,}):")
        for path, reason in report.bad_files[:SHOWN_BAD_FILES]:
            console.print(f"  {escape(path)}: {escape(reason)}", soft_wrap=True)
        if len(report.bad_files) > SHOWN_BAD_FILES:
            console.print(f"  … and {len(report.bad_files) - SHOWN_BAD_FILES:,} more")
    failures = report.failures
    if failures:
        console.print(
            f"[bold red]{len(failures)} problem(s)[/]: "
            + "; ".join(escape(f"{f.what}: {f.detail}") for f in failures),
            soft_wrap=True,
        )
    else:
        console.print("[green]ready[/]: nothing the checks need is missing")
