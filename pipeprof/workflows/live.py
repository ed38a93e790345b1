"""A run's record stream, wired once for every workflow that launches ranks: the collector
ranks connect to, the recorder that keeps every record in the run directory, and the
reporter that shows them while they arrive."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeprof.events import parse_line
from pipeprof.telemetry.recorder import Recorder
from pipeprof.telemetry.stream import Collector
from pipeprof.workflows.events import Reporter
from pipeprof.workflows.plan import stream_endpoint


class RecordStream:
    """``with RecordStream(run_dir, reporter, remote=...) as stream:`` ranks stream to
    ``stream.address`` with ``stream.token``; call ``after_launch()`` once a launch ended
    (takes in the files of ranks that could not connect) and ``close()`` at the end."""

    def __init__(
        self, run_dir: Path, reporter: Reporter, *, remote: bool, stream_host: str | None = None
    ) -> None:
        self.recorder = Recorder(run_dir)
        self.reporter = reporter
        self.token = secrets.token_hex(8)
        bind, advertise = stream_endpoint(remote, stream_host)
        self._collector = Collector(
            self._on_record,
            bind=bind,
            advertise=advertise,
            token=self.token,
            on_malformed=self.recorder.malformed,
        )

    def _on_record(self, record: dict) -> None:
        self.recorder.write(record)
        self.reporter.record(record)

    @property
    def address(self) -> str:
        return self._collector.address

    def __enter__(self) -> RecordStream:
        self._collector.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._collector.stop()

    def after_launch(self) -> None:
        self.recorder.ingest_fallback_files()
        self.recorder.flush()

    def close(self) -> None:
        """Say how many malformed records were dropped, if any, and close the recorder's files."""
        if self.recorder.malformed_count:
            self.reporter.warning(
                f"{self.recorder.malformed_count} malformed stream record(s) dropped; the first "
                f"is in {self.recorder.malformed_path}"
            )
        self.recorder.close()


def progress_lines(reporter: Reporter) -> Callable[[str], None]:
    """A launch's output line handler: the ranks' progress lines go to the reporter."""

    def on_line(line: str) -> None:
        event = parse_line(line)  # None: no event, or one cut by another rank's output
        if event is not None:
            reporter.progress(event)

    return on_line
