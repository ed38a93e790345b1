"""A run's record stream, wired once for every workflow that launches ranks: the collector
ranks connect to, the recorder that keeps every record in the run directory, and the
reporter that shows them while they arrive."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeprof.progress import RankWarning, parse_line
from pipeprof.reporting import Reporter
from pipeprof.telemetry.recorder import Recorder
from pipeprof.telemetry.stream import Collector
from pipeprof.workflows.plan import LOOPBACK

# A rank whose records stopped this long before the others' is named when its launch fails
# (records come at least twice a second from every live rank)
SILENT_S = 10.0


class RecordStream:
    """``with RecordStream(run_dir, reporter, endpoint=...) as stream:`` ranks stream to
    ``stream.address`` with ``stream.token``; call ``after_launch()`` once a launch ended
    (takes in the files of ranks that could not connect) and ``close()`` at the end.
    ``endpoint``: where the collector listens, and the address ranks are told
    (``plan.stream_endpoint``)."""

    def __init__(
        self, run_dir: Path, reporter: Reporter, *, endpoint: tuple[str, str] = LOOPBACK
    ) -> None:
        self.recorder = Recorder(run_dir)
        self.reporter = reporter
        self.token = secrets.token_hex(8)
        self._seen: dict[int, float] = {}  # rank -> when its last record arrived (monotonic)
        self._ended: set[int] = set()  # ranks that closed their stream themselves
        bind, advertise = endpoint
        self._collector = Collector(
            self._on_record,
            bind=bind,
            advertise=advertise,
            token=self.token,
            on_malformed=self.recorder.malformed,
        )

    def _on_record(self, record: dict) -> None:
        if isinstance(rank := record.get("rank"), int):
            self._seen[rank] = time.monotonic()
            if record.get("kind") == "bye":  # it closed its stream itself: not lost
                self._ended.add(rank)
        self.recorder.write(record)
        self.reporter.record(record)

    def begin_launch(self) -> None:
        """A launch starts: forget when the last one's ranks were heard from."""
        self._seen, self._ended = {}, set()

    def silent(self, sample_s: float = 0.5) -> list[tuple[int, float]]:
        """(rank, seconds) for each rank heard from in this launch whose records stopped well
        before the others' (the newest's), and that never said it was ending: its process
        killed or frozen, its host or its link gone. A live rank streams its process's
        telemetry every ``sample_s`` (``telemetry.host_interval_ms``), even blocked in a
        collective, so a rank that waits on a lost peer is not silent."""
        seen, ended = dict(self._seen), set(self._ended)  # the collector thread writes them
        if not seen:
            return []
        newest, min_s = max(seen.values()), max(SILENT_S, 8 * sample_s)
        return sorted(
            ((r, newest - t) for r, t in seen.items() if newest - t >= min_s and r not in ended),
            key=lambda rs: -rs[1],
        )

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
        if isinstance(event, RankWarning):
            reporter.warning(event.text())
        elif event is not None:
            reporter.progress(event)

    return on_line
