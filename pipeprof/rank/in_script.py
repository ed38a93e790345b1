"""What pipeprof needs inside a user's own training script, whatever its loop: the job
``pipeprof compare -- CMD`` gave it, the engine the script started, its rank, the telemetry
that streams its steps, and the one-line failure. ``pipeprof.keras``'s callback (``fit``) and
``rank.loop`` (custom loops) both use these, so the two measure alike.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from pipeprof import plugins
from pipeprof.errors import PipeprofError
from pipeprof.launch.job import ENV_SCRIPT_JOB, ERROR_TAG, ScriptJob
from pipeprof.rank.identity import identity
from pipeprof.records import StepRecord
from pipeprof.scenario import TrainConfig
from pipeprof.telemetry.agent import RankTelemetry, start_streaming
from pipeprof.telemetry.stream import ENV_ADDRESS, ENV_RUN_DIR, ENV_TOKEN


def job() -> ScriptJob | None:
    """What ``pipeprof compare`` asks of this script, or None outside a compare."""
    text = os.environ.get(ENV_SCRIPT_JOB)
    return ScriptJob.decode(text) if text else None


def listening(address: str | None = None, run_dir: str | None = None) -> tuple[str, str]:
    """Where the script's steps go: the launcher's stream address and run directory (either
    may be ""; both "" outside pipeprof)."""
    return (
        address or os.environ.get(ENV_ADDRESS) or "",
        run_dir or os.environ.get(ENV_RUN_DIR) or "",
    )


FAILED: list[str] = []  # this process's one-line failure, once ``fail`` has said it


def fail(message: str) -> None:
    """End the script with pipeprof's one line (the launcher shows it, no traceback)."""
    FAILED.append(message)
    print(identity().error_line(ERROR_TAG, message), file=sys.stderr, flush=True)
    raise SystemExit(2)


def ending_in_failure() -> bool:
    """At exit: whether the script is ending on pipeprof's failure or an uncaught exception
    (whose traceback Python has printed), when the other ranks may never reach a collective."""
    return bool(FAILED) or getattr(sys, "last_value", None) is not None


def distribution_of(script: ScriptJob | None) -> Any:
    """The class of the distribution a compare measures the script through (``--engine``;
    outside a compare, the default): its capabilities."""
    name = script.engine if script is not None else TrainConfig().engine
    if name == plugins.AUTO:
        name = plugins.choose_engine()[0]
    return plugins.kind(plugins.DISTRIBUTION, name)


def prepare_distribution() -> None:
    """Under ``compare --engine E -- CMD``, before the script's framework starts (importing
    pipeprof.keras comes first): what the distribution sets up for the script's own
    (``prepare_script``: mirrored's logical CPU devices on a host without GPUs;
    data_parallel's Keras backend, CPU devices and the variables ``initialize()`` reads)."""
    script = job()
    if script is None:
        return
    setup = getattr(distribution_of(script), "prepare_script", None)
    if setup is None:
        return
    try:
        setup(script.np, script.rendezvous)
    except PipeprofError as exc:
        fail(exc.message)


def attached_engine() -> Any:
    """The distribution the script started (Horovod after ``hvd.init()``), else None."""
    try:
        engine = plugins.make(plugins.DISTRIBUTION, distribution_of(job()).name)
    except (ImportError, PipeprofError):
        return None  # plain Keras without Horovod: one process
    return engine if engine.attached() else None


def compare_engine(script: ScriptJob, strategy: Any, where: str, at: str = "") -> Any:
    """The distribution a compare measures the script's training through: the strategy the
    script made (``where``: what must be made under it), where the distribution takes its
    script's own (``attach_script``: mirrored), else the one the script started (Horovod
    after ``hvd.init()``); ``at``: the script's place, said first in a failure."""
    place = f"{at}: " if at else ""
    attach = getattr(distribution_of(script), "attach_script", None)
    if attach is not None:
        try:
            return attach(strategy, script.np, where)
        except PipeprofError as exc:
            fail(exc.message)
    engine = attached_engine()
    if engine is None:
        started = getattr(distribution_of(script), "started_by", script.engine)
        fail(
            f"{place}the script did not start {started} before its training: pipeprof "
            "compares its ranks through it"
        )
    return engine


def announce(telemetry: RankTelemetry, rank: int, size: int, variant: str) -> None:
    """Tell the launcher (rank 0) that the script's one variant has started (watch, run)."""
    if rank == 0:
        telemetry.put(
            "variant_start", {"np": size, "variant": variant, "index": 0, "of_variants": 1}
        )


def ranks() -> tuple[int, int, int, int]:
    """(rank, size, local_rank, local_size) from the engine if the script started it, else
    from what the launcher put in the environment (``rank.identity``)."""
    engine = attached_engine()
    if engine is not None:
        return engine.rank, engine.size, engine.local_rank, engine.local_size
    me = identity()
    return me.rank, me.size, me.local_rank, me.local_size


def start_telemetry(
    address: str,
    run_dir: str,
    *,
    gpu_interval_s: float = 0.1,
    host_interval_s: float = 0.5,
) -> RankTelemetry:
    """This rank's samplers and its stream to the launcher (to the run directory where no
    collector listens), started."""
    rank, size, local_rank, local_size = ranks()
    return start_streaming(
        address,
        token=os.environ.get(ENV_TOKEN, ""),
        fallback_dir=run_dir,
        rank=rank,
        local_rank=local_rank,
        local_size=local_size,
        size=size,
        gpu_interval_s=gpu_interval_s,
        host_interval_s=host_interval_s,
    )


def streamer(telemetry: Callable[[], RankTelemetry | None]) -> Callable[[StepRecord], None]:
    """A step record's way to the launcher, through whatever telemetry runs when it comes."""

    def stream(record: StepRecord) -> None:
        t = telemetry()
        if t is not None:
            t.put("step", record)

    return stream
