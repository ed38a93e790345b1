"""What a workflow tells its caller while it runs: the one interface the live dashboard, the
plain terminal lines and the tests implement. Workflows call it; they never print."""

from __future__ import annotations

import pandas as pd

from pipeprof.progress import Event


class Reporter:
    """What the caller sees while compare runs; the CLI renders these, tests can record them."""

    def message(self, text: str) -> None: ...

    def warning(self, text: str) -> None: ...

    def progress(self, event: Event) -> None:
        """A progress event (``pipeprof.progress``): from the workflow, or a rank's line."""

    def data_progress(self, done: int, total: int) -> None: ...

    def record(self, record: dict) -> None:
        """A record streamed by a rank (called from the collector thread)."""

    def results(self, summary: pd.DataFrame) -> None:
        """The summary so far, after each launch."""

    def close(self) -> None:
        """The run is over: stop whatever the reporter runs (a live display, a server)."""


class FanOut(Reporter):
    """Several reporters as one: the dashboard and the metrics exporter see the same events."""

    def __init__(self, *reporters: Reporter) -> None:
        self.reporters = [r for r in reporters if r is not None]

    def message(self, text: str) -> None:
        for r in self.reporters:
            r.message(text)

    def warning(self, text: str) -> None:
        for r in self.reporters:
            r.warning(text)

    def progress(self, event: Event) -> None:
        for r in self.reporters:
            r.progress(event)

    def data_progress(self, done: int, total: int) -> None:
        for r in self.reporters:
            r.data_progress(done, total)

    def record(self, record: dict) -> None:
        for r in self.reporters:
            r.record(record)

    def results(self, summary: pd.DataFrame) -> None:
        for r in self.reporters:
            r.results(summary)

    def close(self) -> None:
        for r in self.reporters:
            r.close()
