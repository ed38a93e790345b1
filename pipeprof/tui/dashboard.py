"""The live terminal dashboard: rendered from a ``DashboardState``, refreshed at most 4 times a second."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rich.console import Console, Group, JustifyMethod, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from pipeprof.telemetry.priority import lower_this_thread
from pipeprof.tui.state import DashboardState

MAX_REFRESH_PER_S = 4
# The dashboard spaces its redraws so that rendering takes at most this share of one core:
# on a host whose cores are all training, every redraw is taken from the ranks. At 0.5% the
# launcher's CPU with the dashboard on exceeded the 1% of training's that the whole instrument
# may take here (benchmarks/telemetry_overhead.py, part 3).
CPU_BUDGET = 0.002
MAX_INTERVAL_S = 2.0
BARS_PER_HOST = 16  # a bar per core up to this many cores; a summary line past it
BARS_PER_LINE = 4  # four bars fit a 100-column terminal beside the host's name; never wrapped


def _n(value: float | None, digits: int = 1, suffix: str = "") -> str:
    return "–" if value is None else f"{value:,.{digits}f}{suffix}"


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    s = int(seconds)
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
        if s >= 3600
        else f"{s // 60:02d}:{s % 60:02d}"
    )


def bar(pct: float | None, width: int = 10) -> Text:
    """A text bar for a percentage: '██████    62%'."""
    if pct is None:
        return Text("n/a", style="dim")
    filled = max(0, min(width, round(pct / 100 * width)))
    style = "green" if pct >= 70 else "yellow" if pct >= 30 else "red"
    return (
        Text("█" * filled, style=style)
        + Text("░" * (width - filled), style="dim")
        + Text(f" {pct:3.0f}%")
    )


def header(s: DashboardState) -> RenderableType:
    title = Text.assemble(("pipeprof ", "bold"), (s.command, "bold cyan"), f" · {s.scenario}")
    if s.np is not None:
        title.append(f" · np={s.np}")
    if s.variant:
        title.append(f" · variant {s.variant_index}/{s.variants_total} ", style="")
        title.append(s.variant, style="bold")
    line = Table.grid(expand=True)
    line.add_column(ratio=1)
    line.add_column(justify="right")
    if s.steps_total or s.target_pct is None:
        done = f"{s.steps_done}/{s.steps_total} steps" if s.steps_total else f"{s.steps_done} steps"
        line.add_row(
            ProgressBar(
                total=max(1, s.steps_total), completed=min(s.steps_done, s.steps_total or 1)
            ),
            f" {done} · elapsed {_clock(s.elapsed_s)} · ETA {_clock(s.eta_s)}",
        )
    else:  # adaptive measurement: the bar fills as the 95% interval narrows to its target
        unit, what = ("", "gap") if s.precision_is_gap else ("%", "samples/s")
        now = "–" if s.half_pct is None else f"±{s.half_pct:.1f}{unit}"
        filled = 0.0 if s.half_pct is None else min(1.0, s.target_pct / max(s.half_pct, 1e-9))
        line.add_row(
            ProgressBar(total=100, completed=round(100 * filled)),
            f" {what} {now} (95%) → ±{s.target_pct:g}{unit} · {s.steps_done} steps · "
            f"elapsed {_clock(s.elapsed_s)}",
        )
    return Group(title, line)


def ranks_table(s: DashboardState) -> Table:
    title = "ranks (last 20 steps)"
    if s.ranks_total > len(s.ranks):
        title += f": the {len(s.ranks)} of {s.ranks_total:,} waiting longest on input"
    t = Table(title=title, title_justify="left", expand=True, header_style="bold")
    rank_columns: list[tuple[str, JustifyMethod]] = [
        ("rank", "right"),
        ("host", "left"),
        ("samples/s", "right"),
        ("step p50 ms", "right"),
        ("p95 ms", "right"),
        ("input wait", "right"),
        ("GPU util", "left"),
        ("GPU mem", "right"),
        ("CPU", "right"),
        ("RSS MB", "right"),
    ]
    for name, just in rank_columns:
        t.add_column(name, justify=just, no_wrap=True)
    for r in s.ranks:
        mem = (
            "–"
            if r.gpu_mem_used_mb is None
            else f"{r.gpu_mem_used_mb / 1024:.1f}/{(r.gpu_mem_total_mb or 0) / 1024:.0f} GB"
        )
        wait_style = (
            "red"
            if (r.input_wait_pct or 0) >= 20
            else "yellow"
            if (r.input_wait_pct or 0) >= 5
            else ""
        )
        t.add_row(
            Text(f"{r.rank} slow", style="bold red") if r.slow else str(r.rank),
            r.host,
            _n(r.samples_per_s),
            _n(r.step_time_ms_p50),
            _n(r.step_time_ms_p95),
            Text(_n(r.input_wait_pct, 1, "%"), style=wait_style),
            bar(r.gpu_util_pct),
            mem,
            _n(r.cpu_pct, 0, "%"),
            _n(r.rss_mb, 0),
        )
    if not s.ranks:
        t.add_row("", "waiting for ranks…", *[""] * 8)
    return t


def hosts_panel(s: DashboardState) -> RenderableType:
    parts: list[RenderableType] = []
    for h in s.hosts:
        grid = Table.grid(padding=(0, 2))
        grid.add_column()
        grid.add_column()
        cores = Text()
        per_core = h.cpu_per_core_pct
        if len(per_core) > BARS_PER_HOST:  # a line of bars per core would fill the screen
            cores += Text(f"{len(per_core)} cores: mean ") + bar(sum(per_core) / len(per_core), 8)
            cores += Text(f"  busiest {max(per_core):.0f}%")
            cores += Text(f"  {sum(c >= 90 for c in per_core)} at 90% or more")
        else:  # whole lines of bars: a wrap would split a label from its bar
            label = len(f"cpu{len(per_core) - 1}")
            for i, c in enumerate(per_core):
                if i and i % BARS_PER_LINE == 0:
                    cores += Text("\n")
                cores += Text(f"cpu{i}".ljust(label) + " ") + bar(c, 8) + Text("  ")
        grid.add_row(Text(h.host, style="bold"), cores)
        grid.add_row(
            "",
            f"memory {_n((h.mem_used_mb or 0) / 1024)}/{_n((h.mem_total_mb or 0) / 1024, 0)} GB · "
            f"ranks RSS {_n(h.ranks_rss_mb, 0)} MB · disk read {_n(h.disk_read_mb_per_s)} MB/s · "
            f"network {_n(h.net_mb_per_s)} MB/s",
        )
        parts.append(grid)
    if s.hosts_total > len(s.hosts):
        parts.append(Text(f"and {s.hosts_total - len(s.hosts):,} more hosts", style="dim"))
    return Panel(
        Group(*parts) if parts else Text("no host samples yet", style="dim"),
        title="hosts" + (f" (the {len(s.hosts)} busiest)" if s.hosts_total > len(s.hosts) else ""),
        title_align="left",
    )


def results_table(s: DashboardState) -> Table:
    t = Table(title="results so far", title_justify="left", header_style="bold")
    result_columns: list[tuple[str, JustifyMethod]] = [
        ("np", "right"),
        ("variant", "left"),
        ("samples/s", "right"),
        ("gap", "right"),
    ]
    for name, just in result_columns:
        t.add_column(name, justify=just)
    for r in s.results:
        t.add_row(
            str(r.np),
            r.variant,
            _n(r.samples_per_s),
            "" if r.gap_pct is None else _n(r.gap_pct, 1, "%"),
        )
    return t


def render(s: DashboardState) -> RenderableType:
    parts: list[RenderableType] = [header(s), ranks_table(s), hosts_panel(s)]
    if s.results:
        parts.append(results_table(s))
    parts += [Text(n, style="yellow") for n in s.notes]
    return Group(*parts)


class LiveDashboard:
    """Redraws ``snapshot()`` on its own low-priority thread, at most ``MAX_REFRESH_PER_S`` times a
    second, and less often when a redraw costs more CPU than ``CPU_BUDGET`` allows."""

    def __init__(
        self,
        snapshot: Callable[[], DashboardState],
        console: Console,
        refresh_per_s: float = MAX_REFRESH_PER_S,
    ) -> None:
        self._snapshot = snapshot
        self._interval = 1.0 / min(refresh_per_s, MAX_REFRESH_PER_S)
        self._live = Live(
            render(snapshot()),
            console=console,
            auto_refresh=False,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pipeprof-dashboard", daemon=True)
        self.frames = 0

    def __enter__(self) -> LiveDashboard:
        self._live.start()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.redraw()
        self._live.stop()

    def redraw(self) -> float:
        """Draw once; return the CPU seconds it took."""
        t = time.thread_time()
        self._live.update(render(self._snapshot()), refresh=True)
        self.frames += 1
        return time.thread_time() - t

    def _loop(self) -> None:
        lower_this_thread()
        interval = self._interval
        while not self._stop.wait(interval):
            cost = self.redraw()
            interval = min(MAX_INTERVAL_S, max(self._interval, cost / CPU_BUDGET))
