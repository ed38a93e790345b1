"""`pipeprof tune` as a library call: search the pipeline knobs on the cores one rank has.

Every trial is a pipeline-only measurement in a worker pinned to ``cores`` CPUs (affinity set
before TensorFlow starts, so tf.data's pools cannot use more). Points whose cache or shuffle
buffer would not fit the RAM budget are refused with the arithmetic, never measured.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from pipeprof import plugins
from pipeprof.analysis.memory import check, default_ram_budget_bytes
from pipeprof.data.files import count_images
from pipeprof.data.stagebench import StageBench
from pipeprof.errors import PipeprofError
from pipeprof.inputs.dataloader import worker_count
from pipeprof.inputs.grain import worker_count as grain_workers
from pipeprof.launch import signals
from pipeprof.reporting import Reporter
from pipeprof.rundir import RUNNING, RunDir, manifest
from pipeprof.scenario import PipelineConfig, Scenario, VariantConfig
from pipeprof.telemetry.nvml import Nvml
from pipeprof.tune import space as sp
from pipeprof.tune.search import Evaluate, SearchResult, Trial, Window, coordinate_descent
from pipeprof.workflows.compare import CompareRequest, CompareResult, compare, finish_run
from pipeprof.workflows.data import prepare_data


@dataclass
class TuneResult:
    run_dir: Path
    search: SearchResult
    scenario_default: dict
    autotune: dict
    winner: PipelineConfig
    refused: list[str] = field(default_factory=list)
    confirm: CompareResult | None = None
    code_file: str = "tfdata.py.txt"  # the winner as the library's own code, in the run directory


def _trials_frame(trials: list[Trial]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                **t.point,
                "samples_per_s": t.samples_per_s,
                "half_pct": t.half_pct,
                "cpu_cores_used": t.cpu_cores_used,
                "seconds": t.seconds,
                "stop": t.stop,
                "phase": t.phase,
                "error": t.error,
            }
            for t in trials
        ]
    )


def bench_evaluate(bench: StageBench, base: PipelineConfig) -> Evaluate:
    """The search's trials as measurements in the pinned worker: a point applied to ``base``."""

    def evaluate(point: sp.Point, window: Window) -> dict:
        adaptive = window.min_s < window.max_s
        return bench.run(
            sp.apply(base, point),
            window.max_s,
            min_seconds=window.min_s if adaptive else None,
            target_pct=window.target_pct,
            beat=window.beat,
        )

    return evaluate


def tune(
    scenario: Scenario,
    *,
    cores: int,
    budget_s: float,
    trial_s: float = 1.5,
    ram_budget_bytes: int | None = None,
    ranks: int = 1,
    out: str | None = None,
    argv: list[str] | None = None,
    reporter: Reporter | None = None,
    on_trial: Callable[[Trial, float], None] | None = None,
    confirm_steps: int = 0,
    report: bool = True,
    max_trials: int = 0,
) -> TuneResult:
    """``budget_s``, and ``max_trials`` when set: the search ends at whichever comes first; the
    run-off and the measurements of the scenario's default and of autotune follow it."""
    reporter = reporter or Reporter()
    # the input library the run would build (data.library "auto": the engine's), whose knobs
    # the search turns: tf.data's, or a DataLoader's
    if scenario.data.library == plugins.AUTO:
        scenario = dataclasses.replace(scenario, data=plugins.resolve(scenario).data)
    library = scenario.data.library
    loader = bool(plugins.capability(plugins.INPUTS, library, "loader_knobs"))
    grain = bool(plugins.capability(plugins.INPUTS, library, "grain_knobs"))
    data_root = prepare_data(scenario, reporter)
    base = scenario.variant_pipeline(scenario.variants[0])
    run = RunDir.create(out, f"{scenario.name}-tune")
    run_dir = run.path
    run.write_manifest(
        manifest(
            scenario.to_dict(),
            list(argv or []),
            [],
            {
                "command": "tune",
                "cores_per_rank": cores,
                "budget_s": budget_s,
                "data_root": data_root,
            },
        )
    )
    run.write_status(RUNNING)
    if loader:
        space = sp.loader_space(cores, gpu=Nvml().device_count() > 0)
    elif grain:
        space = sp.grain_space(cores)
    else:
        space = sp.default_space(cores, shuffle=base.shuffle.enabled)
    code_name = plugins.capability(plugins.INPUTS, library, "code_name", "tfdata.py.txt")
    budget = ram_budget_bytes or default_ram_budget_bytes(1)
    images = -(-count_images(data_root) // ranks) if data_root else 0
    refused: dict[str, str] = {}

    def allowed(point: sp.Point) -> bool:
        pipe = sp.apply(base, point)
        try:
            check(
                pipe,
                scenario.data.image_size,
                images,
                budget,
                "tune",
                worker_count(pipe, 1, cores)
                if loader
                else grain_workers(pipe, 1, cores)
                if grain
                else None,
            )
            return True
        except PipeprofError as exc:
            # what sizes the RAM
            held = (
                ("num_workers",) if loader else ("worker_count",) if grain else ("shuffle_buffer",)
            )
            refused.setdefault(
                " ".join(f"{k}={point.get(k)}" for k in ("cache", *held)), exc.message
            )
            return False

    start = sp.point_of(base, space)
    if not allowed(start):  # the scenario's own settings do not fit: start without its memory cache
        start = {**start, "cache": "off"}
    batch = scenario.train.batch_size
    done: list[Trial] = []
    caught = signals.Catch()  # a stop signal ends the search; the trials measured are kept
    with (
        caught,
        StageBench(
            scenario.data,
            data_root,
            batch,
            cores=cores,
            seconds=trial_s,
            cache_dir=str(run_dir / "cache"),
            log_path=run.log_path("stagebench"),
        ) as bench,
    ):
        started = time.monotonic()
        evaluate = bench_evaluate(bench, base)

        def trial_done(t: Trial) -> None:
            done.append(t)
            if on_trial is not None:
                on_trial(t, time.monotonic() - started)

        search = coordinate_descent(
            space,
            start,
            evaluate,
            budget_s=budget_s,
            trial_s=trial_s,
            allowed=allowed,
            on_trial=trial_done,
            max_trials=max_trials,
        )
        default_res = evaluate(start, Window(2 * trial_s, 2 * trial_s))
        auto_point = sp.defaults_point(base, space)
        auto_res = {
            "point": auto_point,
            "label": sp.defaults_label(space),
            **evaluate(auto_point, Window(2 * trial_s, 2 * trial_s)),
        }
    if caught.signum is not None:
        run.write_tune(_trials_frame(done))
        finish_run(run, f"{signals.Interrupted(caught.signum)}", caught.signum, reporter, report)
        raise PipeprofError(
            f"tune: {signals.Interrupted(caught.signum)} after {len(done)} trial(s); they are in "
            f"{run_dir / 'trials.csv'}",
            exit_code=signals.exit_code(caught.signum),
        )
    assert search.best is not None
    winner = sp.apply(base, search.best.point)

    run.write_tune(
        _trials_frame(search.trials),
        {
            "cores_per_rank": cores,
            "budget_s": budget_s,
            "trials": len(search.trials),
            "stopped_by_budget": search.stopped_by_budget,
            "winner": search.best.point,
            "noise_pct": search.noise_pct,
            "margin_pct": search.margin_pct,
            "winner_samples_per_s": search.best.samples_per_s,
            "winner_half_pct": search.best.half_pct,
            "winner_cpu_cores_used": search.best.cpu_cores_used,
            "scenario_default": {"point": start, **default_res},
            "autotune": auto_res,
            "refused": list(refused.values()),
        },
        winner_toml=sp.fragment_toml(winner, loader=loader, grain=grain),
        code=(
            sp.dataloader_code(winner, cores)
            if loader
            else sp.grain_code(winner, cores)
            if grain
            else sp.tfdata_code(winner)
        )
        + "\n",
        code_name=code_name,
    )

    confirm = None
    if confirm_steps:
        reporter.message(
            f"confirming with a short training run (np=1, {confirm_steps} steps per variant)"
        )
        tuned_overrides = json.loads(json.dumps(dataclasses.asdict(winner)))
        warmup = max(5, scenario.train.warmup_steps)
        if (
            winner.cache.enabled or base.cache.enabled
        ):  # measure the cache's steady state, not its filling
            warmup = max(warmup, -(-images // batch) + 5)
        confirm_scenario = dataclasses.replace(
            scenario,
            variants=[
                VariantConfig(name="scenario", pipeline={}),
                VariantConfig(name="tuned", pipeline=tuned_overrides),
            ],
            train=dataclasses.replace(
                scenario.train, measure_steps=confirm_steps, warmup_steps=warmup
            ),
            launch=dataclasses.replace(scenario.launch, np=[1]),
        )
        confirm = compare(
            CompareRequest(
                confirm_scenario,
                [1],
                out=str(run_dir / "confirm"),
                argv=list(argv or []),
                report=report,
            ),
            reporter=reporter,
        )
    finish_run(run, None, None, reporter, report)
    return TuneResult(
        run_dir,
        search,
        {"point": start, **default_res},
        auto_res,
        winner,
        list(refused.values()),
        confirm,
        code_name,
    )


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``5m``, ``1h`` → seconds."""
    t = text.strip().lower()
    mult = {"s": 1, "m": 60, "h": 3600}.get(t[-1:], None)
    try:
        value = float(t[:-1]) * mult if mult else float(t)
    except ValueError:
        raise PipeprofError(
            f"--budget {text!r}: expected a duration such as 90s, 5m or 1h"
        ) from None
    if value <= 0:
        raise PipeprofError(f"--budget {text!r}: must be positive")
    return value
