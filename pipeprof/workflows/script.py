"""`pipeprof compare --np 1,2 -- python train.py ARGS` as a library call: the user's own
training script, unchanged but for ``pipeprof.keras.instrument`` and ``PipeprofCallback``,
under horovodrun at each worker count, compared with its synthetic twin.

One launch per worker count: the script's ``fit`` measures the twin alone, then the real
pipeline in rounds against it (``rank.fit``). Should ``fit`` end before the real pipeline was
measured (its epochs ran out), the missing variant gets a launch of its own, and the output
says so. With ``ablation``, the script is started once more, without horovodrun and pinned
to one rank's cores, to measure each transformation of its dataset alone; the verdict names
the costly one.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pandas as pd

from pipeprof.analysis.verdict import Verdict
from pipeprof.distributions import rendezvous_of
from pipeprof.errors import PipeprofError
from pipeprof.launch import runner, signals, topology
from pipeprof.launch.job import ENV_SCRIPT_JOB, ScriptJob
from pipeprof.reporting import Reporter
from pipeprof.rundir import RunDir
from pipeprof.scenario import Scenario
from pipeprof.telemetry.stream import ENV_ADDRESS, ENV_RUN_DIR, ENV_TOKEN
from pipeprof.workflows.diagnose import cores_per_rank, verdicts_per_np, write_verdicts
from pipeprof.workflows.live import progress_lines
from pipeprof.workflows.orchestrate import (
    CompareRequest,
    CompareResult,
    each_worker_count,
    finish_run,
    launch_failure,
    open_run,
    settle,
)
from pipeprof.workflows.plan import launch_event
from pipeprof.workflows.summary import write_summary

VARIANTS = ("synthetic", "real")
ADD_BOTH = (
    "add `dataset = pipeprof.keras.instrument(dataset)` before model.fit and "
    "`pipeprof.keras.PipeprofCallback()` to its callbacks (a custom loop: "
    "`for batch in pipeprof.keras.instrument(dataset):` and `with pipeprof.keras.step():` "
    "around its step)"
)
MEASUREMENT_KEYS = (
    "warmup_steps",
    "measure_steps",
    "target_ci_pct",
    "min_measure_s",
    "max_measure_s",
)


def script_name(cmd: list[str]) -> str:
    """What names the run: the script a Python command runs, else the program."""
    args = (
        [a for a in cmd[1:] if not a.startswith("-")]
        if Path(cmd[0]).name.startswith("python")
        else cmd
    )
    return Path(args[0] if args else cmd[0]).stem or "script"


def _variant_runs(run: RunDir, n: int) -> list[dict]:
    """What the launch at ``n`` wrote of each variant it measured (variants.jsonl)."""
    return [r for r in run.variant_runs() if int(r["np"]) == n]


def compare_script(request: CompareRequest, *, reporter: Reporter | None = None) -> CompareResult:
    """``request.script`` under the launcher at each worker count (see the module's docstring)."""
    cmd, scenario, nps, out = request.script, request.scenario, request.nps, request.out
    ablation, cores_override, report = request.ablation, request.cores_per_rank, request.report
    reporter = reporter or Reporter()
    if not cmd:
        raise PipeprofError(
            "compare: give the training command after --, e.g. "
            "pipeprof compare --np 1,2 -- python train.py"
        )
    settled = settle(scenario, nps)  # refuse before spending anything
    scenario, launcher = settled.scenario, settled.launcher
    run = RunDir.create(out, scenario.name)
    run_dir = run.path
    opened = open_run(
        settled,
        request,
        reporter,
        run,
        list(VARIANTS),
        {"script": cmd, "device": "real", "command": "compare"},
    )
    reporter.message(
        "one launch per worker count: the script's training (model.fit or its own loop) measures "
        "the synthetic twin, then its own pipeline in rounds against it"
    )
    base_env, stream, caught = opened.env, opened.stream, opened.caught
    train = {k: getattr(scenario.train, k) for k in MEASUREMENT_KEYS}

    def run_script(n: int, variants: list[str], label: str) -> runner.LaunchResult:
        job = ScriptJob(
            run_dir=str(run_dir),
            np=n,
            variants=variants,
            train=train,
            engine=scenario.train.engine,
            rendezvous=rendezvous_of(scenario.train.engine, n, scenario.launch, str(run_dir)),
        )
        env = dict(
            base_env,
            **{
                ENV_SCRIPT_JOB: job.encode(),
                ENV_ADDRESS: stream.address,
                ENV_TOKEN: stream.token,
                ENV_RUN_DIR: str(run_dir),
            },
        )
        reporter.progress(launch_event(n, len(variants), launcher.name, scenario.launch))
        stream.begin_launch()
        started, placed = settled.placed(n)  # the processes: one a replica, or a host
        try:
            result = runner.run(
                launcher.script_argv(started, placed, cmd),
                env=env,
                program=launcher.name,
                rank_exit=launcher.rank_exit,
                hosts=topology.assign(started, placed).hosts_of_ranks,
                log_path=run.log_path(label),
                timeout_s=scenario.launch.timeout_s,
                on_line=progress_lines(reporter),
            )
        except FileNotFoundError:
            raise PipeprofError(f"compare: command not found: {cmd[0]}") from None
        result.silent = stream.silent(scenario.telemetry.host_interval_ms / 1e3)
        return result

    def launch(n: int) -> tuple[runner.LaunchResult | None, str | None]:
        result = run_script(n, list(VARIANTS), f"np{n}")
        runs = _variant_runs(run, n)
        measured = {r["variant"] for r in runs if r.get("measured_steps", 0) > 0}
        missing = [v for v in VARIANTS if v not in measured]
        if result.ok and len(missing) == len(VARIANTS):
            return result, (
                f"np={n}: {' '.join(cmd)} ran, but pipeprof measured no step of it: {ADD_BOTH} "
                f"(log: {run.log_path(f'np{n}')})"
            )
        per = max((int(r.get("steps_per_record", 1)) for r in runs), default=1)
        if per > 1:
            reporter.message(
                f"np={n}: timed per execution of {per} steps (the script compiles with "
                f"steps_per_execution={per}): each step's time and input wait are its "
                f"execution's ÷ {per}"
            )
        if result.ok and missing:
            reporter.message(
                f"np={n}: the script's training ended before {' and '.join(missing)} was measured: one more "
                f"launch for it (one launch per variant)"
            )
            result = run_script(n, missing, f"np{n}-{'-'.join(missing)}")
        return result, launch_failure(n, result, run)

    outcome = each_worker_count(
        nps,
        launch,
        stream=stream,
        caught=caught,
        run_dir=run_dir,
        after=lambda n: reporter.results(write_summary(run_dir, {"synthetic"}, list(VARIANTS))),
    )
    failure, signum = outcome.failure, outcome.signum
    summary = write_summary(run_dir, {"synthetic"}, list(VARIANTS))
    verdicts: list[Verdict] = []
    refused = outcome.refused
    if ablation and failure is None and not summary.empty:
        cores = max(1, int(cores_per_rank(scenario, max(nps), cores_override)))
        reporter.message(
            f"measuring each transformation of the script's dataset alone, on {cores} core(s)"
        )
        with caught:
            verdicts, failure, refused = ablate(
                cmd, run, base_env, cores, summary, scenario, nps, cores_override
            )
        if caught.signum is not None:
            signum = caught.signum
            failure = f"{signals.Interrupted(signum)} while measuring the transformations (run directory: {run_dir})"
    finish_run(run, failure, signum, reporter, report)
    refused = refused and signum is None
    return CompareResult(run_dir, summary, failure, verdicts, signum=signum, refused=refused)


def ablate(
    cmd: list[str],
    run: RunDir,
    env: dict[str, str],
    cores: int,
    summary: pd.DataFrame,
    scenario: Scenario,
    nps: list[int],
    cores_override: float | None,
) -> tuple[list[Verdict], str | None, bool]:
    """The script once more, alone on ``cores`` cores, measuring its dataset's transformations;
    then the verdict per worker count from those costs and the compare's figures; and whether
    the script refused the ablation as written (``LaunchResult.refused``)."""
    job = ScriptJob(run_dir=str(run.path), np=1, mode="ablate")
    result = runner.run(
        topology.pinned_argv(cmd, cores),
        env=dict(env, **{ENV_SCRIPT_JOB: job.encode()}),
        log_path=run.log_path("ablation"),
        timeout_s=scenario.launch.timeout_s,
    )
    stages = run.script_stages()
    if not result.ok or stages is None:
        return (
            [],
            f"the ablation launch failed: {result.reason()} (log: {run.log_path('ablation')})",
            result.refused,
        )
    rows = [
        {
            "stage": r["transformation"],
            "marginal_core_ms_1": r["marginal_core_ms"],
            "samples_per_s_configured": r["samples_per_s"],
        }
        for _, r in stages.iterrows()
        if not math.isnan(r["marginal_core_ms"])
    ]
    verdicts = verdicts_per_np(rows, summary, scenario, "real", cores_override) if rows else []
    write_verdicts(run, verdicts)
    return verdicts, None, False


def script_scenario(cmd: list[str], overrides: list, base: Scenario | None = None) -> Scenario:
    """The settings a script run takes from pipeprof: measurement (train.*) and launch; the
    script itself owns its data, pipeline and model."""
    from pipeprof.config import apply_overrides
    from pipeprof.scenario import validate

    raw = apply_overrides({"name": script_name(cmd)} if base is None else base.to_dict(), overrides)
    scenario = Scenario.from_dict(
        {k: v for k, v in raw.items() if k != "source_file"}, "command line"
    )
    if base is not None:
        scenario = dataclasses.replace(scenario, source_file=base.source_file)
    validate(scenario)
    return scenario
