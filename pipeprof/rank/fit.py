"""pipeprof's measurement inside a user's own ``model.fit``, under ``pipeprof compare -- CMD``.

``instrumented(dataset)`` registers the dataset, and its synthetic twin is made when ``fit``
starts (``Choice.ready``): one real batch, taken once and repeated, with exactly the dataset's
element spec and no input work per step. The user's dataset itself is left untouched. ``PipeprofCallback`` hands Keras's train function the
twin's iterator instead of the dataset's for the steps the plan gives the twin
(``CHOICE.iterator``), so the choice costs nothing inside the pipeline or the step.
``FitMeasurement``, driven by the callback, sets the choice before every step from the same
measurement plan pipeprof's own ranks follow (``rank.plan``): the twin alone first (the
ceiling), then the real pipeline in rounds that alternate with the twin, each until its
interval is narrow enough; then it ends ``fit``. Rank 0 writes the same run-directory files
as pipeprof's own ranks (``rank.output``).

The twin's batch lives where Keras puts its input: it is copied to the device each step, as
a real batch is, so the gap measures the pipeline, not the copy.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy
import tensorflow as tf

from pipeprof.analysis import stopping
from pipeprof.analysis.ablation import RUNG_TIME_SHARE
from pipeprof.config import build
from pipeprof.distributions import Distribution as Engine
from pipeprof.frameworks import keras2_compat as compat
from pipeprof.launch.job import ScriptJob
from pipeprof.progress import Precision, VariantStart, emit
from pipeprof.rank.identity import identity
from pipeprof.rank.output import gather_records, write_variant
from pipeprof.rank.plan import TWIN, Plan, Step
from pipeprof.records import StepRecord, VariantRun
from pipeprof.scenario import TrainConfig

REAL, SYNTHETIC = 1, 0  # the choice's values: which dataset the next batch comes from


class Choice:
    """Which dataset the coming step reads, set by the callback before each step, and the twin.

    The switch is made outside TensorFlow: the train function is handed the twin's iterator
    or Keras's own. An earlier design chose inside the pipeline (choose_from_datasets, read
    through a tf.Variable, with tf.data's read-ahead optimisations turned off for the whole
    pipeline): that cost the example script 2-3% of its samples/s and changed the user's
    pipeline. The twin's element spec is the dataset's own, so one traced train function
    serves both."""

    def __init__(self) -> None:
        self.source = REAL
        self.instrumented = 0  # datasets instrument() was given in this process
        self._twin: tf.data.Dataset | None = None
        self._dataset: tf.data.Dataset | None = None  # registered, its twin not yet made
        self._iterator = None
        # how Keras hands the train function its batches under a tf.distribute strategy
        # (split among the replicas); the twin's are handed the same way
        self.distribute: Callable[[tf.data.Dataset], object] | None = None

    def register(self, dataset: tf.data.Dataset) -> None:
        """The twin of a tf.data pipeline, made from its first batch once ``fit`` needs it
        (``ready``): a custom loop over the same dataset makes its own from the loop's."""
        self._dataset = dataset
        self.instrumented += 1

    def ready(self) -> None:
        """Make the registered pipeline's twin now (``fit`` is starting)."""
        if self._twin is None and self._dataset is not None:
            dataset, self._dataset = self._dataset, None
            self._make_twin(next(iter(dataset.take(1))), dataset.element_spec)

    def register_batch(self, first: Any) -> None:
        """The twin of a Keras Sequence or a generator, from its first batch, made what
        Keras's adapter for them makes of a batch."""
        self._make_twin(*compat.adapter_batch(first))
        self.instrumented += 1

    def _make_twin(self, first: Any, spec: Any) -> None:
        # one batch, cached: each twin step reads it from memory; relaxed to the dataset's own
        # (maybe partial) shapes, so the train function traced for the dataset serves the twin
        self._twin = tf.data.Dataset.from_tensors(first).map(_as_spec(spec)).cache().repeat()
        self._iterator = None

    def iterator(self, keras_iterator):
        """The iterator the coming step reads: the twin's while the source is the twin."""
        if self.source == REAL or self._twin is None:
            return keras_iterator
        if self._iterator is None:
            twin = self._twin if self.distribute is None else self.distribute(self._twin)
            self._iterator = iter(twin)  # type: ignore[arg-type]
        return self._iterator


def _as_spec(spec):
    """A map function giving an element exactly ``spec``'s static shapes (a twin batch has
    full shapes where the dataset's may have unknown ones, e.g. the batch size)."""

    def relax(*parts):
        element = parts if isinstance(spec, tuple) else parts[0]
        return tf.nest.map_structure(
            lambda t, s: tf.compat.v1.placeholder_with_default(t, s.shape)
            if isinstance(s, tf.TensorSpec)
            else t,
            element,
            spec,
        )

    return relax


CHOICE = Choice()  # one process, one fit at a time


def instrumented(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """The user's dataset, untouched, registered for ``CHOICE`` (its twin is made when
    ``fit`` starts)."""
    CHOICE.register(dataset)
    return dataset


def instrumented_batches(batches: Any) -> Any:
    """A Keras ``Sequence`` (``ImageDataGenerator.flow_from_directory`` gives one) or a Python
    generator of batches, with its twin made from its first batch. The Sequence is returned
    untouched (``fit`` reads it with its own workers, as without pipeprof); a generator's first
    batch, read here, is put back in front of the rest."""
    if isinstance(batches, tf.keras.utils.Sequence):
        CHOICE.register_batch(batches[0])
        return batches
    first = next(batches)
    CHOICE.register_batch(first)

    def again():
        yield first
        yield from batches

    return again()


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
            CHOICE.source = REAL
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
        CHOICE.source = SYNTHETIC if (synthetic_phase or step.source == TWIN) else REAL

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
        CHOICE.source = REAL


def _mean(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return sum(finite) / len(finite) if finite else math.nan
