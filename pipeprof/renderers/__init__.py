"""Renderers: a run directory (``rundir.Run``) in, something a person looks at out.

Each renderer has a ``name`` and ``render(run, dest) -> [paths written]``: ``html``
(report.html), ``trace`` (trace.json), ``tensorboard`` (event files). The terminal's tables
(``table``, ``diagnosis``) print a summary to a console instead, and ``metrics`` serves the
live figures to Prometheus while a run goes on. None imports TensorFlow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from pipeprof.rundir import Run


class Renderer(Protocol):
    name: str

    def render(self, run: Run, dest: Path) -> list[Path]: ...


FORMATS = ("html", "trace", "tensorboard")


def renderer(name: str) -> Renderer:
    """The renderer of a format (imported on demand: matplotlib and TensorBoard's protos are slow to load)."""
    if name == "html":
        from pipeprof.renderers.html import HtmlReport

        return HtmlReport()
    if name == "trace":
        from pipeprof.renderers.trace import ChromeTrace

        return ChromeTrace()
    if name == "tensorboard":
        from pipeprof.renderers.tensorboard import TensorBoardEvents

        return TensorBoardEvents()
    raise ValueError(f"unknown report format {name!r} (known: {', '.join(FORMATS)})")
