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

from pipeprof.errors import PipeprofError
from pipeprof.launch.job import ENV_SCRIPT_JOB, ERROR_TAG, ScriptJob
from pipeprof.rank.identity import identity
from pipeprof.records import StepRecord
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


def attached_engine() -> Any:
    """The training engine the script started (Horovod after ``hvd.init()``), else None."""
    from pipeprof.rank import engine as engines

    try:
        engine = engines.get()
    except (ImportError, PipeprofError):
        return None  # plain Keras without Horovod: one process
    return engine if engine.attached() else None


def mirrored_engine(strategy: Any, job: ScriptJob, where: str) -> Any:
    """Under ``--engine mirrored``: the engine of the MirroredStrategy the script made,
    checked to drive the replicas compare asked for; ``where``: what the script must build
    under the strategy (its model, or the loop's dataset)."""
    import tensorflow as tf

    from pipeprof.rank.mirrored_engine import MirroredEngine

    if not isinstance(strategy, tf.distribute.MirroredStrategy):
        fail(f"--engine mirrored: {where} tf.distribute.MirroredStrategy, and it did not")
    if strategy.num_replicas_in_sync != job.np:
        fail(
            f"--engine mirrored: np={job.np} but the script's MirroredStrategy has "
            f"{strategy.num_replicas_in_sync} replica(s): make it with the devices pipeprof "
            "gives the script (all it sees: MirroredStrategy() with no devices named)"
        )
    return MirroredEngine.attach(strategy)


def compare_engine(job: ScriptJob, strategy: Any, where: str, at: str = "") -> Any:
    """The engine a compare measures the script's training through: the MirroredStrategy
    the script made (``where``: what must be made under it) under ``--engine mirrored``, else
    the Horovod the script started; ``at``: the script's place, said first in a failure."""
    place = f"{at}: " if at else ""
    if job.engine == "mirrored":
        return mirrored_engine(strategy, job, where)
    engine = attached_engine()
    if engine is None:
        fail(
            f"{place}the script did not start Horovod (hvd.init()) before its training: "
            "pipeprof compares its ranks through it"
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
