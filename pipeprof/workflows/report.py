"""`pipeprof report RUN_DIR` as a library call: render a run directory (report.html,
trace.json, TensorBoard event files). compare, run, watch, tune and predict call it when
they end; a renderer that fails is a warning there, never the loss of what was measured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from pipeprof.errors import PipeprofError
from pipeprof.renderers import FORMATS, renderer
from pipeprof.rundir import Run, RunDir


@dataclass
class ReportResult:
    run_dir: Path
    paths: list[Path] = field(default_factory=list)
    partial: str = (
        ""  # why the report is partial (the run still in progress, interrupted, failed), if it is
    )
    seconds: float = 0.0


def load_run(run_dir: Path) -> Run:
    """The run, or a one-line error: no run directory there, or nothing measured yet."""
    path = Path(run_dir)
    if not path.is_dir():
        raise PipeprofError(f"pipeprof report: {run_dir} is not a directory")
    if (path / "manifest.json").exists():
        from pipeprof.workflows.external_rank import assemble

        assemble(RunDir(path))  # a run of ranks pipeprof did not launch: its summary, current
    run = RunDir(path).load()
    measured = (
        (run.summary is not None and not run.summary.empty)
        or not run.steps.empty
        or (run.trials is not None and not run.trials.empty)
    )
    if not measured:
        state = run.status.get("state")
        when = (
            "yet (the run is still starting)"
            if state == "running"
            else "(the run ended before any step was measured)"
        )
        raise PipeprofError(
            f"pipeprof report: {path} has no results {when}: no summary.csv, steps or trials"
        )
    return run


def report(
    run_dir: Path, formats: tuple[str, ...] = FORMATS, against: Path | None = None
) -> ReportResult:
    """Render ``run_dir``; with ``against``, its report also holds the diff from that run."""
    t0 = time.perf_counter()
    run = load_run(run_dir)
    if against is not None:
        run.against = (Path(against), RunDir(against).summary())
    result = ReportResult(Path(run_dir))
    if run.partial:
        result.partial = f"{run.status.get('state')}: {run.status.get('detail') or 'not finished'}"
    for name in formats:
        result.paths += renderer(name).render(run, Path(run_dir))
    result.seconds = time.perf_counter() - t0
    return result


def report_quietly(run_dir: Path, warn) -> ReportResult | None:
    """What the commands call at their end: the report, or one warning line saying why not."""
    try:
        return report(run_dir)
    except PipeprofError as exc:
        warn(f"no report: {exc.message}")
    except (OSError, ValueError, KeyError) as exc:  # a renderer's bug must not cost the run
        warn(
            f"the report could not be rendered ({type(exc).__name__}: {exc}); the results are in {run_dir}"
        )
    return None
