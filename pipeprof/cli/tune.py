"""``pipeprof tune``: find prefetch, parallelism, thread-pool, cache and shuffle settings on the
cores one rank will have, before the cluster run."""

from __future__ import annotations

import argparse
import math
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.syntax import Syntax
from rich.table import Table

from pipeprof import scenario as scen
from pipeprof.cli.common import add_report_argument, console_for_output, parse_size
from pipeprof.errors import PipeprofError
from pipeprof.launch import signals, topology
from pipeprof.renderers.table import fmt, print_summary
from pipeprof.tui.reporter import PlainReporter
from pipeprof.workflows.tune import TuneResult, parse_duration, tune


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "tune",
        help="search tf.data settings on one rank's share of CPU, then confirm them",
        description="Search prefetch depth, parallel calls, thread pools, cache placement and shuffle "
        "buffer for the most pipeline samples/s on --cores-per-rank cores.",
    )
    p.add_argument("scenario", nargs="?", default=None, help="scenario TOML file or built-in name")
    p.add_argument(
        "--cores-per-rank",
        type=int,
        default=None,
        metavar="N",
        help="CPU cores one rank will have on the cluster node (enforced by CPU affinity; default: all here)",
    )
    p.add_argument(
        "--budget", default="5m", metavar="DURATION", help="search time, e.g. 90s, 5m (default 5m)"
    )
    p.add_argument(
        "--max-trials",
        type=int,
        default=0,
        metavar="N",
        help="end the search after N trials, or at --budget if that comes first (default: no limit)",
    )
    p.add_argument(
        "--trial-seconds",
        type=float,
        default=1.5,
        metavar="S",
        help="a trial's length: each measures at least half of it, and stops there once its "
        "rate is known to ±1%% or it cannot beat the best so far (default 1.5)",
    )
    p.add_argument(
        "--ram-budget",
        type=parse_size,
        metavar="SIZE",
        help="RAM one rank may use for cache + shuffle, e.g. 8G",
    )
    p.add_argument(
        "--ranks",
        type=int,
        default=1,
        metavar="N",
        help="ranks the data set will be sharded over (sizes the in-memory cache; default 1)",
    )
    p.add_argument(
        "--confirm-steps",
        type=int,
        default=60,
        metavar="N",
        help="steps of the confirming training run per variant (0: skip it)",
    )
    p.add_argument(
        "--out", metavar="DIR", help="run directory (default: runs/<time>-<scenario>-tune)"
    )
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    add_report_argument(p)
    p.set_defaults(run=run)


def _point_text(point: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items())


def print_result(res: TuneResult, console: Console) -> None:
    ok = [t for t in res.search.trials if not t.error]
    table = Table(
        title=f"configurations tried ({len(res.search.trials)}; best 10)",
        title_justify="left",
        header_style="bold",
    )
    for name in ("samples/s", "CPU cores", "phase", "settings"):
        table.add_column(
            name, justify="right" if name != "settings" and name != "phase" else "left"
        )
    for t in sorted(ok, key=lambda t: -t.samples_per_s)[:10]:
        table.add_row(
            fmt(t.samples_per_s, 0), fmt(t.cpu_cores_used, 2), t.phase, _point_text(t.point)
        )
    console.print(table)
    if not math.isnan(res.search.noise_pct):
        console.print(
            f"two measurements of one setting landed {res.search.noise_pct:.1f}% apart (RMS) on this machine, so "
            f"a change had to win by {res.search.margin_pct:.1f}% to be kept"
        )
    cmp = Table(
        title=f"the winner beside the scenario's settings and {res.autotune.get('label', 'AUTOTUNE')} "
        "(pipeline only)",
        title_justify="left",
        header_style="bold",
    )
    for name in ("", "samples/s", "CPU cores used", "vs scenario"):
        cmp.add_column(name, justify="left" if not name else "right")
    base = res.scenario_default.get("samples_per_s", math.nan)
    best = res.search.best
    for label, r in (
        ("scenario", res.scenario_default),
        (res.autotune.get("label", "AUTOTUNE"), res.autotune),
        (
            "tuned",
            {  # no best when every trial failed: the table says nan, the trials say why
                "samples_per_s": best.samples_per_s if best is not None else math.nan,
                "cpu_cores_used": best.cpu_cores_used if best is not None else math.nan,
            },
        ),
    ):
        s = r.get("samples_per_s", math.nan)
        cmp.add_row(
            label,
            fmt(s, 0),
            fmt(r.get("cpu_cores_used", math.nan), 2),
            fmt(100 * s / base - 100, 0, "%"),
        )
    console.print(cmp)
    for line in res.refused:
        console.print(f"[yellow]refused[/] {line}")
    said = {"dataloader.py.txt": "DataLoader", "grain.py.txt": "Grain"}
    console.print(f"equivalent {said.get(res.code_file, 'tf.data')} code:")
    console.print(Syntax((res.run_dir / res.code_file).read_text(), "python", theme="ansi_dark"))
    console.print(
        f"scenario fragment: {res.run_dir / 'winner.toml'}  "
        f"(use: pipeprof compare SCENARIO --overlay {res.run_dir / 'winner.toml'})"
    )
    if res.confirm is not None:
        if not res.confirm.summary.empty:
            print_summary(res.confirm.summary, console, title="confirmation: real training, np=1")
            s = res.confirm.summary.set_index("variant")
            if {"scenario", "tuned"} <= set(s.index):
                console.print(
                    f"gap before tuning {fmt(s.loc['scenario', 'gap_pct'], 1, '%')}, "
                    f"after {fmt(s.loc['tuned', 'gap_pct'], 1, '%')}"
                )
        if res.confirm.failure:
            console.print(f"[red]confirmation run failed:[/] {res.confirm.failure}")


def run(args: argparse.Namespace, argv: list[str]) -> int:
    console = console_for_output()
    scenario = scen.load(args.scenario, [scen.parse_override(s) for s in args.sets])
    cores = args.cores_per_rank or topology.usable_cores()
    budget_s = parse_duration(args.budget)
    if args.max_trials < 0:
        raise PipeprofError(f"--max-trials {args.max_trials}: must be 0 (no limit) or more")
    if args.trial_seconds <= 0:
        raise PipeprofError(f"--trial-seconds {args.trial_seconds}: must be positive")
    console.print(
        f"pipeprof tune: scenario [bold]{scenario.name}[/], {cores} core(s) per rank, budget {budget_s:.0f}s"
    )
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )
    task = progress.add_task("tuning", total=budget_s)
    seen = {"n": 0, "best": 0.0}

    def on_trial(t, elapsed: float) -> None:
        seen["n"] += 1
        if not t.error:
            seen["best"] = max(seen["best"], t.samples_per_s)
        progress.update(
            task,
            completed=min(elapsed, budget_s),
            description=f"trial {seen['n']} · best {seen['best']:,.0f} samples/s",
        )
        if not console.is_terminal:
            console.print(
                f"  {t.phase:<7} {t.samples_per_s:9.0f} samples/s ±{fmt(t.half_pct, 1, '%'):>5} "
                f"{t.seconds:4.1f}s {t.stop:<8} {_point_text(t.point)}"
                + (f"  error: {t.error}" if t.error else "")
            )

    with progress:
        res = tune(
            scenario,
            cores=cores,
            budget_s=budget_s,
            trial_s=args.trial_seconds,
            ram_budget_bytes=args.ram_budget,
            ranks=args.ranks,
            out=args.out,
            argv=argv,
            reporter=PlainReporter(console),
            on_trial=on_trial,
            confirm_steps=args.confirm_steps,
            report=not args.no_report,
            max_trials=args.max_trials,
        )
    print_result(res, console)
    console.print(f"run directory: {res.run_dir}")
    if (
        res.confirm is not None and res.confirm.signum is not None
    ):  # stopped during the confirming run
        raise PipeprofError(
            f"tune: {res.confirm.failure}", exit_code=signals.exit_code(res.confirm.signum)
        )
    return 0
