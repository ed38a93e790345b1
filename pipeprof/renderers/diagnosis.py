"""The ablation's stage costs and the verdict, in the terminal."""

from __future__ import annotations

import pandas as pd
from rich.console import Console
from rich.table import Table

from pipeprof.renderers.table import fmt


def own_figure(value: float) -> str:
    """A library's own figure for a stage, or why there is none: Grain times the nodes of its
    dataset (its read-and-decode map, its augmentation), not every stage pipeprof names."""
    return "not timed by Grain" if pd.isna(value) else fmt(value, 3)


def stage_cost_table(summary: pd.DataFrame) -> Table | None:
    if "stage_marginal_ms" not in summary or summary["stage_marginal_ms"].isna().all():
        return None
    t = Table(
        title="what each stage costs (training, ablation ladder)",
        title_justify="left",
        header_style="bold",
    )
    for name in ("np", "rung", "step ms", "marginal ms/step", "% of gap"):
        t.add_column(name, justify="left" if name == "rung" else "right")
    for _, r in summary[summary["stage_marginal_ms"].notna()].iterrows():
        t.add_row(
            str(r["np"]),
            str(r["variant"]),
            fmt(r["step_time_ms_mean"]),
            fmt(r["stage_marginal_ms"], 2),
            fmt(r["stage_pct_of_gap"], 0, "%"),
        )
    return t


def script_stage_table(stages: pd.DataFrame) -> Table:
    t = Table(
        title=f"each transformation of the script's dataset alone ({int(stages['cores'].iloc[0])} core(s))",
        title_justify="left",
        header_style="bold",
    )
    for name in ("#", "transformation", "samples/s", "core-ms/sample", "marginal core-ms", "note"):
        t.add_column(name, justify="left" if name in ("transformation", "note") else "right")
    for _, r in stages.iterrows():
        note = r["note"] if isinstance(r["note"], str) else ""
        t.add_row(
            str(r["index"]),
            str(r["transformation"]),
            fmt(r["samples_per_s"], 0),
            fmt(r["core_ms_per_sample"], 3),
            fmt(r["marginal_core_ms"], 3),
            note,
        )
    return t


def print_diagnosis(
    summary: pd.DataFrame,
    verdicts: list,
    stages: pd.DataFrame | None,
    console: Console,
    script_stages: pd.DataFrame | None = None,
) -> None:
    table = stage_cost_table(summary)
    if table is not None:
        console.print(table)
    if script_stages is not None and not script_stages.empty:
        console.print(script_stage_table(script_stages))
    if stages is not None and not stages.empty:
        t = Table(
            title=f"each stage alone (pipeline only, {int(stages['cores'].iloc[0])} core(s))",
            title_justify="left",
            header_style="bold",
        )
        # the input library's own timing of a stage (Grain's), beside pipeprof's
        own = "library_ms_per_element" in stages and stages["library_ms_per_element"].notna().any()
        names = ["stage", "samples/s 1 thread", "samples/s configured", "core-ms/sample"]
        names += ["marginal core-ms"] + (["Grain's own ms/element"] if own else [])
        for name in names:
            t.add_column(name, justify="left" if name == "stage" else "right")
        for _, r in stages.iterrows():
            t.add_row(
                r["stage"],
                fmt(r["samples_per_s_1"], 0),
                fmt(r["samples_per_s_configured"], 0),
                fmt(r["core_ms_per_sample_1"], 3),
                fmt(r["marginal_core_ms_1"], 3),
                *([own_figure(r["library_ms_per_element"])] if own else []),
            )
        console.print(t)
    for v in verdicts:
        style = "bold red" if v.input_bound else "bold green"
        console.print(f"[{style}]verdict[/] {v.text[0]}")
        for line in v.text[1:]:
            console.print(f"  {line}")
        for a in v.advice:
            console.print(f"  [cyan]→[/] {a}")
