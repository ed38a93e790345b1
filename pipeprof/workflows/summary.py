"""A run directory's results, written after every launch so nothing measured is lost:
``summary.csv`` (throughput, gaps, telemetry, stage costs, bad files) and ``bad_files.csv``."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from pipeprof.analysis.ablation import add_stage_costs
from pipeprof.analysis.badfiles import add_bad_files
from pipeprof.analysis.badfiles import bad_files_warning as _warning_text
from pipeprof.analysis.remedies import add_gap_closed
from pipeprof.analysis.stats import summarize
from pipeprof.analysis.straggler import add_stragglers
from pipeprof.analysis.telemetry import add_telemetry
from pipeprof.data import badfiles
from pipeprof.errors import PipeprofError
from pipeprof.rundir import RunDir
from pipeprof.scenario import emulated_ms


def device_label(device: str) -> str:
    """What summary.csv's ``device`` column says: ``real``, or ``emulated:40ms`` for emulated runs."""
    ms = emulated_ms(device)
    return "real" if ms is None else f"emulated:{ms:g}ms"


def write_summary(
    run_dir: Path,
    synthetic_variants: set[str],
    order: list[str] | None = None,
    reference: str | None = None,
    device: str = "auto",
    *,
    remedy_reference: str | None = None,
    gpus: int = 0,
) -> pd.DataFrame:
    """``reference``: the real variant an ablation ladder splits; ``remedy_reference``: the one
    whose gap the remedies are held against."""
    run = RunDir(run_dir)
    steps = run.steps(paired=True)  # the twin's alternating steps carry the paired gaps
    tel = run.telemetry()
    stops = {(int(r["np"]), r["variant"]): r.get("stop_reason", "") for r in run.variant_runs()}
    summary = add_telemetry(
        summarize(steps, synthetic_variants, order, stops, core_shares(run, steps)),
        steps[steps["paired"] == ""],
        tel["gpu"],
        tel["host"],
        tel["proc"],
    )
    summary = add_stragglers(summary, steps[steps["paired"] == ""])
    if reference is not None:
        summary = add_stage_costs(summary, reference)
    if remedy_reference is not None:
        summary = add_gap_closed(summary, remedy_reference, device, gpus)
    summary = with_bad_files(summary, run_dir)
    summary.insert(2, "device", device_label(device))
    if not summary.empty:
        placed = hosts_per_np(steps)
        summary.insert(3, "hosts", [placed.get(int(n), "") for n in summary["np"]])
    run.write_summary(summary)
    return summary


def core_shares(run: RunDir, steps: pd.DataFrame) -> dict[int, float]:
    """Each np's share of a host's cores per rank: the cores this run could use (the
    manifest's ``cpu_cores``) over the most ranks one host ran; {} without a manifest."""
    try:
        cores = float(run.manifest().get("cpu_cores") or math.nan)
    except PipeprofError:
        return {}
    if steps.empty or math.isnan(cores):
        return {}
    busiest = steps.groupby(["np", "host"])["rank"].nunique().groupby(level="np").max()
    return {int(n): cores / int(k) for n, k in busiest.items() if k > 0}


def hosts_per_np(steps: pd.DataFrame) -> dict[int, str]:
    """Where each worker count's ranks ran, as ``-H`` says it: ``node1:2,node2:2`` (hosts in
    the order of their first rank); from the hosts the ranks put on their step records."""
    if steps.empty or "host" not in steps.columns:
        return {}
    out = {}
    for n, rows in steps[steps["host"] != ""].groupby("np"):
        ranks = rows.drop_duplicates("rank").sort_values("rank")
        counts = ranks.groupby("host", sort=False).size()
        out[int(n)] = ",".join(f"{h}:{c}" for h, c in counts.items())
    return out


def with_bad_files(summary: pd.DataFrame, run_dir: Path) -> pd.DataFrame:
    """The ranks' bad-file logs merged into ``bad_files.csv``, and counted in ``summary``."""
    bad = badfiles.load(run_dir)
    if not bad.empty:
        RunDir(run_dir).write_bad_files(bad)
    return add_bad_files(summary, bad)


def bad_files_warning(run_dir: Path) -> str | None:
    """The terminal's line about skipped bad files (None when there were none)."""
    return _warning_text(badfiles.load(run_dir), str(run_dir / "bad_files.csv"))
