"""The one orchestration of a compare, for pipeprof's scenarios and a user's script alike.

``settle`` decides everything a compare needs before it spends anything: the scenario's
"auto" keys resolved (the launcher, the framework, the input library: ``resolve``), the
launcher made and asked to refuse what it cannot start. ``open_run`` makes the run directory,
its manifest and status, the ranks' environment and the record stream. ``each_worker_count``
is the loop: one launch per worker count, in order; after each, what the ranks streamed is
taken in and the results so far are handed on; the first failure ends the loop, and so does a
stop signal between launches. ``finish_run`` says how the run ended and renders its report.
Nothing measured before a failure is lost, and the teardown is the same for every compare.
What differs between the modes is only what one launch runs: pipeprof's own ranks
(``workflows.compare``) or the user's command (``workflows.script``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from pipeprof import plugins
from pipeprof.launch import launcher as launchers
from pipeprof.launch import runner, signals, topology
from pipeprof.launch.choose import choose
from pipeprof.progress import Plan
from pipeprof.reporting import Reporter
from pipeprof.rundir import FAILED, FINISHED, INTERRUPTED, RUNNING, RunDir, manifest
from pipeprof.scenario import LaunchConfig, Scenario
from pipeprof.telemetry.nvml import Nvml
from pipeprof.workflows.live import RecordStream
from pipeprof.workflows.plan import launch_endpoint


@dataclass
class CompareResult:
    run_dir: Path
    summary: pd.DataFrame
    failure: str | None = None  # one line, when a launch failed; what ran before it is kept
    verdicts: list = field(
        default_factory=list
    )  # analysis.verdict.Verdict per np, with --ablation or --verdict
    signum: int | None = None  # the stop signal (SIGINT, SIGTERM, SIGHUP) that ended it early
    refused: bool = False  # the failure: every rank refused the script as used (exit 2)


@dataclass(frozen=True)
class CompareRequest:
    """What one compare is asked to do, for a scenario and for a user's script alike: the
    command line (``cli.compare``), ``pipeprof run`` and ``tune``'s confirming run build one."""

    scenario: Scenario
    nps: list[int]
    out: str | None = None  # the run directory; None: a new one under runs/
    argv: list[str] = field(default_factory=list)  # the command line, for the manifest
    script: list[str] = field(default_factory=list)  # a user's training command (compare -- CMD)
    only_variants: list[str] | None = None
    synthetic: bool = True  # run the synthetic twin
    real: bool = True  # run the real variants (False: --synthetic-only)
    ablation: bool = False  # the ladder of rungs, then the stage benchmark and the verdict
    verdict: bool = False  # the stage benchmark and the verdict, without rungs
    remedies: str | None = None  # None, "auto" (the costliest stage's) or "all"
    cores_per_rank: float | None = None  # the verdict's cores per rank, when not the topology's
    ram_budget_bytes: int | None = None
    stream_host: str | None = None  # the address ranks stream to
    report: bool = True  # render report.html and the rest at the end


@dataclass(frozen=True)
class Settled:
    """A compare's launches, decided before anything is spent."""

    scenario: Scenario  # its "auto" keys resolved
    launcher: launchers.Launcher
    gpus: list[dict[str, Any]]

    def placed(self, n: int) -> tuple[int, LaunchConfig]:
        """The processes the launcher starts for ``n`` workers, and where
        (``launch.topology.processes``: one a replica, or one a host)."""
        dist = plugins.kind(plugins.DISTRIBUTION, self.scenario.train.engine)
        return topology.processes(dist, n, self.scenario.launch, self.launcher)


def settle(scenario: Scenario, nps: list[int], nvml: Nvml | None = None) -> Settled:
    """The scenario as it will run and its launcher, which has refused, in one line, any
    worker count it cannot start (the CLI has said on its first line how "auto" resolved)."""
    gpus = (nvml or Nvml()).inventory()
    scenario = plugins.resolve(scenario)
    scenario = dataclasses.replace(
        scenario, launch=choose(scenario.launch, engine=scenario.train.engine)[0]
    )
    launcher = launchers.get(scenario.launch.launcher)
    dist = plugins.kind(plugins.DISTRIBUTION, scenario.train.engine)
    settled = Settled(scenario, launcher, gpus)
    for n in nps:
        launcher.check(*settled.placed(n), len(gpus), dist)
    return settled


@dataclass
class Opened:
    """A compare's run directory and what its launches share."""

    run: RunDir
    env: dict[str, str]  # the ranks' environment
    stream: RecordStream
    caught: signals.Catch  # a stop signal between launches ends them; what was measured is kept


def open_run(
    settled: Settled,
    request: CompareRequest,
    reporter: Reporter,
    run: RunDir,
    variants: list[str],
    extra: dict[str, Any],
    *,
    emulated: bool = False,
) -> Opened:
    """``run``'s manifest (the scenario, the launcher, ``extra``) and status (running), the plan
    said to ``reporter``, the ranks' environment (every host's ranks must reach the rendezvous
    in time: sized for the busiest) and the record stream."""
    scenario, launcher = settled.scenario, settled.launcher
    run.write_manifest(
        manifest(
            scenario.to_dict(),
            list(request.argv or []),
            settled.gpus,
            {
                "worker_counts": request.nps,
                "variants": variants,
                "launcher": launcher.name,
                "controller": scenario.launch.controller,
                "framework": scenario.train.framework,
                "engine": scenario.train.engine,
                "inputs": scenario.data.library,
                **extra,
            },
        )
    )
    run.write_status(RUNNING)
    reporter.progress(Plan(worker_counts=list(request.nps), variants=variants))
    local = max(topology.assign(n, scenario.launch).ranks_per_host for n in request.nps)
    env = launcher.env(dict(os.environ), str(Path.cwd()), emulated=emulated, local_ranks=local)
    endpoint = launch_endpoint(scenario.launch, request.stream_host)
    return Opened(run, env, RecordStream(run.path, reporter, endpoint=endpoint), signals.Catch())


@dataclass
class Outcome:
    failure: str | None = None  # one line; None when every launch ended well
    signum: int | None = None  # the stop signal that ended it early
    refused: bool = False  # the failing launch's ranks all refused the script (LaunchResult)


# one worker count's launch: its result, or (None, why it could not start); then its failure line
Launch = Callable[[int], tuple[runner.LaunchResult | None, str | None]]


def each_worker_count(
    nps: list[int],
    launch: Launch,
    *,
    stream: RecordStream,
    caught: signals.Catch,
    run_dir: Path,
    after: Callable[[int], None],
) -> Outcome:
    """``launch(n)`` for each worker count, then ``after(n)`` (the results so far), stopping at
    the first launch that returns a failure line; ``caught`` (entered here) turns a stop
    signal between launches into the outcome, and stays usable for what the caller does next."""
    out = Outcome()
    with caught, stream:
        for n in nps:
            result, failure = launch(n)
            stream.after_launch()
            after(n)
            if failure is not None:
                out.failure, out.signum = failure, result.signum if result is not None else None
                out.refused = result is not None and result.refused
                break
    stream.close()
    out.failure, out.signum = caught.outcome(out.failure, out.signum, run_dir)
    return out


def launch_failure(n: int, result: runner.LaunchResult, run: RunDir) -> str | None:
    """One line for a launch that did not end well, naming its log; None when it did."""
    return None if result.ok else f"np={n}: {result.reason()} (log: {run.log_path(f'np{n}')})"


def finish_run(
    run: RunDir, failure: str | None, signum: int | None, reporter: Reporter, report: bool
) -> None:
    """Say how the run ended in its status, then render its report (partial when it did not finish)."""
    run.write_status(
        FINISHED if failure is None else INTERRUPTED if signum is not None else FAILED,
        failure or "",
    )
    if report:
        from pipeprof.workflows.report import report_quietly

        done = report_quietly(run.path, reporter.warning)
        if done is not None:
            reporter.message(
                f"report: {run.path / 'report.html'}" + (" (partial)" if done.partial else "")
            )
