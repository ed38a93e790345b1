"""`pipeprof watch` as a library call: run the user's own training command with a collector's
address in its environment; ``pipeprof.keras.PipeprofCallback`` in their script streams to it,
and everything streamed is kept and summarised in a run directory."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from pipeprof.errors import PipeprofError
from pipeprof.launch import runner, signals
from pipeprof.launch.launcher import base_env
from pipeprof.progress import Launch, RankWarning, parse_line
from pipeprof.reporting import Reporter
from pipeprof.rundir import RUNNING, RunDir, manifest
from pipeprof.scenario import LaunchConfig
from pipeprof.telemetry.nvml import Nvml
from pipeprof.telemetry.stream import ENV_ADDRESS, ENV_RUN_DIR, ENV_TOKEN
from pipeprof.workflows.compare import CompareResult, finish_run
from pipeprof.workflows.live import RecordStream
from pipeprof.workflows.plan import launch_endpoint, stream_endpoint
from pipeprof.workflows.summary import write_summary

# a watched horovodrun's (or mpirun's) flags that place ranks on other hosts, and the
# scenario keys they mean: the stream address is chosen from them as compare chooses it
HOST_FLAGS = {
    "-H": "hosts",
    "--hosts": "hosts",
    "--host": "hosts",
    "--hostfile": "hostfile",
    "--network-interface": "network_interface",
}


def watch_endpoint(cmd: list[str], stream_host: str | None) -> tuple[str, str]:
    """Where the watched ranks stream: as for compare, from the hosts the command names."""
    launch = watched_launch(cmd)
    if launch is None:
        return stream_endpoint(False, stream_host)
    try:
        return launch_endpoint(launch, stream_host)
    except PipeprofError:  # a hostfile pipeprof cannot read: the launcher will say why
        return stream_endpoint(True, stream_host)


def watched_launch(cmd: list[str]) -> LaunchConfig | None:
    """The placement a watched launcher's command line gives (None: this host alone)."""
    given: dict[str, str] = {}
    for i, arg in enumerate(cmd):
        flag, eq, value = arg.partition("=")
        if flag in HOST_FLAGS and (eq or i + 1 < len(cmd)):
            given[HOST_FLAGS[flag]] = value if eq else cmd[i + 1]
    if not (given.get("hosts") or given.get("hostfile")):
        return None
    return LaunchConfig(
        hosts=given.get("hosts", ""),
        hostfile=given.get("hostfile", ""),
        network_interface=given.get("network_interface", ""),
    )


@dataclass
class WatchResult(CompareResult):
    exit_code: int = (
        0  # what pipeprof exits with when the command failed (its status, or 128 + signal)
    )


def warnings_and(
    reporter: Reporter, on_line: Callable[[str], None] | None
) -> Callable[[str], None]:
    """The watched command's lines to ``on_line``, and a rank's warning to the reporter too."""

    def take(line: str) -> None:
        if isinstance(event := parse_line(line), RankWarning):
            reporter.warning(event.text())
        if on_line is not None:
            on_line(line)

    return take


def watch(
    cmd: list[str],
    *,
    out: str | None = None,
    argv: list[str] | None = None,
    reporter: Reporter | None = None,
    timeout_s: int = 0,
    stream_host: str | None = None,
    on_line: Callable[[str], None] | None = None,
    report: bool = True,
) -> WatchResult:
    reporter = reporter or Reporter()
    run = RunDir.create(out, "watch")
    run_dir = run.path
    run.write_manifest(
        manifest(
            {}, list(argv or []), Nvml().inventory(), {"watched_command": cmd, "command": "watch"}
        )
    )
    run.write_status(RUNNING)
    stream = RecordStream(
        run_dir,
        reporter,
        endpoint=watch_endpoint(cmd, stream_host),
    )
    with stream:
        env = base_env(dict(os.environ), os.getcwd())
        env.update(
            {ENV_ADDRESS: stream.address, ENV_TOKEN: stream.token, ENV_RUN_DIR: str(run_dir)}
        )
        reporter.progress(Launch(np=None, of_variants=1))
        try:
            result = runner.run(
                cmd,
                env=env,
                log_path=run.log_path("watch"),
                timeout_s=timeout_s or 10**9,
                on_line=warnings_and(reporter, on_line),
            )
        except FileNotFoundError:
            raise PipeprofError(f"pipeprof watch: command not found: {cmd[0]}") from None
        stream.after_launch()
    stream.close()
    summary = write_summary(run_dir, set())
    if result.ok:
        finish_run(run, None, None, reporter, report)
        return WatchResult(run_dir, summary)
    code = (
        signals.exit_code(result.signum)
        if result.signum is not None
        else result.returncode
        if result.returncode > 0
        else 1
    )
    failure = f"the watched command failed: {result.reason()} (log: {run.log_path('watch')})"
    finish_run(run, failure, result.signum, reporter, report)
    return WatchResult(run_dir, summary, failure, signum=result.signum, exit_code=code)
