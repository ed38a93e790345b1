"""The tf.data service around one launch: started when a variant runs on it, its address handed
to the ranks through the job, stopped when the launch ends; the bad files its workers met
collected into the run directory like a rank's."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

from pipeprof import atomic
from pipeprof.data import badfiles
from pipeprof.data.tfdata_service import cpu_between, cpu_series
from pipeprof.launch.job import VariantSpec
from pipeprof.launch.service_processes import ServiceProcesses, worker_log
from pipeprof.rundir import RunDir
from pipeprof.scenario import DataConfig, ServiceConfig

DIR = "service"
WORKERS_FILE = "workers.json"


def uses_service(spec: VariantSpec) -> bool:
    """True when the variant runs on the service pipeprof starts (not on one of the user's)."""
    use = spec.pipeline.get("service", {})
    return bool(use.get("enabled")) and not use.get("address")


def log_dir(run_dir: Path, np: int) -> Path:
    return Path(run_dir) / DIR / f"np{np}"


@contextlib.contextmanager
def around_launch(
    specs: list[VariantSpec], config: ServiceConfig, run_dir: Path, np: int, host: str
) -> Iterator[list[VariantSpec]]:
    """The specs to launch with: unchanged when no variant uses the service; else with the
    address of a dispatcher and ``config.workers`` workers that live as long as the block."""
    if not any(uses_service(s) for s in specs):
        yield specs
        return
    with ServiceProcesses(
        log_dir(run_dir, np),
        workers=config.workers,
        hosts=list(config.hosts),
        port=config.port,
        dispatcher_host=host,
    ) as service:
        try:
            yield [_with_address(s, service.address) if uses_service(s) else s for s in specs]
        finally:  # what the workers spent, for sizing the service (predict): written however the launch ended
            atomic.write_text(
                log_dir(run_dir, np) / WORKERS_FILE,
                json.dumps(
                    {
                        "workers": config.workers,
                        "hosts": list(config.hosts),
                        # CPU seconds each spent serving, in all (its log has them over time)
                        "cpu_s": [
                            _last_cpu(worker_log(service.log_dir, k))
                            for k in range(service.workers)
                        ],
                        "variants": [s.name for s in specs if uses_service(s)],
                    }
                )
                + "\n",
            )


def _last_cpu(log: Path) -> float:
    series = cpu_series(log)
    return series[-1][1] if series else float("nan")


def worker_cost(run_dir: Path) -> tuple[float, int] | None:
    """A service worker's CPU per sample it served, in core-ms, and the np it was measured at
    (the largest np whose workers' logs cover it): the workers' CPU while the variants that
    used the service took their measured steps, over the samples the ranks took in them, the
    steps the summary's samples/s counts. Each worker prints its CPU over time, on whichever
    host it ran. Only each round's measured steps count:
    - during the twin's rounds the workers stock batches that the next round's flush drops
      (``rank.measure.flush``, at every round where the pipeline cannot restock while it is
      read), and that CPU served nothing (with it, a worker measured 0.126
      core-ms a sample in rounds and 0.083 in steady state, 2026-11-25);
    - the warm-up before the first round is the workers' start (0.34-0.48 core-ms a sample in
      three story runs of 2026-11-26, against 0.093-0.131 in their measured steps), and each
      round's settle steps refill what the flush dropped; with both, predict put one worker
      20-22% below what it delivered in those runs;
    - nor do the workers' start-up and what they made after the last step.
    None when the run has no such measurement."""
    run = RunDir(run_dir)
    steps = run.steps()
    for path in sorted(
        Path(run_dir, DIR).glob(f"np*/{WORKERS_FILE}"), key=lambda p: -int(p.parent.name[2:])
    ):
        info = json.loads(path.read_text())
        np_ = int(path.parent.name[2:])
        used = steps[
            (steps["np"] == np_)
            & steps["variant"].isin(info.get("variants", []))
            & ~steps["warmup"].astype(bool)
        ]
        series = [
            cpu_series(worker_log(path.parent, k)) for k in range(int(info.get("workers", 0)))
        ]
        cpu, samples = 0.0, 0.0
        for _, steps_of_round in used.groupby(["variant", "round"]):
            t0 = float((steps_of_round["end_unix_s"] - steps_of_round["step_time_ms"] / 1e3).min())
            t1 = float(steps_of_round["end_unix_s"].max())
            cpu += sum(cpu_between(one, t0, t1) for one in series)
            samples += float(steps_of_round["batch_size"].sum())
        if series and samples > 0 and cpu == cpu:  # NaN: a log that does not cover a round
            return 1e3 * cpu / samples, np_
    return None


def _with_address(spec: VariantSpec, address: str) -> VariantSpec:
    pipeline = dict(spec.pipeline, service=dict(spec.pipeline["service"], address=address))
    return dataclasses.replace(spec, pipeline=pipeline)


def collect_bad_files(run_dir: Path, np: int, data: DataConfig) -> int:
    """Write the bad files the service's workers printed at ``np`` into the run's bad-file logs,
    as the ranks would have; how many were new."""
    lines = []
    for log in sorted(log_dir(run_dir, np).glob("worker-*.log")):
        with log.open(encoding="utf-8", errors="replace") as fh:
            lines += [line for line in fh if line.startswith(badfiles.REMOTE_TAG)]
    if not lines:
        return 0
    from pipeprof.data.screen import (
        remote_bad_elements,  # TensorFlow: only when there is something to read
    )

    sinks: dict[tuple[str, int], badfiles.BadFiles] = {}
    new = 0
    for variant, rank, path, reason in remote_bad_elements(lines, data):
        key = (variant, rank)
        if key not in sinks:
            sinks[key] = badfiles.BadFiles(
                badfiles.log_path(run_dir, np, variant, rank), variant=variant
            )
        before = sinks[key].count
        sinks[key].add(path, reason)
        new += sinks[key].count - before
    return new
