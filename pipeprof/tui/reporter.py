"""How a running job shows itself: a live dashboard on a terminal, plain lines elsewhere."""

from __future__ import annotations

import math
import time

import pandas as pd
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)

from pipeprof.progress import Event, Launch, Precision, RanksUp, StepProgress, VariantDone
from pipeprof.reporting import Reporter
from pipeprof.tui.dashboard import LiveDashboard
from pipeprof.tui.state import LiveState, ResultRow

PRECISION_LINE_EVERY_S = 10.0  # plain output: how often to say how narrow the interval is


def precision_text(event: Precision) -> str:
    """``gap ±3.4 → ±2`` while a real variant measures; ``±1.8% → ±1%`` for the ceiling."""
    unit = "" if event.gap else "%"
    what = "gap" if event.gap else "samples/s"
    now = "–" if math.isnan(event.half_pct) else f"±{event.half_pct:.1f}{unit}"
    return f"{event.steps} steps, {event.seconds:.0f}s: {what} {now} → ±{event.target_pct:g}{unit}"


class PlainReporter(Reporter):
    """Progress as plain lines (logs, CI, --no-dashboard); a bar while generating data."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._t0 = time.monotonic()
        self._last_precision = -PRECISION_LINE_EVERY_S

    def message(self, text: str) -> None:
        self.console.print(text)

    def warning(self, text: str) -> None:
        self.console.print(f"[yellow]warning:[/] {text}")

    def data_progress(self, done: int, total: int) -> None:
        if self._bar is None:
            self._bar = Progress(
                TextColumn("data"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=self.console,
                transient=False,
            )
            self._bar.start()
            self._task = self._bar.add_task("data", total=total)
        assert self._task is not None  # added with the bar, above
        self._bar.update(self._task, completed=done)
        if done >= total:
            self._bar.stop()
            self._bar = None

    def progress(self, event: Event) -> None:
        at = f"[{time.monotonic() - self._t0:6.0f}s]"
        elapsed = time.monotonic() - self._t0
        if isinstance(event, Launch) and event.np is not None:
            how = f" with {event.launcher}" if event.launcher else ""
            where = f" on {event.hosts}" if event.hosts else ""
            self.console.print(
                f"{at} np={event.np}: starting {event.np} rank(s){how}{where}, "
                f"{event.of_variants} variant(s)"
            )
        elif isinstance(event, RanksUp):
            self.console.print(
                f"{at} np={event.np}: ranks up on {event.device}, "
                f"batch {event.per_worker_batch}/worker, lr {event.learning_rate:g}"
            )
        elif isinstance(event, StepProgress) and event.steps and event.step == event.steps // 2:
            self.console.print(
                f"{at} np={event.np}: {event.variant} "
                f"({event.index + 1}/{event.of_variants}) step {event.step}/{event.steps}"
            )
        elif (
            isinstance(event, Precision)
            and elapsed - self._last_precision >= PRECISION_LINE_EVERY_S
        ):
            self._last_precision = elapsed
            self.console.print(
                f"{at} np={event.np}: {event.variant} "
                f"({event.index + 1}/{event.of_variants}) {precision_text(event)}"
            )
        elif isinstance(event, VariantDone):
            how = (
                f", {event.steps} steps, stopped: {event.stop_reason}" if event.stop_reason else ""
            )
            self.console.print(
                f"{at} np={event.np}: {event.variant} done in {event.wall_s:.1f}s{how}"
            )

    def close(self) -> None:
        """Nothing to tear down."""


def result_rows(summary: pd.DataFrame) -> list[ResultRow]:
    return [
        ResultRow(
            np=int(r["np"]),
            variant=str(r["variant"]),
            samples_per_s=float(r["samples_per_s"]),
            gap_pct=None if math.isnan(r["gap_pct"]) else float(r["gap_pct"]),
        )
        for _, r in summary.iterrows()
    ]


class DashboardReporter(PlainReporter):
    """The live dashboard from the first launch until ``close()``."""

    def __init__(self, console: Console, *, command: str, scenario: str, steps_total: int) -> None:
        super().__init__(console)
        self.state = LiveState(command=command, scenario=scenario, steps_total=steps_total)
        self._dash: LiveDashboard | None = None

    def _ensure_live(self) -> None:
        if self._dash is None:
            self._dash = LiveDashboard(self.state.snapshot, self.console).__enter__()

    def progress(self, event: Event) -> None:
        self.state.apply_event(event)
        if isinstance(event, Launch):
            self._ensure_live()

    def record(self, record: dict) -> None:
        self.state.apply(record)

    def results(self, summary: pd.DataFrame) -> None:
        self.state.set_results(result_rows(summary))

    def close(self) -> None:
        if self._dash is not None:
            self._dash.__exit__(None, None, None)
            self._dash = None
