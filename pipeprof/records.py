"""Record types that cross process boundaries: per-step timings from ranks, per-variant facts.

Pure data (no TensorFlow), each with to_dict/from_dict so ranks, the launcher and analysis
agree on one schema; from_dict checks types with the same loader as scenarios
(``config.build``) and skips keys a newer pipeprof added. Units are in the names.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from pipeprof.config import build


@dataclass(frozen=True)
class StepRecord:
    np: int
    variant: str
    rank: int
    step: int  # 0-based, warm-up steps included
    warmup: bool
    input_wait_ms: float  # time blocked in next() on the input pipeline
    step_time_ms: float  # whole iteration: input wait + forward/backward/allreduce/update
    batch_size: int  # samples this rank processed in the step
    end_unix_s: float  # wall clock at the end of the step (aligns ranks on one host)
    # Adaptive real variants alternate with their synthetic twin in rounds: a twin step
    # carries variant "synthetic" and, here, the real variant it was paired with.
    paired: str = ""
    round: int = -1  # the round of an alternating measurement; -1 when measured alone
    # CPU time of the rank's whole process over the step (every thread: the model's, the
    # input pipeline's, Horovod's); NaN where it was not read
    cpu_ms: float = math.nan
    host: str = ""  # the rank's host (its launcher's name for it, else its hostname)
    # the optimizer's learning rate this step trained with, read where it changes during the
    # run (train.lr_warmup_steps); NaN where it was not read
    learning_rate: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StepRecord:
        return build(cls, d, "step record", "", ignore_unknown=True)


STEP_COLUMNS = [f.name for f in fields(StepRecord)]


@dataclass(frozen=True)
class VariantRun:
    """What rank 0 knows about one variant at one worker count once it has run."""

    np: int
    variant: str
    synthetic: bool
    per_worker_batch: int
    global_batch: int
    learning_rate: float
    loss_mean: float  # averaged over ranks (Horovod metric averaging)
    accuracy_mean: float
    wall_s: float
    measured_steps: int = 0  # warm-up excluded
    measured_s: float = math.nan  # the measured steps' time (averaged over ranks)
    stop_reason: str = ""  # analysis.stopping: fixed steps, target, clear of thresholds, max time
    half_pct: float = math.nan  # the precision reached when adaptive (gap points, or throughput %)
    # the steps one record stands for: a user's fit compiled with steps_per_execution=N is
    # timed per execution, each record one step's share of it
    steps_per_record: int = 1
    # measured in rounds by pipeprof's own loop: its pipeline's stock flushed at the switch to
    # its steps in "every round", or in the "first round only" (it keeps its stock when read)
    flush: str = ""
    # what ``rank.measure.keeps_stock`` decided ``flush`` on, averaged over ranks: the first
    # round's flushes in batches (at its switch to the real steps, at its end) and its real
    # steps' mean wait for a batch as a share of a twin step
    flush_counts: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VariantRun:
        return build(cls, d, "variant run", "", ignore_unknown=True)
