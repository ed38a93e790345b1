"""pipeprof inside a custom training loop (no ``model.fit``): the loop reads its batches from
``pipeprof.keras.instrument(dataset)`` and marks each training step with
``pipeprof.keras.step()`` (or calls a step function wrapped by ``step_fn``)::

    for x, y in pk.instrument(dataset):
        with pk.step():
            train_step(x, y)        # a tf.function: DistributedGradientTape, strategy.run, ...

Here the batch leaves the pipeline in Python, so input wait is timed directly: the time the
loop's ``next`` waits for it. A step runs from the end of the previous step to the end of
this one (as inside ``fit``); under ``pipeprof compare`` the same measurement plan as for
``fit`` (``rank.script_measure.FitMeasurement``) decides before each batch whether the loop gets the
pipeline's next batch or the synthetic twin's (the loop's first batch, handed again: no input
work, and the same copy to the device a real batch makes), and the loop ends once the gap is
known (the iteration stops, as at the end of an epoch). Under ``pipeprof watch`` / ``run`` the
steps stream to the dashboard as they run.

A step must be marked where its batch was taken: a loop that takes a second batch before
marking a step, or a marked step whose batch did not come from an instrumented loop, ends
the script with one line naming its place and the line to add.

Under ``ablate`` and for Sequences and generators, ``pipeprof.keras.instrument`` decides
before it reaches here.
"""

from __future__ import annotations

import atexit
import copy
import math
import sys
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from pipeprof.launch.job import ScriptJob
from pipeprof.rank import in_script
from pipeprof.rank.identity import identity
from pipeprof.rank.script_measure import COMPILES, SOURCE, SYNTHETIC, FitMeasurement
from pipeprof.records import StepRecord
from pipeprof.telemetry.agent import RankTelemetry

STEP_LINE = "`with pipeprof.keras.step():` around the training step in its body"
LOOP_LINE = "`for batch in pipeprof.keras.instrument(dataset):`"
VARIANT = "loop"  # the records' variant outside a compare (watch, run)


def where(frame: FrameType | None) -> str:
    """A frame's place in the user's script, as FILE:LINE."""
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "the script"


def from_library(frame: FrameType | None) -> bool:
    """Whether an ``iter()`` comes from Keras or TensorFlow themselves (``fit``, ``evaluate``,
    tf.distribute): they get the dataset's own iterator, not a measured loop."""
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    return name.split(".")[0] in ("keras", "tensorflow", "tf_keras")


def first_leaf(batch: Any) -> Any:
    """A batch's first tensor: through tuples, lists and dicts (TensorFlow's nesting where the
    script runs TensorFlow)."""
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        return tf.nest.flatten(batch)[0] if batch is not None else None
    while isinstance(batch, (tuple, list, dict)) and batch:
        batch = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
    return batch


def samples(batch: Any) -> int:
    """The samples in a batch as the loop got it: its first tensor's rows, summed over the
    replicas where tf.distribute split it (a PerReplica value holds one tensor per replica)."""
    first = first_leaf(batch)
    values = getattr(first, "values", None)
    parts = values if isinstance(values, tuple) else (first,)
    total = 0
    for part in parts:
        shape = getattr(part, "shape", None)
        total += int(shape[0]) if shape is not None and len(shape) and shape[0] else 1
    return total


def scalar(value: Any) -> float:
    """A step's result as one figure for the summary's loss: a scalar tensor or number, a
    dict's ``loss``, or a tuple's first; NaN where there is none (reading it waits for the
    step to finish on its device)."""
    if isinstance(value, dict):
        value = value.get("loss")
    elif isinstance(value, (tuple, list)) and value:
        value = value[0]
    item = getattr(value, "item", None)  # a PyTorch tensor, on its device: one figure
    if item is not None and getattr(value, "numel", lambda: 0)() == 1:
        return float(item())
    try:
        import numpy

        array = numpy.asarray(value, dtype=numpy.float64)
    except (TypeError, ValueError):
        return math.nan
    return float(array) if array.ndim == 0 else math.nan


class Loop:
    """One process's custom-loop measurement: across its epochs (each ``for`` over the
    instrumented dataset), until the plan is done."""

    def __init__(self) -> None:
        self.started = False
        self.read = False  # the environment, read at the first use (not at import)
        self.job: ScriptJob | None = None
        self.address = self.run_dir = ""
        self.telemetry: RankTelemetry | None = None
        self.measurement: FitMeasurement | None = None
        self.twin: Any = None  # the loop's first batch, handed again on the twin's steps
        self.have_twin = False
        self.pending: tuple[float, int] | None = None  # the batch handed: (wait ms, samples)
        self.taken_at = ""  # where the loop took it
        self.prev_end = self.prev_cpu = 0.0
        self.compiled = 0.0  # COMPILES's seconds at the previous step's end
        self.epoch_ended = False
        self.batches = ""  # a Sequence or generator instrument() was given: not a loop's input
        self.step = 0
        self.rank = self.size = 0
        self.host = ""
        self.warmup_steps = 5

    @property
    def active(self) -> bool:
        """Whether pipeprof runs the script (a compare's job, a watch's or run's stream)."""
        if not self.read:
            self.job, (self.address, self.run_dir) = in_script.job(), in_script.listening()
            self.read = True
        return bool(self.job is not None or self.address or self.run_dir)

    @property
    def done(self) -> bool:
        return self.measurement is not None and self.measurement.done

    def start(self, strategy: Any, at: str) -> None:
        """At the loop's first batch: the engine, the measurement and the telemetry."""
        self.started = True
        if not self.active:
            return  # iterated outside pipeprof: nothing to measure
        job = self.job
        if job is not None and job.mode == "compare":
            if in_script.distribution_of(job).one_process and strategy is None:
                in_script.fail(
                    f"{at}: --engine {job.engine}: instrument the dataset the loop reads, "
                    "distributed: pipeprof.keras.instrument("
                    "strategy.experimental_distribute_dataset(dataset))"
                )
            engine = in_script.compare_engine(
                job, strategy, "the loop must read a dataset distributed by", at
            )
            self.measurement = FitMeasurement(
                job, engine=engine, on_record=in_script.streamer(lambda: self.telemetry)
            )
        self.rank, self.size, _, _ = in_script.ranks()
        if self.measurement is not None:
            self.size = self.measurement.size
        self.host = identity().host
        self.telemetry = in_script.start_telemetry(self.address, self.run_dir)
        if self.measurement is None:
            in_script.announce(self.telemetry, self.rank, self.size, VARIANT)
        atexit.register(self.at_exit)  # a loop left with ``break``: keep what it measured

    def take(self, native: Iterator[Any], at: str) -> Any:
        """The loop's next batch: the pipeline's or the twin's, its wait timed."""
        if not self.active:
            return next(native)
        if self.pending is not None:
            in_script.fail(
                f"{at}: the loop over pipeprof.keras.instrument took a second batch before "
                f"marking a step (its batch was taken at {self.taken_at}): add {STEP_LINE}"
            )
        if self.done:
            raise StopIteration
        t0 = time.perf_counter()
        if self.epoch_ended or not self.prev_end:
            # the first batch, or the first of an epoch: the time since the last step (the
            # script's own work between epochs) is no step's; the restarted pipeline's
            # first batch is, as its wait
            self.prev_end, self.prev_cpu = t0, time.process_time()
            self.compiled = COMPILES.seconds
            self.epoch_ended = False
        twin = False
        if self.measurement is not None:
            if not self.have_twin:
                self.twin, self.have_twin = next(native), True  # StopIteration: nothing to read
            self.measurement.before_step()
            twin = SOURCE.source == SYNTHETIC
        t0 = time.perf_counter()
        try:
            batch = self.twin if twin else next(native)
        except StopIteration:  # the end of an epoch: the next ``for`` goes on measuring
            self.epoch_ended = True
            raise
        self.pending = ((time.perf_counter() - t0) * 1e3, samples(batch))
        self.taken_at = at
        return batch

    def mark(self, at: str, loss: float = math.nan, accuracy: float = math.nan) -> None:
        """The end of a step whose batch the loop took."""
        if self.pending is None:
            if self.batches:
                in_script.fail(
                    f"{at}: pipeprof.keras.step() marks a step of a loop over a "
                    f"{self.batches}, which pipeprof measures only inside model.fit: in a "
                    "custom loop read a tf.data pipeline (tf.data.Dataset.from_generator wraps "
                    f"a generator) with {LOOP_LINE}"
                )
            in_script.fail(
                f"{at}: pipeprof.keras.step() marks a step whose batch did not come from "
                f"pipeprof.keras.instrument: read the batches with {LOOP_LINE}"
            )
        assert self.pending is not None
        (wait_ms, batch), self.pending = self.pending, None
        now, cpu = time.perf_counter(), time.process_time()
        compiled_ms = (COMPILES.seconds - self.compiled) * 1e3  # a compile is no step's work
        step_ms = (now - self.prev_end) * 1e3 - compiled_ms
        cpu_ms = (cpu - self.prev_cpu) * 1e3 - compiled_ms
        self.prev_end, self.prev_cpu, self.compiled = now, cpu, COMPILES.seconds
        if self.measurement is not None:
            done = self.measurement.after_step(step_ms, wait_ms, batch, loss, accuracy, cpu_ms)
            # the next step starts here: what the measurement did in between is no step's
            self.prev_end, self.prev_cpu = time.perf_counter(), time.process_time()
            if done:
                self.close()
            return
        record = StepRecord(
            np=self.size,
            variant=VARIANT,
            rank=self.rank,
            step=self.step,
            warmup=self.step < self.warmup_steps,
            input_wait_ms=wait_ms,
            step_time_ms=step_ms,
            batch_size=batch,
            end_unix_s=time.time(),
            host=self.host,
            cpu_ms=cpu_ms,
        )
        self.step += 1
        if self.telemetry is not None:
            self.telemetry.put("step", record)

    def at_exit(self) -> None:
        """The script ends: keep what the loop measured, unless it ends on a failure (then
        the other ranks may never join the collectives that gather it: stop streaming only,
        and the launcher keeps what streamed)."""
        if in_script.ending_in_failure():
            if self.telemetry is not None:
                self.telemetry.stop()
                self.telemetry = None
            return
        self.close()

    def close(self) -> None:
        """The loop is over (measured, or the script ends before it was: its epochs ran out
        or it left with ``break``): keep what was measured and stop streaming."""
        if self.measurement is not None and not self.measurement.done:
            self.measurement.fit_ended()
        if self.telemetry is not None:
            self.telemetry.stop()
            self.telemetry = None


LOOP = Loop()  # one process, one loop measured


class LoopIterator:
    """The iterator a ``for`` over an instrumented dataset gets: the dataset's own iterator,
    made at the first batch (a loop pipeprof has ended starts no pipeline for its next
    epochs)."""

    def __init__(self, native: Callable[[], Iterator[Any]], strategy: Any) -> None:
        self.make, self.strategy = native, strategy
        self.native: Iterator[Any] | None = None

    def __iter__(self) -> LoopIterator:
        return self

    def __next__(self) -> Any:
        at = where(sys._getframe(1))
        if not LOOP.started:
            LOOP.start(self.strategy, at)
        if LOOP.done:
            raise StopIteration
        if self.native is None:
            self.native = self.make()
        return LOOP.take(self.native, at)


class LoopDataset:
    """A tf.distribute dataset (or any iterable of batches a loop reads) under pipeprof: its
    iteration measured; everything else is the dataset's own."""

    def __init__(self, dataset: Any, strategy: Any) -> None:
        self._pipeprof_dataset, self._pipeprof_strategy = dataset, strategy

    def __iter__(self) -> Any:
        tf = sys.modules.get("tensorflow")
        inside = tf is not None and tf.inside_function()
        if inside or from_library(sys._getframe(1)):
            return iter(self._pipeprof_dataset)
        return LoopIterator(lambda: iter(self._pipeprof_dataset), self._pipeprof_strategy)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipeprof_dataset, name)


def loop_dataset(dataset: Any) -> Any:
    """A tf.data dataset whose iteration in the user's own loop is measured and whose
    iteration by Keras (``fit``, ``evaluate``) or TensorFlow is the dataset's own. A new
    dataset object (the user's is left as it is) over the same pipeline."""
    import tensorflow as tf

    ours = dataset.with_options(tf.data.Options())  # the same pipeline, a new object
    parent = type(ours)

    def __iter__(self: Any) -> Any:
        if tf.inside_function() or from_library(sys._getframe(1)):
            return parent.__iter__(self)
        return LoopIterator(lambda: parent.__iter__(self), None)

    ours.__class__ = type(f"Instrumented{parent.__name__}", (parent,), {"__iter__": __iter__})
    return ours


def class_kept(dataset: Any) -> Any:
    """A copy of ``dataset`` that is still of its class (a subclass of it), for what Keras
    takes by its class (``fit`` on torch takes a ``torch.utils.data.DataLoader``): its
    iteration by the user's loop is measured, by Keras or TensorFlow it is its own. The
    user's object is left as it is (the copy shares its dataset, sampler and workers' settings)."""
    ours = copy.copy(dataset)
    parent = type(ours)

    def __iter__(self: Any) -> Any:
        if from_library(sys._getframe(1)):
            return parent.__iter__(self)
        return LoopIterator(lambda: parent.__iter__(self), None)

    ours.__class__ = type(
        f"Instrumented{parent.__name__}",
        (parent,),
        {"__iter__": __iter__, "_pipeprof_parent": parent},
    )
    return ours


def own_iterator(source: Any) -> Iterator[Any]:
    """``iter(source)`` as its own class gives it: for a copy ``class_kept`` made, its
    parent's iterator, not the measured loop's (pipeprof's own iteration of it in ``fit``)."""
    parent = getattr(type(source), "_pipeprof_parent", None)
    return parent.__iter__(source) if parent is not None else iter(source)


def distributed(dataset: Any) -> Any:
    """A tf.distribute dataset a loop reads, with its strategy (needed to check it)."""
    return LoopDataset(dataset, getattr(dataset, "_strategy", None))


def finish_on_devices(at: str) -> None:
    """Wait for what the step queued on its devices (a GPU runs a compiled step's kernels
    after the call returns; PyTorch queues CUDA kernels): the step ends when its work has, not
    when it was queued."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return
    if tf.inside_function():
        in_script.fail(
            f"{at}: pipeprof.keras.step() marks a step from Python, around the call of the "
            "compiled step: it was reached inside a tf.function (where it would run once, "
            "when traced)"
        )
    tf.test.experimental.sync_devices()


class StepMark:
    """``with pipeprof.keras.step() as s:``; set ``s.loss`` (a tensor or number) for the
    summary's loss."""

    def __init__(self) -> None:
        self.loss: Any = None
        self.accuracy: Any = None

    def __enter__(self) -> StepMark:
        return self

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        if kind is not None or not LOOP.active:
            return
        at = where(sys._getframe(1))
        finish_on_devices(at)
        LOOP.mark(
            at,
            scalar(self.loss) if self.loss is not None else math.nan,
            scalar(self.accuracy) if self.accuracy is not None else math.nan,
        )


def step_fn(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (the loop's training step), each call marked as a step: it ends once its
    devices have finished its work, and its result is read as the step's loss."""
    if not LOOP.active:
        return fn

    def step(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        at = where(sys._getframe(1))
        finish_on_devices(at)
        LOOP.mark(at, scalar(result))
        return result

    step.__wrapped__ = fn  # type: ignore[attr-defined]
    return step
