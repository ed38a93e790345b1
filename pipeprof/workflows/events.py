"""What a workflow tells its caller while it runs: the one interface the live dashboard, the
plain terminal lines and the tests implement. Workflows call it; they never print."""

from __future__ import annotations

import pandas as pd


class Reporter:
    """What the caller sees while compare runs; the CLI renders these, tests can record them."""

    def message(self, text: str) -> None: ...

    def warning(self, text: str) -> None: ...

    def progress(self, event: dict) -> None: ...

    def data_progress(self, done: int, total: int) -> None: ...

    def record(self, record: dict) -> None:
        """A record streamed by a rank (called from the collector thread)."""

    def results(self, summary: pd.DataFrame) -> None:
        """The summary so far, after each launch."""
