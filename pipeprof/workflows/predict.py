"""`pipeprof predict` as a library call: read a run directory into the predictor's inputs.

Everything comes from what the run measured at np=1: the synthetic step (device time), the
training loop's own CPU per step (process telemetry over the synthetic steps), each stage's
CPU cost (``stages.csv``, measured now if the run has none), the step-time spread of the
synthetic and real runs (the straggler term), the gradient size (``model.json``) and the
bytes per sample (the data set's files).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pandas as pd

from pipeprof import plugins
from pipeprof.analysis import service_sizing
from pipeprof.analysis.predict import (
    CROWDED_BUSY,
    TERMS_ADVICE,
    Ceiling,
    Prediction,
    Removed,
    Source,
    SourceRun,
    Target,
    predict,
    transfer,
)
from pipeprof.analysis.telemetry import samples_in, windows
from pipeprof.errors import PipeprofError
from pipeprof.launch import topology
from pipeprof.rundir import RunDir
from pipeprof.scenario import Scenario
from pipeprof.workflows.service_around_launch import worker_cost


def _bytes_per_sample(data_root: str) -> float | None:
    root = Path(data_root) if data_root else None
    if root is None or not root.is_dir():
        return None
    sizes = [
        f.stat().st_size for c in root.iterdir() if c.is_dir() for f in c.iterdir() if f.is_file()
    ]
    return float(np.mean(sizes)) if sizes else None


def _mean_in_window(frame: pd.DataFrame | None, win: pd.DataFrame, np_: int, variant: str) -> float:
    """Mean CPU % of a telemetry frame over the measured steps of one (np, variant), NaN if none."""
    if frame is None or frame.empty:
        return math.nan
    inside = samples_in(frame, win, np_, variant)
    return float(inside["cpu_pct"].mean()) if not inside.empty else math.nan


def cpu_per_step(steps: pd.DataFrame, reference: str) -> tuple[float, float]:
    """At np=1, from the steps' own CPU (``cpu_ms``, the rank's process CPU over each step): the
    training loop's CPU per step (the synthetic run's measured steps) and the pipeline's per
    batch: the real variant's measured steps' CPU less the loop's. In steady state a pipeline
    makes one batch per step; the stock it made through the twin's steps is flushed in the
    settle steps (``rank.measure.flush``), which are not measured, or left for the real steps
    where it keeps its stock (``rank.measure.keeps_stock``), as in steady state. Not the
    telemetry's process CPU over the real halves: it read 20 CPU-ms a batch where the spin's
    size says 30 (the ground-truth suite's cal-spin-875). (NaN, NaN) without CPU per step
    (older runs)."""
    one = steps[(steps["np"] == 1) & ~steps["warmup"].astype(bool)]
    if "cpu_ms" not in one.columns:
        return math.nan, math.nan
    loop = float(one[(one["variant"] == "synthetic") & (one["paired"] == "")]["cpu_ms"].mean())
    own = one[one["variant"] == reference]["cpu_ms"]
    if math.isnan(loop) or own.empty or own.isna().any():
        return math.nan, math.nan
    return loop, float(own.mean()) - loop


def load_ceiling(run_dir: Path, batch_per_rank: int) -> dict[int, Ceiling]:
    """Synthetic steps measured at each worker count on the target, with the node's CPU use,
    from a compare run's summary (the same throughput figures a measured gap is made of)."""
    where = f"--ceiling {run_dir}"
    run = RunDir(run_dir)
    manifest = run.manifest("the ceiling run's manifest")
    batch = int(manifest["scenario"]["train"]["batch_size"])
    if (
        manifest["scenario"]["train"].get("batch_mode", "per_worker") != "per_worker"
        or batch != batch_per_rank
    ):
        raise PipeprofError(
            f"{where}: its batch ({batch}, {manifest['scenario']['train'].get('batch_mode')}) is not "
            f"the source run's {batch_per_rank} per worker"
        )
    summary = run.summary("the ceiling run's results")
    rows = summary[summary["variant"] == "synthetic"]
    if rows.empty:
        raise PipeprofError(
            f"{where}: no synthetic results (run: pipeprof compare SCENARIO --np LIST "
            "--synthetic-only --out DIR on the target)"
        )
    out = {}
    for _, r in rows.iterrows():
        if math.isnan(r["cpu_util_pct"]):
            raise PipeprofError(
                f"{where}: no host CPU telemetry at np={r['np']} (run it without --no-telemetry)"
            )
        out[int(r["np"])] = Ceiling(
            step_ms=1e3 * batch / float(r["samples_per_s_per_worker"]),
            busy=float(r["cpu_util_pct"]) / 100.0,
        )
    return out


def load_source(
    run_dir: Path, target_step_ms: float | None = None, *, measure_missing_stages: bool = True
) -> tuple[Source, dict]:
    run = RunDir(run_dir)
    manifest = run.manifest()
    scenario = Scenario.from_dict(
        {k: v for k, v in manifest["scenario"].items() if k != "source_file"}, "manifest"
    )
    reference = scenario.variants[0].name
    steps = run.steps()
    one = steps[(steps["np"] == 1) & ~steps["warmup"].astype(bool)]
    synth = one[one["variant"] == "synthetic"].groupby("step")["step_time_ms"].mean()
    real = one[one["variant"] == reference].groupby("step")["step_time_ms"].mean()
    if synth.empty or real.empty:
        raise PipeprofError(
            f"{run_dir}: predict needs an np=1 run with the synthetic and '{reference}' variants "
            f"(run: pipeprof compare {scenario.name} --np 1 --ablation)"
        )

    tel = run.telemetry()
    win = windows(steps)
    synth_cpu = _mean_in_window(tel["proc"], win, 1, "synthetic")  # % of a core, one rank
    real_cpu = _mean_in_window(tel["proc"], win, 1, reference)
    sync_cpu_ms, pipeline_cpu_ms = cpu_per_step(run.steps(paired=True), reference)
    if math.isnan(sync_cpu_ms):  # a run from before steps carried their CPU: the telemetry's
        sync_cpu_ms = synth_cpu / 100.0 * float(synth.mean())
        # the real steps' CPU beyond the synthetic ones, on the real step: low where the real
        # variant alternated with its twin (its pipeline works through the twin's steps too)
        pipeline_cpu_ms = (real_cpu - synth_cpu) / 100.0 * float(real.mean())
    notes = []
    if math.isnan(sync_cpu_ms):
        sync_cpu_ms = 0.0
        notes.append(
            "no process telemetry over the synthetic steps: the training loop's own CPU is taken as 0"
        )
    if math.isnan(pipeline_cpu_ms):
        notes.append(
            "no process telemetry over the real steps: the pipeline's CPU comes from the stage costs"
        )
    model_on_cpu = manifest.get("device", "real") == "real" and not manifest.get("gpus")
    if model_on_cpu and not target_step_ms:
        notes.append(
            "the source run computed its model on the CPU, so its CPU per step includes the model: on GPUs "
            "the input term will be smaller than shown; pass --step-ms for the target accelerator"
        )

    stages = run.stages()
    if stages is None:
        if not measure_missing_stages:
            raise PipeprofError(
                f"{run_dir}: no stages.csv (run compare with --ablation, or let predict measure it)"
            )
        from pipeprof.data.stagebench import StageBench, stage_costs

        cores = max(1, min(topology.usable_cores(), int(manifest.get("cpu_cores") or 1)))
        with StageBench(
            scenario.data,
            manifest.get("data_root", ""),
            scenario.train.batch_size,
            cores=cores,
            log_path=run_dir / "logs" / "stagebench.log",
        ) as bench:
            stages = pd.DataFrame(
                stage_costs(bench, scenario.variant_pipeline(scenario.variants[0]))
            ).assign(cores=cores)
        run.write_stages(stages)
        reread = run.stages()  # as every later reader sees them
        stages = reread if reread is not None else stages
        notes.append(f"measured the pipeline's stages now ({run.path / 'stages.csv'})")
    model = run.model()
    source_cores = (
        float(stages["cores"].iloc[0])
        if "cores" in stages
        else float(manifest.get("cpu_cores") or 1)
    )
    busy = _mean_in_window(tel["host"], win, 1, reference) / 100.0
    measured = SourceRun(
        batch_per_rank=scenario.train.batch_size,  # at np=1 a global batch is the one worker's batch
        synth_steps_ms=tuple(synth.tolist()),
        real_steps_ms=tuple(real.tolist()),
        cores=source_cores,
        busy=busy,
        loop_cpu_ms=sync_cpu_ms,
        pipeline_cpu_ms=None if math.isnan(pipeline_cpu_ms) else pipeline_cpu_ms,
        pipeline_core_ms_per_sample=float(stages["core_ms_per_sample_configured"].iloc[-1]),
        model_on_cpu=model_on_cpu,
        gradient_bytes=float(model.get("gradient_bytes", 0.0)),
        bytes_per_sample=_bytes_per_sample(manifest.get("data_root", "")),
        stage_core_ms=dict(zip(stages["stage"], stages["marginal_core_ms_configured"])),
    )
    src, removed = transfer(measured, target_step_ms)
    if not removed.crowded and removed.pipeline_telemetry_ms is not None:
        on_host = "" if math.isnan(removed.busy) else f" on a host {100 * removed.busy:.0f}% busy"
        notes.append(
            f"the real steps took {removed.pipeline_telemetry_ms:.1f} CPU-ms each beyond the training loop's, "
            f"more than the pipeline's stages measured alone ({src.pipeline_ms_per_step:.1f}){on_host}: "
            "predict takes the stages' figure"
        )
    if (why := uncalibrated(manifest, scenario)) is not None:
        notes.append(why)
    if removed.crowded:
        notes.append(crowded_note(removed, src))
    elif removed.model_cpu_ms > 0:
        notes.append(
            f"the source's model took {removed.model_cpu_ms:.1f} CPU-ms per step on its CPU: left out of "
            "the training loop's CPU on the target's accelerator"
        )
    return src, {"manifest": manifest, "scenario": scenario, "notes": notes, "removed": removed}


def uncalibrated(manifest: dict, scenario: Scenario) -> str | None:
    """One line where the source ran on an engine predict's constants were not fitted on (the
    ring step's latency, the busy-core share: fitted on Horovod's ranks, docs/validation.md);
    None where they were. A run saved before the engine was recorded ran on Horovod."""
    engine = manifest.get("engine") or scenario.train.engine
    if engine == plugins.AUTO or plugins.capability(
        plugins.DISTRIBUTION, engine, "predict_calibrated", False
    ):
        return None
    return (
        f"not calibrated for this engine: predict's constants were fitted on Horovod's ranks "
        f"(docs/validation.md, ground truth), and this run is train.engine {engine}'s"
    )


def crowded_note(removed: Removed, src: Source) -> str:
    """What predict left on a crowded source, in words."""
    parts = [
        f"the source host was {100 * removed.busy:.0f}% busy over its real steps (crowded at "
        f"{100 * CROWDED_BUSY:.0f}%): its contention stays there"
    ]
    parts.append(
        f"removed {removed.contention_ms:.1f} ms of contention from the np=1 real step"
        + (
            f" and {100 * removed.spread_removed:.0f}% of its steps' extra spread (the stragglers)"
            if removed.spread_removed > 0
            else ""
        )
    )
    if removed.pipeline_from == "stages":
        told = (
            f" (the telemetry's {removed.pipeline_telemetry_ms:.1f} CPU-ms per step is what the pipeline displaced "
            "on saturated cores)"
            if removed.pipeline_telemetry_ms is not None
            else ""
        )
        parts.append(
            f"the pipeline's CPU is its stages measured alone, {src.pipeline_ms_per_step:.1f} CPU-ms per "
            f"step{told}"
        )
    if removed.model_cpu_ms > 0:
        parts.append(
            f"the model's {removed.model_cpu_ms:.1f} CPU-ms per step stay on the source's CPU"
        )
    return "; ".join(parts)


def advice(pred: Prediction, run_dir: Path) -> str:
    text = TERMS_ADVICE[pred.dominant].format(cores=pred.cores_per_rank)
    winner = run_dir / "winner.toml"
    if pred.dominant == "input" and winner.exists():
        text += f"; tuned settings from this run: {winner}"
    return text


def run_predict(
    run_dir: Path,
    target: Target,
    nps: list[int],
    ceiling_dir: Path | None = None,
    service_cores_per_worker: float = 1.0,
) -> tuple[list[Prediction], Source, dict]:
    """The prediction, written to the run directory. Where the run measured tf.data service
    workers (the data-service remedy), ``ctx["service"]`` sizes the service for each np:
    (core-ms per sample served, the np it was measured at, [service_sizing.Sizing])."""
    src, ctx = load_source(run_dir, target.step_ms)
    if ceiling_dir is not None:
        target = dataclasses.replace(target, ceiling=load_ceiling(ceiling_dir, src.batch_per_rank))
    preds = predict(src, target, nps)
    rows = [p.to_dict() | {"advice": advice(p, run_dir)} for p in preds]
    ctx["service"] = None
    if (cost := worker_cost(run_dir)) is not None:
        sizing = service_sizing.size(
            {p.np: p.synthetic_samples_per_s for p in preds}, cost[0], service_cores_per_worker
        )
        ctx["service"] = (cost[0], cost[1], sizing)
        for row, s in zip(rows, sizing):
            row |= {"service_workers": s.workers, "service_cores": s.cores}
    frame = pd.DataFrame(rows)
    frame.insert(0, "device", ctx["manifest"].get("device", "real"))
    RunDir(run_dir).write_prediction(
        frame,
        {
            "target": dataclasses.asdict(target)
            | {"ceiling_run": str(ceiling_dir) if ceiling_dir else None},
            "source": {k: v for k, v in src.__dict__.items() if "jitter" not in k},
            "left_on_the_source": dataclasses.asdict(ctx["removed"]),
            "notes": ctx["notes"],
            "predictions": rows,
            "service": None
            if cost is None
            else {
                "core_ms_per_sample": cost[0],
                "measured_at_np": cost[1],
                "cores_per_worker": service_cores_per_worker,
                "sizing": [s.to_dict() for s in ctx["service"][2]],
            },
        },
    )
    return preds, src, ctx
