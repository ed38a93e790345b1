"""``pipeprof diff RUN_A RUN_B``: what changed from one run to another, per worker count and
variant, each change with its 95% interval and called better, worse or no change by it;
``--fail-on`` turns a worsening into exit code 1, for CI."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import pandas as pd
from rich.table import Table

from pipeprof.analysis.diff import (
    BETTER,
    FIGURES,
    WORSE,
    FailOn,
    diff,
    failures,
    unjudged,
    unmatched,
)
from pipeprof.atomic import write_text
from pipeprof.cli.common import console_for_output
from pipeprof.errors import PipeprofError
from pipeprof.renderers.table import fmt
from pipeprof.rundir import RunDir

CALL_STYLE = {BETTER: "green", WORSE: "bold red"}


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "diff",
        help="compare two runs: samples/s and gap before and after, with intervals",
        description="Per worker count and variant that both runs measured: samples/s and the gap "
        "before and after, the change with its 95%% interval, and better / worse / no change "
        "as that interval says.",
    )
    p.add_argument("run_a", help="the run before (a pipeprof run directory)")
    p.add_argument("run_b", help="the run after")
    p.add_argument(
        "--fail-on",
        action="append",
        default=[],
        metavar="FIGURE:THRESHOLD",
        help="exit 1 where FIGURE got worse by its interval and by more than THRESHOLD: "
        "gap:2 (points), samples_per_s:5 (percent); may be given again. A row it cannot "
        "judge (no interval, or measured before and not after) exits 1 too",
    )
    p.add_argument("--csv", metavar="FILE", help="also write the rows to FILE (a new file)")
    p.set_defaults(run=run)


def _change(change: float, half: float, unit: str) -> str:
    if math.isnan(change):
        return "–"
    return f"{change:+.1f}{unit}" + ("" if math.isnan(half) else f" ±{half:.1f}")


def _styled(call: str) -> str:
    return f"[{CALL_STYLE[call]}]{call}[/]" if call in CALL_STYLE else call


def diff_table(rows: pd.DataFrame, title: str) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold")
    for name, justify in (
        ("np", "right"),
        ("variant", "left"),
        ("samples/s before", "right"),
        ("after", "right"),
        ("change", "right"),
        ("", "left"),
        ("gap before", "right"),
        ("after", "right"),
        ("change", "right"),
        (" ", "left"),
    ):
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    for _, r in rows.iterrows():
        t.add_row(
            str(r["np"]),
            r["variant"],
            fmt(r["samples_per_s_before"]),
            fmt(r["samples_per_s_after"]),
            _change(r["samples_per_s_change_pct"], r["samples_per_s_change_ci95"], "%"),
            _styled(r["samples_per_s_call"]),
            fmt(r["gap_before_pct"], 1, "%"),
            fmt(r["gap_after_pct"], 1, "%"),
            _change(r["gap_change_points"], r["gap_change_ci95"], " pts"),
            _styled(r["gap_call"]),
        )
    return t


def run(args: argparse.Namespace, argv: list[str]) -> int:
    try:
        rules = [FailOn.parse(text) for text in args.fail_on]
    except ValueError as exc:
        raise PipeprofError(f"diff: {exc}") from None
    csv = Path(args.csv) if args.csv else None
    if csv is not None and csv.exists():
        raise PipeprofError(f"diff: --csv {csv} exists; pipeprof writes only new files")
    a, b = RunDir(args.run_a), RunDir(args.run_b)
    before, after = a.summary(), b.summary()
    rows = diff(before, after)
    if rows.empty:
        raise PipeprofError(
            f"diff: {a.path} and {b.path} share no worker count and variant to compare"
        )
    name_a = a.manifest().get("scenario", {}).get("name", "?")
    name_b = b.manifest().get("scenario", {}).get("name", "?")
    console = console_for_output()
    scenarios = name_a if name_a == name_b else f"{name_a} → {name_b}"
    console.print(diff_table(rows, f"pipeprof diff · {scenarios} · {a.path} → {b.path}"))
    only, new = unmatched(before, after)
    if only:
        console.print(f"only in {a.path}: {', '.join(only)}")
    if new:
        console.print(f"only in {b.path}: {', '.join(new)}")
    if csv is not None:
        write_text(csv, rows.to_csv(index=False))
        console.print(f"written: {csv}")
    failed = failures(rows, rules)
    for line in failed:
        console.print(f"[bold red]worse[/]: {line}")
    blind = unjudged(rows, rules, only)
    for line in blind:
        console.print(f"[bold red]cannot judge[/]: {line}")
    if rules and not failed and not blind:
        units = ", ".join(
            f"{r.figure} by {r.threshold:g}{'%' if FIGURES[r.figure][0] == '%' else ' points'}"
            for r in rules
        )
        console.print(f"nothing got worse beyond --fail-on ({units})")
    return 1 if failed or blind else 0
