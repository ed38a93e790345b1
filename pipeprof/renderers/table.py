"""The summary as a rich table in the terminal."""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console, JustifyMethod
from rich.measure import Measurement
from rich.table import Table

VERDICT_STYLE = {
    "not input-bound": "green",
    "moderately input-bound": "yellow",
    "highly input-bound": "bold red",
    "on the 5% line": "yellow",
    "on the 20% line": "yellow",
    "ceiling": "dim",
}


def fmt(value, digits: int = 1, suffix: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:,.{digits}f}{suffix}"


def summary_table(summary: pd.DataFrame, title: str = "pipeprof compare") -> Table:
    table = Table(title=title, title_justify="left", header_style="bold")
    columns: list[tuple[str, JustifyMethod]] = [
        ("np", "right"),
        ("variant", "left"),
        ("samples/s", "right"),
        ("±95%", "right"),
        ("ceiling", "right"),
        ("gap", "right"),
        ("per worker", "right"),
        ("scaling eff.", "right"),
        ("step p50 ms", "right"),
        ("input wait", "right"),
        ("GPU util", "right"),
        ("host CPU", "right"),
        ("cores/rank", "right"),
        ("input-bound", "left"),
    ]
    for name, justify in columns:
        table.add_column(name, justify=justify)
    for _, r in summary.iterrows():
        verdict = str(r["verdict"]) if isinstance(r["verdict"], str) else ""
        table.add_row(
            str(r["np"]),
            str(r["variant"]),
            fmt(r["samples_per_s"]),
            fmt(r["samples_per_s_ci95"]),
            # the ceiling this row's gap is taken against: its twin, measured beside it
            "" if r["synthetic"] else fmt(r.get("twin_samples_per_s", math.nan)),
            ""
            if r["synthetic"]
            else fmt(r["gap_pct"], 1, "%")
            + (f" ±{fmt(r['gap_pct_ci95'])}" if not math.isnan(r["gap_pct_ci95"]) else ""),
            fmt(r["samples_per_s_per_worker"]),
            fmt(r["scaling_efficiency_pct"], 0, "%"),
            fmt(r["step_time_ms_p50"]),
            fmt(r["input_wait_pct"], 1, "%"),
            fmt(r.get("gpu_util_pct", math.nan), 0, "%"),
            fmt(r.get("cpu_util_pct", math.nan), 0, "%"),
            fmt(r.get("cpu_cores_per_rank", math.nan), 2),
            f"[{VERDICT_STYLE[verdict]}]{verdict.removesuffix(' input-bound')}[/]"
            if verdict in VERDICT_STYLE
            else verdict,
        )
    return table


def print_summary(summary: pd.DataFrame, console: Console, title: str = "pipeprof compare") -> None:
    table = summary_table(summary, title)
    if console.is_terminal:
        console.print(table)
    else:  # a log file has no width to fit: print every header, figure and verdict whole
        width = console.width
        console.width = max(
            width, Measurement.get(console, console.options.update(max_width=1000), table).maximum
        )
        try:
            console.print(table)
        finally:
            console.width = width
    for _, r in summary.iterrows():
        if isinstance(r["warning"], str) and r["warning"]:
            console.print(f"[yellow]warning[/] np={r['np']} {r['variant']}: {r['warning']}")
        for key in ("ceiling_note", "remedy_note"):
            if isinstance(r.get(key), str) and r[key]:
                console.print(f"[magenta]note[/] np={r['np']} {r['variant']}: {r[key]}")
