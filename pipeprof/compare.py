"""`pipeprof compare` as a library call: one Horovod launch per worker count, every variant
inside it, results summarised after each launch so nothing measured is lost to a later failure.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pipeprof.analysis.stats import summarize
from pipeprof.errors import PipeprofError
from pipeprof.job import Job, VariantSpec
from pipeprof.launch import horovod
from pipeprof.rundir import load_steps, manifest, new_run_dir, write_json
from pipeprof.scenario import Scenario, cache_warning
from pipeprof.telemetry.nvml import Nvml

PROGRESS_TAG = "PIPEPROF-PROGRESS"  # mirrors pipeprof.rank.worker


@dataclass
class CompareResult:
    run_dir: Path
    summary: pd.DataFrame
    failure: str | None = None  # one line, when a launch failed; what ran before it is kept


class Reporter:
    """What the caller sees while compare runs; the CLI renders these, tests can record them."""

    def message(self, text: str) -> None: ...

    def warning(self, text: str) -> None: ...

    def progress(self, event: dict) -> None: ...

    def data_progress(self, done: int, total: int) -> None: ...


def variant_specs(scenario: Scenario) -> list[VariantSpec]:
    """The synthetic twin first (the ceiling), then each real variant with its resolved pipeline."""
    import dataclasses

    specs = [VariantSpec(name="synthetic", synthetic=True,
                         pipeline=dataclasses.asdict(scenario.variant_pipeline(scenario.variants[0])))]
    for v in scenario.variants:
        specs.append(VariantSpec(name=v.name, synthetic=False, pipeline=dataclasses.asdict(scenario.variant_pipeline(v))))
    return specs


def resolve_data_path(scenario: Scenario, path: str) -> Path:
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists() or not scenario.source_file:
        return p.resolve() if p.exists() else p
    return (Path(scenario.source_file).parent / p).resolve()


def prepare_data(scenario: Scenario, reporter: Reporter) -> str:
    """Make sure the data is there (generating the built-in set on first use); return its root."""
    data = scenario.data
    if data.source == "factory":
        return ""
    if data.source == "generated":
        from pipeprof.data import generate

        root = generate.dataset_dir(data.generate, str(resolve_data_path(scenario, data.path)) if data.path else "")
        if not generate.is_complete(root, data.generate):
            reporter.message(f"generating {data.generate.images} {data.generate.format.upper()} images "
                             f"({data.generate.size}px, {data.generate.classes} classes) in {root}")
            generate.generate(data.generate, root, progress=reporter.data_progress)
        return str(root)
    root = resolve_data_path(scenario, data.path)
    if data.source == "folder" and not root.is_dir():
        raise PipeprofError(f"{scenario.source_file or 'scenario'}: data.path '{data.path}' is not a directory")
    return str(root) if data.source == "folder" else (str(root) if root.exists() else data.path)


def _write_summary(run_dir: Path, specs: list[VariantSpec]) -> pd.DataFrame:
    summary = summarize(load_steps(run_dir), {s.name for s in specs if s.synthetic})
    tmp = run_dir / "summary.csv.tmp"
    summary.to_csv(tmp, index=False, float_format="%.4g")
    tmp.replace(run_dir / "summary.csv")
    return summary


def compare(scenario: Scenario, nps: list[int], *, out: str | None = None, argv: list[str] | None = None,
            reporter: Reporter | None = None, nvml: Nvml | None = None) -> CompareResult:
    reporter = reporter or Reporter()
    nvml = nvml or Nvml()
    gpus = nvml.inventory()
    for n in nps:  # refuse before spending anything
        horovod.check_slots(n, scenario.launch, len(gpus))
    for spec_warning in {w for v in scenario.variants if (w := cache_warning(scenario.variant_pipeline(v)))}:
        reporter.warning(spec_warning)
    horovodrun = horovod.find_horovodrun()
    data_root = prepare_data(scenario, reporter)
    run_dir = new_run_dir(out, scenario.name).resolve()
    specs = variant_specs(scenario)
    write_json(run_dir / "manifest.json", manifest(scenario.to_dict(), list(argv or []), gpus, {
        "worker_counts": nps, "variants": [s.name for s in specs], "data_root": data_root,
        "launcher": "horovodrun", "controller": scenario.launch.controller}))
    env = horovod.worker_env(dict(os.environ), str(Path.cwd()))
    summary = pd.DataFrame()
    for n in nps:
        job = Job(run_dir=str(run_dir), np=n, scenario=scenario.to_dict(), data_root=data_root, variants=specs)
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
        summary = _write_summary(run_dir, specs)
        if not result.ok:
            failure = f"np={n}: {result.reason()} (log: {run_dir / 'logs' / f'np{n}.log'})"
            return CompareResult(run_dir, summary, failure)
    return CompareResult(run_dir, summary)

