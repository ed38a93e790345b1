"""`pipeprof compare` as a library call: one Horovod launch per worker count, every variant
inside it, results summarised after each launch so nothing measured is lost to a later failure.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from pipeprof.errors import PipeprofError
from pipeprof.events import Plan
from pipeprof.launch import launcher as launchers
from pipeprof.launch import runner, signals, topology
from pipeprof.launch.job import Job, VariantSpec
from pipeprof.launch.service_processes import port_in_use
from pipeprof.rundir import FAILED, FINISHED, INTERRUPTED, RUNNING, RunDir, manifest
from pipeprof.scenario import Scenario, cache_warning, emulated_ms
from pipeprof.telemetry.nvml import Nvml
from pipeprof.workflows import service_around_launch
from pipeprof.workflows.data import prepare_data
from pipeprof.workflows.events import Reporter
from pipeprof.workflows.live import RecordStream, progress_lines
from pipeprof.workflows.orchestrate import each_worker_count
from pipeprof.workflows.plan import check_memory, launch_endpoint, launch_event, variant_specs
from pipeprof.workflows.summary import bad_files_warning, device_label, write_summary


@dataclass
class CompareResult:
    run_dir: Path
    summary: pd.DataFrame
    failure: str | None = None  # one line, when a launch failed; what ran before it is kept
    verdicts: list = field(
        default_factory=list
    )  # analysis.verdict.Verdict per np, with --ablation or --verdict
    signum: int | None = None  # the stop signal (SIGINT, SIGTERM, SIGHUP) that ended it early


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


# multi_worker_mirrored's workers listen from this port up, one port per local rank; a launch
# moves on by the hosts' most ranks, so back-to-back launches never ask for a port just freed
TF_WORKER_PORT = 23456


def tf_workers(scenario: Scenario, np: int) -> list[str]:
    """Each rank's host:port for train.engine multi_worker_mirrored (TF_CONFIG's cluster, in
    rank order, as the launch places the ranks); empty for the other engines."""
    if scenario.train.engine != "multi_worker_mirrored":
        return []
    placed = topology.assign(np, scenario.launch)
    base = TF_WORKER_PORT + 64 * (np % 16)
    return [f"{s.host}:{base + s.local_rank}" for s in placed.slots]


def compare(
    request: CompareRequest, *, reporter: Reporter | None = None, nvml: Nvml | None = None
) -> CompareResult:
    """One compare: a launch per worker count (``workflows.orchestrate``), every variant inside
    it, the results summarised after each. ``request.verdict``: measure the stages alone after
    the run and give the verdict per np (as ``ablation`` does, without its rungs);
    ``request.remedies``: "auto" (the remedies for the stage that costs most per sample,
    measured alone before the launch) or "all" (every remedy that applies). A request with a
    ``script`` runs the user's command instead (``workflows.script``)."""
    if request.script:
        from pipeprof.workflows.script import compare_script

        return compare_script(request, reporter=reporter)
    r = request
    scenario, nps, out, argv, stream_host, ablation = (
        r.scenario,
        r.nps,
        r.out,
        r.argv,
        r.stream_host,
        r.ablation,
    )
    verdict, remedies, report, cores_per_rank = r.verdict, r.remedies, r.report, r.cores_per_rank
    ram_budget_bytes = r.ram_budget_bytes
    only_variants, synthetic, real = r.only_variants, r.synthetic, r.real
    reporter = reporter or Reporter()
    nvml = nvml or Nvml()
    gpus = nvml.inventory()
    # auto resolved (the CLI has said how, on its first line)
    scenario = dataclasses.replace(
        scenario, launch=launchers.choose(scenario.launch, engine=scenario.train.engine)[0]
    )
    launcher = launchers.get(scenario.launch.launcher)
    for n in nps:  # refuse before spending anything
        launcher.check(n, scenario.launch, len(gpus), scenario.train.engine)
    specs = variant_specs(scenario, only_variants, synthetic, ablation, real)
    for spec_warning in {
        w for v in scenario.variants if (w := cache_warning(scenario.variant_pipeline(v)))
    }:
        reporter.warning(spec_warning)
    data_root = prepare_data(scenario, reporter)
    check_memory(scenario, specs, data_root, nps, ram_budget_bytes)
    run = RunDir.create(out, scenario.name)
    run_dir = run.path
    stage_rows = None
    if remedies is not None:
        stage_rows, remedy_specs = plan_remedies(
            scenario, remedies, data_root, nps, run_dir, reporter, cores_per_rank, ram_budget_bytes
        )
        specs += remedy_specs
    run.write_manifest(
        manifest(
            scenario.to_dict(),
            list(argv or []),
            gpus,
            {
                "worker_counts": nps,
                "variants": [s.name for s in specs],
                "data_root": data_root,
                "launcher": launcher.name,
                "controller": scenario.launch.controller,
                "device": device_label(scenario.train.device),
            },
        )
    )
    run.write_status(RUNNING)
    reporter.progress(Plan(worker_counts=list(nps), variants=[s.name for s in specs]))
    # every host's ranks must reach the rendezvous in time: size it for the busiest host
    local = max(topology.assign(n, scenario.launch).ranks_per_host for n in nps)
    env = launcher.env(
        dict(os.environ),
        str(Path.cwd()),
        emulated=emulated_ms(scenario.train.device) is not None,
        local_ranks=local,
    )
    synthetic_names = {s.name for s in specs if s.synthetic}
    order = [s.name for s in specs]
    reference = scenario.variants[0].name if ablation else None
    summarise = functools.partial(
        write_summary,
        run_dir,
        synthetic_names,
        order,
        reference,
        scenario.train.device,
        remedy_reference=scenario.variants[0].name if remedies else None,
        gpus=len(gpus),
    )
    caught = signals.Catch()  # a stop signal between launches ends them; what was measured is kept
    endpoint = launch_endpoint(scenario.launch, stream_host)
    stream = RecordStream(run_dir, reporter, endpoint=endpoint)
    service_host = endpoint[1]  # where ranks reach a tf.data service

    def launch(n: int) -> tuple[runner.LaunchResult | None, str | None]:
        try:
            with service_around_launch.around_launch(
                specs, scenario.service, run_dir, n, service_host
            ) as launch_specs:
                job = Job(
                    run_dir=str(run_dir),
                    np=n,
                    scenario=scenario.to_dict(),
                    data_root=data_root,
                    variants=launch_specs,
                    stream=stream.address if scenario.telemetry.enabled else "",
                    stream_token=stream.token,
                    tf_workers=tf_workers(scenario, n),
                )
                rank_cmd = [sys.executable, "-m", "pipeprof.rank", job.encode()]
                reporter.progress(launch_event(n, len(specs), launcher.name, scenario.launch))
                stream.begin_launch()
                result = runner.run(
                    launcher.ranks_argv(n, scenario.launch, rank_cmd),
                    env=env,
                    log_path=run.log_path(f"np{n}"),
                    program=launcher.name,
                    rank_exit=launcher.rank_exit,
                    hosts=topology.assign(n, scenario.launch).hosts_of_ranks,
                    timeout_s=scenario.launch.timeout_s,
                    on_line=progress_lines(reporter),
                )
        except PipeprofError as exc:  # it could not start (e.g. its tf.data service): nothing ran
            return None, f"np={n}: {exc.message}"
        service_around_launch.collect_bad_files(run_dir, n, scenario.data)
        result.silent = stream.silent(scenario.telemetry.host_interval_ms / 1e3)
        return result, launch_failure(n, result, run)

    outcome = each_worker_count(
        nps,
        launch,
        stream=stream,
        caught=caught,
        run_dir=run_dir,
        after=lambda n: reporter.results(summarise()),
    )
    failure, signum = outcome.failure, outcome.signum
    summary = summarise()
    if (skipped := bad_files_warning(run_dir)) is not None:
        reporter.warning(skipped)
    verdicts = []
    if (ablation or verdict or stage_rows is not None) and failure is None and not summary.empty:
        from pipeprof.workflows.diagnose import (
            diagnose,  # TensorFlow's stage benchmark: only when asked
        )

        if stage_rows is None:
            reporter.message("measuring each stage alone (pipeline only, no model) for the verdict")
        with caught:
            verdicts = diagnose(
                scenario,
                data_root,
                summary,
                run_dir,
                cores_override=cores_per_rank,
                rows=stage_rows,
            )
        if caught.signum is not None:
            signum = caught.signum
            failure = f"{signals.Interrupted(signum)} while measuring the stages (run directory: {run_dir})"
    finish_run(run, failure, signum, reporter, report)
    return CompareResult(run_dir, summary, failure, verdicts, signum=signum)


def plan_remedies(
    scenario: Scenario,
    which: str,
    data_root: str,
    nps: list[int],
    run_dir: Path,
    reporter: Reporter,
    cores_per_rank: float | None,
    ram_budget_bytes: int | None,
) -> tuple[list[dict] | None, list[VariantSpec]]:
    """The remedy variants to run after the real ones, and the stage costs when they were
    measured to choose them. A remedy that does not apply, or whose cache would not fit the RAM
    budget, is skipped with its reason."""
    from pipeprof.analysis import remedies
    from pipeprof.analysis.verdict import bounding_stage

    rows, stages = None, None
    if which == "auto":
        from pipeprof.workflows.diagnose import measure_stages  # TensorFlow's stage benchmark

        reporter.message(
            "measuring each stage alone (pipeline only, no model) to choose the remedies"
        )
        rows = measure_stages(scenario, data_root, nps, run_dir, cores_override=cores_per_rank)
        stages = [bounding_stage(rows)]
        reporter.message(f"remedies for the {stages[0]} stage, the costliest per sample")
    specs = []
    for planned in remedies.plan(
        scenario.variant_pipeline(scenario.variants[0]),
        stages,
        scenario.data.on_bad_file,
        service_hosts=bool(scenario.service.hosts),
        data=stored_data(scenario, data_root),
    ):
        skipped = planned.skipped
        if (
            planned.pipeline is not None
            and planned.pipeline.service.enabled
            and scenario.service.port
            and port_in_use(scenario.service.port)
        ):
            skipped = f"the tf.data service's port {scenario.service.port} is in use (service.port)"
        elif planned.pipeline is not None:
            spec = VariantSpec(
                name=planned.variant, synthetic=False, pipeline=dataclasses.asdict(planned.pipeline)
            )
            try:
                check_memory(scenario, [spec], data_root, nps, ram_budget_bytes)
                specs.append(spec)
            except PipeprofError as exc:
                skipped = exc.message
        if skipped:
            reporter.warning(f"remedy {planned.remedy.name} skipped: {skipped}")
    if not specs:
        reporter.warning(
            "no remedy applies to this scenario" + (f"'s {stages[0]} stage" if stages else "")
        )
    return rows, specs


def stored_data(scenario: Scenario, data_root: str):
    """What the remedies need to know of the stored images (read from a folder's first files)."""
    from pipeprof.analysis.remedies import Data
    from pipeprof.data.files import stored_side

    d = scenario.data
    if d.source == "generated":
        return Data(d.generate.format, d.generate.size, d.image_size)
    if d.source == "folder" and (found := stored_side(data_root)) is not None:
        return Data(found[0], found[1], d.image_size)
    return Data(image_size=d.image_size)


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
