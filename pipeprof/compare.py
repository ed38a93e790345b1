"""`pipeprof compare` as a library call: one Horovod launch per worker count, every variant
inside it, results summarised after each launch so nothing measured is lost to a later failure.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from pipeprof.analysis.stats import summarize
from pipeprof.errors import PipeprofError
from pipeprof.job import PROGRESS_TAG, Job, VariantSpec
from pipeprof.launch import horovod, signals, topology
from pipeprof.rundir import load_steps, load_variant_runs, manifest, new_run_dir, write_json
from pipeprof.analysis.telemetry import add_telemetry
from pipeprof.rundir import load_telemetry
from pipeprof.scenario import LaunchConfig, Scenario, cache_warning
from pipeprof.telemetry.nvml import Nvml
from pipeprof.telemetry.recorder import Recorder
from pipeprof.telemetry.stream import Collector



@dataclass
class CompareResult:
    run_dir: Path
    summary: pd.DataFrame
    failure: str | None = None  # one line, when a launch failed; what ran before it is kept
    verdicts: list = field(default_factory=list)  # analysis.verdict.Verdict per np, with --ablation
    signum: int | None = None  # the stop signal (SIGINT, SIGTERM, SIGHUP) that ended it early


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


def variant_specs(scenario: Scenario, only: list[str] | None = None, synthetic: bool = True,
                  ablation: bool = False, real: bool = True) -> list[VariantSpec]:
    """The synthetic twin first (the ceiling), then the ablation ladder if asked, then each real
    variant with its resolved pipeline (none when ``real`` is false)."""
    import dataclasses

    from pipeprof.analysis.ablation import LADDER, RUNG_TIME_SHARE, ladder_pipelines

    known = [v.name for v in scenario.variants]
    if ablation and (clash := set(known) & set(LADDER)):
        raise PipeprofError(f"--ablation: the scenario has variants named like ladder rungs: {sorted(clash)}")
    for name in only or []:
        if name not in known:
            raise PipeprofError(f"--variant {name}: the scenario has no such variant (it has: {', '.join(known)})")
    chosen = [v for v in scenario.variants if not only or v.name in only]
    train = scenario.train
    short_s = max(train.min_measure_s, RUNG_TIME_SHARE * train.max_measure_s)
    # Real variants re-measure the twin in alternation with themselves, so their gaps do not
    # rest on the twin's own run; it then only gives the ceiling's row and may be shorter.
    specs = [VariantSpec(name="synthetic", synthetic=True, pipeline=dataclasses.asdict(scenario.variant_pipeline(
        chosen[0])), max_measure_s=short_s if real or ablation else 0.0)] if synthetic else []
    if ablation:
        specs += [VariantSpec(name=name, synthetic=False, pipeline=dataclasses.asdict(p), max_measure_s=short_s)
                  for name, p in ladder_pipelines(scenario.variant_pipeline(scenario.variants[0]))]
    for v in chosen if real else []:
        specs.append(VariantSpec(name=v.name, synthetic=False, pipeline=dataclasses.asdict(scenario.variant_pipeline(v))))
    return specs


def check_memory(scenario: Scenario, specs: list[VariantSpec], data_root: str, nps: list[int],
                 budget_bytes: int | None) -> None:
    """Refuse cache/shuffle settings that cannot fit in RAM, before anything runs."""
    from pipeprof.analysis.memory import check, default_ram_budget_bytes
    from pipeprof.scenario import PipelineConfig, _build

    if scenario.data.source not in ("folder", "generated") or not data_root:
        return
    from pipeprof.data.files import count_images

    images = count_images(data_root)
    for n in nps:
        budget = budget_bytes or default_ram_budget_bytes(topology.assign(n, scenario.launch).ranks_per_host)
        for spec in specs:
            if not spec.synthetic:
                pipe = _build(PipelineConfig, spec.pipeline, "job", spec.name)
                check(pipe, scenario.data.image_size, -(-images // n), budget,
                      f"{scenario.source_file or 'scenario'}: variant '{spec.name}' at np={n}")


def stream_endpoint(launch: LaunchConfig, stream_host: str | None) -> tuple[str, str]:
    """Where the collector listens, and the address ranks are told: loopback for a local run;
    all interfaces and this host's name when ranks run on other hosts."""
    if stream_host:
        return "0.0.0.0", stream_host
    if launch.hosts or launch.hostfile:
        return "0.0.0.0", socket.gethostname()
    return "127.0.0.1", "127.0.0.1"


def resolve_data_path(scenario: Scenario, path: str) -> Path:
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists() or not scenario.source_file:
        return p.resolve() if p.exists() else p
    return (Path(scenario.source_file).parent / p).resolve()


def claim_file_caches(scenario: Scenario) -> None:
    """A file cache at a user's prefix must be pipeprof's to write (data.filecache), or is refused now."""
    from pipeprof.data import filecache

    pipes = [scenario.pipeline] + [scenario.variant_pipeline(v) for v in scenario.variants]
    for prefix in dict.fromkeys(filecache.user_prefix(p) for p in pipes):
        if prefix:
            filecache.claim(prefix, scenario.source_file or "scenario")


def prepare_data(scenario: Scenario, reporter: Reporter) -> str:
    """Make sure the data is there (generating the built-in set on first use); return its root.
    Paths pipeprof will write outside its run directory are checked first (never a user's files)."""
    claim_file_caches(scenario)
    data = scenario.data
    if data.source == "factory":
        return ""
    if data.source == "generated":
        from pipeprof.data import generate

        root = generate.dataset_dir(data.generate, str(resolve_data_path(scenario, data.path)) if data.path else "")
        if not generate.is_complete(root, data.generate):
            where = f"{scenario.source_file or 'scenario'}: data.path" if data.path else ""
            generate.check_target(root, data.generate, where)  # a user's folder is refused before any output
            reporter.message(f"generating {data.generate.images} {data.generate.format.upper()} images "
                             f"({data.generate.size}px, {data.generate.classes} classes) in {root}")
            generate.generate(data.generate, root, progress=reporter.data_progress, where=where)
        return str(root)
    root = resolve_data_path(scenario, data.path)
    if data.source == "folder" and not root.is_dir():
        raise PipeprofError(f"{scenario.source_file or 'scenario'}: data.path '{data.path}' is not a directory")
    return str(root) if data.source == "folder" else (str(root) if root.exists() else data.path)


def device_label(device: str) -> str:
    """What summary.csv's ``device`` column says: ``real``, or ``emulated:40ms`` for emulated runs."""
    from pipeprof.scenario import emulated_ms

    ms = emulated_ms(device)
    return "real" if ms is None else f"emulated:{ms:g}ms"


def write_summary(run_dir: Path, synthetic_variants: set[str], order: list[str] | None = None,
                  reference: str | None = None, device: str = "auto") -> pd.DataFrame:
    from pipeprof.analysis.ablation import add_stage_costs

    steps = load_steps(run_dir, paired=True)  # the twin's alternating steps carry the paired gaps
    tel = load_telemetry(run_dir)
    stops = {(int(r["np"]), r["variant"]): r.get("stop_reason", "") for r in load_variant_runs(run_dir)}
    summary = add_telemetry(summarize(steps, synthetic_variants, order, stops), steps[steps["paired"] == ""],
                            tel["gpu"], tel["host"], tel["proc"])
    if reference is not None:
        summary = add_stage_costs(summary, reference)
    summary = with_bad_files(summary, run_dir)
    summary.insert(2, "device", device_label(device))
    tmp = run_dir / "summary.csv.tmp"
    summary.to_csv(tmp, index=False, float_format="%.4g")
    tmp.replace(run_dir / "summary.csv")
    return summary


def with_bad_files(summary: pd.DataFrame, run_dir: Path) -> pd.DataFrame:
    """The ranks' bad-file logs merged into ``bad_files.csv``, and counted in ``summary``."""
    from pipeprof.analysis.badfiles import add_bad_files
    from pipeprof.data import badfiles
    from pipeprof.rundir import write_csv

    bad = badfiles.load(run_dir)
    if not bad.empty:
        write_csv(run_dir / "bad_files.csv", bad, float_format=None)
    return add_bad_files(summary, bad)


def bad_files_warning(run_dir: Path) -> str | None:
    from pipeprof.analysis.badfiles import bad_files_warning as warning
    from pipeprof.data import badfiles

    return warning(badfiles.load(run_dir), str(run_dir / "bad_files.csv"))


def compare(scenario: Scenario, nps: list[int], *, out: str | None = None, argv: list[str] | None = None,
            reporter: Reporter | None = None, nvml: Nvml | None = None, only_variants: list[str] | None = None,
            synthetic: bool = True, stream_host: str | None = None, ablation: bool = False,
            cores_per_rank: float | None = None, ram_budget_bytes: int | None = None, real: bool = True) -> CompareResult:
    reporter = reporter or Reporter()
    nvml = nvml or Nvml()
    gpus = nvml.inventory()
    for n in nps:  # refuse before spending anything
        horovod.check_slots(n, scenario.launch, len(gpus))
    specs = variant_specs(scenario, only_variants, synthetic, ablation, real)
    for spec_warning in {w for v in scenario.variants if (w := cache_warning(scenario.variant_pipeline(v)))}:
        reporter.warning(spec_warning)
    horovodrun = horovod.find_horovodrun()
    data_root = prepare_data(scenario, reporter)
    check_memory(scenario, specs, data_root, nps, ram_budget_bytes)
    run_dir = new_run_dir(out, scenario.name).resolve()
    write_json(run_dir / "manifest.json", manifest(scenario.to_dict(), list(argv or []), gpus, {
        "worker_counts": nps, "variants": [s.name for s in specs], "data_root": data_root,
        "launcher": "horovodrun", "controller": scenario.launch.controller,
        "device": device_label(scenario.train.device)}))
    from pipeprof.scenario import emulated_ms

    # every host's ranks must reach the rendezvous in time: size it for the busiest host
    local = max(topology.assign(n, scenario.launch).ranks_per_host for n in nps)
    env = horovod.worker_env(dict(os.environ), str(Path.cwd()), emulated=emulated_ms(scenario.train.device) is not None,
                             local_ranks=local)
    recorder = Recorder(run_dir)

    def on_record(record: dict) -> None:
        recorder.write(record)
        reporter.record(record)

    synthetic_names = {s.name for s in specs if s.synthetic}
    order = [s.name for s in specs]
    reference = scenario.variants[0].name if ablation else None
    bind, advertise = stream_endpoint(scenario.launch, stream_host)
    token = secrets.token_hex(8)
    summary = pd.DataFrame()
    failure = None
    signum = None
    caught = signals.Catch()  # a stop signal between launches ends them; what was measured is kept
    with caught, Collector(on_record, bind=bind, advertise=advertise, token=token,
                           on_malformed=recorder.malformed) as collector:
        for n in nps:
            job = Job(run_dir=str(run_dir), np=n, scenario=scenario.to_dict(), data_root=data_root, variants=specs,
                      stream=collector.address if scenario.telemetry.enabled else "", stream_token=token)
            argv_n = horovod.horovodrun_argv(n, scenario.launch, [sys.executable, "-m", "pipeprof.rank", job.encode()],
                                             horovodrun=horovodrun)
            reporter.progress({"event": "launch", "np": n, "of_variants": len(specs)})

            def on_line(line: str) -> None:
                if PROGRESS_TAG in line:
                    try:
                        reporter.progress(json.loads(line.split(PROGRESS_TAG, 1)[1]))
                    except ValueError:
                        pass  # a progress line cut by another rank's output: the next one will do

            result = horovod.run(argv_n, env=env, log_path=run_dir / "logs" / f"np{n}.log",
                                 timeout_s=scenario.launch.timeout_s, on_line=on_line)
            recorder.ingest_fallback_files()
            recorder.flush()
            summary = write_summary(run_dir, synthetic_names, order, reference, scenario.train.device)
            reporter.results(summary)
            if not result.ok:
                failure = f"np={n}: {result.reason()} (log: {run_dir / 'logs' / f'np{n}.log'})"
                signum = result.signum
                break
    if caught.signum is not None:
        signum = caught.signum
        failure = failure or f"{signals.Interrupted(signum)} (run directory: {run_dir})"
    if recorder.malformed_count:
        reporter.warning(f"{recorder.malformed_count} malformed stream record(s) dropped; the first is in "
                         f"{recorder.malformed_path}")
    recorder.close()
    summary = write_summary(run_dir, synthetic_names, order, reference, scenario.train.device)
    if (skipped := bad_files_warning(run_dir)) is not None:
        reporter.warning(skipped)
    verdicts = []
    if ablation and failure is None and not summary.empty:
        from pipeprof.diagnose import diagnose

        reporter.message("measuring each stage alone (pipeline only, no model) for the verdict")
        with caught:
            verdicts = diagnose(scenario, data_root, summary, run_dir, cores_override=cores_per_rank)
        if caught.signum is not None:
            signum = caught.signum
            failure = f"{signals.Interrupted(signum)} while measuring the stages (run directory: {run_dir})"
    return CompareResult(run_dir, summary, failure, verdicts, signum=signum)
