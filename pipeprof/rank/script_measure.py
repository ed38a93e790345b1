"""The measurement plan inside a user's own training, whatever the framework: ``FitMeasurement``
sets, before every step, where its batch comes from (``SOURCE``: the pipeline's, or the
synthetic twin's), from the same plan pipeprof's own ranks follow (``rank.plan``): the twin
alone first (the ceiling), then the real pipeline in rounds that alternate with the twin, each
until its interval is narrow enough; then it says the training may end. Rank 0 writes the
same run-directory files as pipeprof's own ranks (``rank.output``).

Each framework's script support hands its steps the batch ``SOURCE`` names: Keras 2's ``fit``
(``rank.fit``), Keras 3's (``frameworks.keras3_script``), and custom loops (``rank.loop``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy

from pipeprof.analysis import stopping
from pipeprof.analysis.ablation import RUNG_TIME_SHARE
from pipeprof.config import build
from pipeprof.distributions import Distribution as Engine
from pipeprof.launch.job import ScriptJob
from pipeprof.progress import Precision, VariantStart, emit
from pipeprof.rank.identity import identity
from pipeprof.rank.output import gather_records, write_variant
from pipeprof.rank.plan import TWIN, Plan, Step
from pipeprof.records import StepRecord, VariantRun
from pipeprof.scenario import TrainConfig

REAL, SYNTHETIC = 1, 0  # where the next step's batch comes from


class Source:
    """Which batch the coming step reads (``REAL`` or ``SYNTHETIC``): set by the measurement
    before each step, read by whatever hands the step its batch."""

    def __init__(self) -> None:
        self.source = REAL


SOURCE = Source()  # one process, one training measured at a time


class CompileClock:
    """The seconds this process has spent compiling steps so far, where its framework says
    (``watch``: JAX's compile events). A step that compiled (JAX compiles anew on a new batch
    shape, or when Keras hands it state laid out anew, as at an epoch's start) is measured
    without that time: a compile is no step's work and no gap."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.watching = False

    def watch(self, register: Callable[[Callable[..., None]], None], events: set[str]) -> None:
        """Count the durations of ``events`` that ``register``'s listeners are told of."""
        if self.watching:
            return
        self.watching = True

        def listen(event: str, duration: float, **_: object) -> None:
            if event in events:
                self.seconds += duration

        register(listen)


COMPILES = CompileClock()


def train_config(job: ScriptJob) -> TrainConfig:
    return build(TrainConfig, job.train, "script job", "train")


class FitMeasurement:
    """The plans of one fit (the twin alone, then the real pipeline against it) and the records."""

    def __init__(
        self,
        job: ScriptJob,
        *,
        engine: Engine,
        on_record: Callable[[StepRecord], None] | None = None,
    ) -> None:
        self.job, self.engine, self.rank = job, engine, engine.rank
        # the worker count: processes x the replicas each drives (a record counts the
        # process's samples, all its replicas' together)
        self.replicas = engine.replicas
        self.size = engine.size * self.replicas
        self.host = identity().host
        self.train = train_config(job)
        self.on_record = on_record
        self.phases = [v for v in ("synthetic", "real") if v in job.variants]
        self.phase = -1
        self.plan: Plan | None = None
        self.records: list[StepRecord] = []
        self.losses: list[float] = []
        self.accs: list[float] = []
        self.batch = 0
        self.started = 0.0
        self.steps_per_record = 1  # steps_per_execution: the steps each record stands for
        self.done = False
        self.step_announced: Step | None = None

    def _next_phase(self) -> None:
        self.phase += 1
        self.records, self.losses, self.accs = [], [], []
        if self.phase >= len(self.phases):
            self.done, self.plan = True, None
            SOURCE.source = REAL
            return
        variant = self.phases[self.phase]
        t = self.train
        paired = variant == "real" and "synthetic" in self.phases
        max_s = (
            max(t.min_measure_s, RUNG_TIME_SHARE * t.max_measure_s)
            if variant == "synthetic"
            else t.max_measure_s
        )
        self.plan = Plan(
            variant,
            warmup_steps=t.warmup_steps,
            measure_steps=t.measure_steps,
            rule=stopping.Rule(t.target_ci_pct, t.min_measure_s, max_s),
            np=self.size,
            per_worker_batch=max(1, self.batch),
            average=self._average,
            paired=paired,
        )
        self.started = time.perf_counter()
        if self.rank == 0:
            emit(
                VariantStart(
                    np=self.size,
                    variant=variant,
                    index=self.phase,
                    of_variants=len(self.phases),
                    steps=self.plan.total_steps,
                )
            )

    def before_step(self) -> None:
        """Set where the coming step's batch comes from."""
        if self.plan is None and not self.done:
            self._next_phase()
        if self.done:
            return
        assert self.plan is not None  # _next_phase made one, or set done
        step = self.plan.next_step()
        self.step_announced = step
        synthetic_phase = self.phases[self.phase] == "synthetic"
        SOURCE.source = SYNTHETIC if (synthetic_phase or step.source == TWIN) else REAL

    def after_step(
        self,
        step_ms: float,
        wait_ms: float,
        batch: int,
        loss: float,
        acc: float,
        cpu_ms: float = math.nan,
        *,
        steps: int = 1,
    ) -> bool:
        """Record the step that ran; True once every phase is measured (then fit should stop).
        ``steps``: the steps it stands for (an execution of ``steps_per_execution``, its
        figures given as one step's share)."""
        if self.done or self.step_announced is None:
            return self.done
        step, self.step_announced = self.step_announced, None
        assert self.plan is not None  # the plan that announced the step
        self.steps_per_record = max(self.steps_per_record, steps)
        if not self.batch:  # ``batch``: the process's samples, its replicas' together
            self.batch = max(1, batch // self.replicas)
        record = StepRecord(
            np=self.size,
            variant=step.variant,
            rank=self.rank,
            step=step.index,
            warmup=step.warmup,
            input_wait_ms=wait_ms,
            step_time_ms=step_ms,
            batch_size=batch,
            end_unix_s=time.time(),
            paired=step.paired,
            round=step.round,
            cpu_ms=cpu_ms,
            host=self.host,
        )
        self.records.append(record)
        if not step.warmup and not step.paired:
            self.losses.append(loss)
            self.accs.append(acc)
        if self.on_record is not None:
            self.on_record(record)
        # the plan decides on what ran between two of its steps: an execution of the
        # compiled steps_per_execution, all its samples in all its time (its stopping rule
        # counts real seconds); a shorter last execution of an epoch counts as one of them
        # at its own per-step rate, so every record the rule sees holds the same samples
        per = self.steps_per_record
        self.plan.batch = float(self.batch * self.size * per)
        check = self.plan.finish_step(step_ms * per)
        if check is not None and self.rank == 0:
            emit(
                Precision(
                    np=self.size,
                    variant=step.variant if not step.paired else step.paired,
                    index=self.phase,
                    of_variants=len(self.phases),
                    half_pct=check.half_pct,
                    target_pct=check.target_pct,
                    gap=self.phases[self.phase] == "real" and "synthetic" in self.phases,
                    steps=check.steps * per,
                    seconds=check.seconds,
                )
            )
        if self.plan.finished:
            return self._finish_phase()
        return False

    def _average(self, values: list[float]) -> numpy.ndarray:
        return self.engine.average(values, name="pipeprof_fit")

    def _finish_phase(self, stop_reason: str | None = None) -> bool:
        plan, variant = self.plan, self.phases[self.phase]
        assert plan is not None  # the callers finish a phase that has a plan
        own = [r for r in self.records if not r.warmup and not r.paired]
        per = self.steps_per_record  # a record's steps (its figures are one step's share)
        seconds = (
            plan.seconds
            if plan.seconds is not None
            else per * sum(r.step_time_ms for r in own) / 1e3
        )
        metrics = self._average([_mean(self.losses), _mean(self.accs)])
        every = gather_records(self.engine, self.records, name=f"pipeprof_fit_records_{self.phase}")
        if self.rank == 0:
            write_variant(
                Path(self.job.run_dir),
                every,
                VariantRun(
                    np=self.size,
                    variant=variant,
                    synthetic=variant == "synthetic",
                    per_worker_batch=self.batch,
                    global_batch=self.batch * self.size,
                    learning_rate=math.nan,
                    loss_mean=float(metrics[0]),
                    accuracy_mean=float(metrics[1]),
                    wall_s=time.perf_counter() - self.started,
                    measured_steps=per * len(own),
                    measured_s=seconds,
                    stop_reason=stop_reason or plan.stop_reason,
                    half_pct=plan.half_pct,
                    steps_per_record=self.steps_per_record,
                ),
                index=self.phase,
                of=len(self.phases),
            )
        self.plan = None
        self._next_phase()
        return self.done

    def fit_ended(self) -> None:
        """fit returned before the plan finished (its epochs ran out): keep what was measured;
        the variants not reached are left to another launch."""
        if self.plan is not None and any(not r.warmup for r in self.records):
            self.phases = self.phases[: self.phase + 1]
            self._finish_phase(stop_reason="fit ended")
        self.done, self.plan = True, None
        SOURCE.source = REAL


def _mean(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return sum(finite) / len(finite) if finite else math.nan
