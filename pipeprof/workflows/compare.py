"""`pipeprof compare` as a library call: one launch of pipeprof's own ranks per worker count,
every variant inside it, results summarised after each launch so nothing measured is lost to
a later failure (``workflows.orchestrate``: what this shares with a user's script's compare).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from pathlib import Path

from pipeprof import plugins
from pipeprof.distributions import rendezvous_of
from pipeprof.errors import PipeprofError
from pipeprof.launch import runner, signals, topology
from pipeprof.launch.job import Job, VariantSpec
from pipeprof.launch.service_processes import port_in_use
from pipeprof.reporting import Reporter
from pipeprof.rundir import RunDir
from pipeprof.scenario import Scenario, cache_warning, emulated_ms
from pipeprof.telemetry.nvml import Nvml
from pipeprof.workflows import service_around_launch
from pipeprof.workflows.data import prepare_data
from pipeprof.workflows.live import progress_lines
from pipeprof.workflows.orchestrate import (  # noqa: F401  (CompareResult, finish_run: the API)
    CompareRequest,
    CompareResult,
    each_worker_count,
    finish_run,
    launch_failure,
    open_run,
    settle,
)
from pipeprof.workflows.plan import check_memory, launch_endpoint, launch_event, variant_specs
from pipeprof.workflows.summary import bad_files_warning, device_label, write_summary


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
    scenario, nps, ablation, remedies = r.scenario, r.nps, r.ablation, r.remedies
    reporter = reporter or Reporter()
    settled = settle(scenario, nps, nvml)  # refuse before spending anything
    scenario, launcher = settled.scenario, settled.launcher
    specs = variant_specs(scenario, r.only_variants, r.synthetic, ablation, r.real)
    for spec_warning in {
        w for v in scenario.variants if (w := cache_warning(scenario.variant_pipeline(v)))
    }:
        reporter.warning(spec_warning)
    data_root = prepare_data(scenario, reporter)
    check_memory(scenario, specs, data_root, nps, r.ram_budget_bytes)
    run = RunDir.create(r.out, scenario.name)
    run_dir = run.path
    stage_rows = None
    if remedies is not None:
        stage_rows, remedy_specs = plan_remedies(
            scenario,
            remedies,
            data_root,
            nps,
            run_dir,
            reporter,
            r.cores_per_rank,
            r.ram_budget_bytes,
        )
        specs += remedy_specs
    opened = open_run(
        settled,
        r,
        reporter,
        run,
        [s.name for s in specs],
        {"data_root": data_root, "device": device_label(scenario.train.device)},
        emulated=emulated_ms(scenario.train.device) is not None,
    )
    env, stream, caught = opened.env, opened.stream, opened.caught
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
        gpus=len(settled.gpus),
    )
    service_host = launch_endpoint(scenario.launch, r.stream_host)[1]  # where ranks reach a service
    registered = plugins.added()  # the points a rank in another process must register too

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
                    rendezvous=rendezvous_of(
                        scenario.train.engine, n, scenario.launch, str(run_dir)
                    ),
                    plugins=registered,
                )
                rank_cmd = [sys.executable, "-m", "pipeprof.rank", job.encode()]
                reporter.progress(launch_event(n, len(specs), launcher.name, scenario.launch))
                stream.begin_launch()
                started, placed = settled.placed(n)  # the processes: one a replica, or a host
                result = runner.run(
                    launcher.ranks_argv(started, placed, rank_cmd),
                    env=env,
                    log_path=run.log_path(f"np{n}"),
                    program=launcher.name,
                    rank_exit=launcher.rank_exit,
                    hosts=topology.assign(started, placed).hosts_of_ranks,
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
    if (ablation or r.verdict or stage_rows is not None) and failure is None and not summary.empty:
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
                cores_override=r.cores_per_rank,
                rows=stage_rows,
            )
        if caught.signum is not None:
            signum = caught.signum
            failure = f"{signals.Interrupted(signum)} while measuring the stages (run directory: {run_dir})"
    finish_run(run, failure, signum, reporter, r.report)
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
    base = scenario.variant_pipeline(scenario.variants[0])
    loader = None
    if plugins.capability(plugins.INPUTS, scenario.data.library, "loader_knobs", False):
        from pipeprof.inputs.dataloader import worker_count
        from pipeprof.workflows.diagnose import cores_per_rank as rank_cores

        widest = max(nps)  # where a rank has the fewest cores
        cores = max(1, int(rank_cores(scenario, widest, cores_per_rank)))
        loader = remedies.Loader(worker_count(base, 1, cores), cores)
    for planned in remedies.plan(
        base,
        stages,
        scenario.data.on_bad_file,
        service_hosts=bool(scenario.service.hosts),
        data=stored_data(scenario, data_root),
        loader=loader,
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
