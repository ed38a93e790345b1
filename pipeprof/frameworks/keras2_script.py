"""pipeprof in a user's own Keras 2 training script (``pipeprof.keras`` where Keras 2 is
installed: TensorFlow 2.15, with Horovod or tf.distribute).

In a custom training loop (``rank.loop``) the batch leaves the pipeline in Python and its wait
is timed there. Under ``compare``, ``instrument`` registers the dataset (your dataset itself is
left untouched: what it returns is a new dataset over the same pipeline, whose iteration by
your own loop is measured), the callback makes its synthetic twin when ``fit`` starts
(``rank.fit``), and ends ``fit`` once the gap is known. Under ``compare --ablation``,
``instrument`` measures each transformation of your dataset alone (``pipeprof.data.chain``).

How input wait is measured inside ``fit``: Keras pulls the next batch from the iterator
inside its compiled train function, out of a callback's sight. The callback wraps the
model's ``train_step`` so that it also returns ``tf.timestamp()`` taken as soon as the batch
has left the iterator, before the forward pass, and wraps the train function so that Keras
never sees that extra figure. Input wait is the time from ``on_train_batch_begin`` to that
timestamp. It includes Keras's dispatch overhead (tens of microseconds), and it only works
if the train function is traced after the callback starts, which is the case for the first
``fit`` of a model (and not under ``jit_compile``, where it is left out).
"""

from __future__ import annotations

import inspect
import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from pipeprof.errors import PipeprofError
from pipeprof.frameworks import keras2_compat as compat
from pipeprof.launch.job import ScriptJob
from pipeprof.rank import in_script
from pipeprof.rank.identity import identity
from pipeprof.records import StepRecord
from pipeprof.telemetry.agent import RankTelemetry

if TYPE_CHECKING:
    from pipeprof.rank.script_measure import FitMeasurement

log = logging.getLogger("pipeprof.keras")
# what the wrapped train step adds to its logs, taken out again before any callback sees them
ENTERED, BATCH = "_pipeprof_batch_entered_unix_s", "_pipeprof_batch_size"
ADD_INSTRUMENT = "add `dataset = pipeprof.keras.instrument(dataset)` before model.fit"


def instrument(dataset: Any) -> Any:
    """Your training dataset, as pipeprof needs it: itself outside pipeprof. A tf.data
    pipeline, a Keras ``Sequence`` (returned as it is) or a Python generator of batches (its
    first batch read, then put back): whatever you pass to ``fit``; or, for a custom loop,
    the tf.data pipeline or tf.distribute dataset the loop reads (mark its steps with
    ``step()``)."""
    job = in_script.job()
    if job is None and not any(in_script.listening()):
        return dataset
    spread = isinstance(dataset, tf.distribute.DistributedDataset)
    batches = isinstance(dataset, tf.keras.utils.Sequence) or inspect.isgenerator(dataset)
    if not isinstance(dataset, tf.data.Dataset) and not batches and not spread:
        in_script.fail(
            "pipeprof.keras.instrument takes what model.fit or a training loop reads: a "
            "tf.data.Dataset, a tf.distribute dataset, a Keras Sequence or a generator of "
            f"batches; got {type(dataset).__name__}"
        )
    if job is not None and job.mode == "ablate":
        if batches or spread:
            in_script.fail(
                f"--ablation splits a tf.data pipeline into its stages; a {type(dataset).__name__} "
                "has none to split: build the input with tf.data (tf.data.Dataset.from_generator "
                "wraps a generator) and instrument it before it is distributed, or compare "
                "without --ablation"
            )
        from pipeprof.data.ablate_script import ablate_and_exit

        ablate_and_exit(dataset, job)
    from pipeprof.rank import loop

    if spread:
        return loop.distributed(dataset)
    if batches:  # fit measures it; a custom loop cannot
        loop.LOOP.batches = type(dataset).__name__
    if job is None:  # watch or run: fit's steps come from the callback, a loop's from here
        return dataset if batches else loop.loop_dataset(dataset)
    from pipeprof.rank.fit import instrumented, instrumented_batches

    if not batches:
        return loop.loop_dataset(instrumented(dataset))
    try:
        return instrumented_batches(dataset)
    except StopIteration:
        in_script.fail("the generator given to pipeprof.keras.instrument yielded no batch")


def step() -> Any:
    """A custom loop's training step, marked: ``with pipeprof.keras.step():`` around it, in
    the body of ``for batch in pipeprof.keras.instrument(dataset)``. Outside pipeprof it
    does nothing. ``as s`` then ``s.loss = loss`` gives the summary the step's loss."""
    from pipeprof.rank.loop import StepMark

    return StepMark()


def step_fn(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, a custom loop's training step, with each call marked as ``step()`` marks it,
    its result read as the step's loss; ``fn`` itself outside pipeprof."""
    from pipeprof.rank.loop import step_fn as marked

    return marked(fn)


class PipeprofCallback(tf.keras.callbacks.Callback):
    def __init__(
        self,
        *,
        variant: str = "fit",
        warmup_steps: int = 5,
        measure_input_wait: bool = True,
        run_dir: str | None = None,
        address: str | None = None,
        gpu_interval_s: float = 0.1,
        host_interval_s: float = 0.5,
    ) -> None:
        super().__init__()
        self.variant = variant
        self.warmup_steps = warmup_steps
        self.measure_input_wait = measure_input_wait
        self.address, self.run_dir = in_script.listening(address, run_dir)
        self.gpu_interval_s, self.host_interval_s = gpu_interval_s, host_interval_s
        self.telemetry: RankTelemetry | None = None
        self.measurement: FitMeasurement | None = None  # under pipeprof compare
        self.step = 0
        self._t0 = self._prev_end = self._prev_cpu = 0.0
        self._entered: tf.Tensor | None = None  # the step's timestamp (unix seconds)
        self._batch_size: tf.Tensor | None = None  # and its batch's size
        self._t0_unix = 0.0
        self._batch = 0
        self._first = 0  # the index of the execution's first step (steps_per_execution)
        # steps_per_execution > 1: the execution's summed input wait, and where its previous
        # step left off, kept by the steps themselves (one process, one replica: a variable)
        self._waited: tf.Variable | None = None
        self._left: tf.Variable | None = None
        self.rank = self.size = 0

    @property
    def active(self) -> bool:
        """Whether pipeprof is listening (a launcher's stream, a run directory, or a compare job)."""
        return bool(self.address or self.run_dir)

    # -- the timestamp inside the train step, and the source of each step's batch ----------
    def _wrap_train_step(self) -> None:
        """The step's timestamp (the batch has left the iterator) returned with its logs; not
        under XLA, which compiles no host timestamp (input wait is then not measured)."""
        model = self.model
        if compat.jit_compiled(model) or compat.train_step_wrapped(model):
            return
        # fit runs its callbacks inside the model's strategy scope: none, or a tf.distribute
        # one, whose replicas would each need their own copy (not measured there)
        if compat.steps_per_execution(model) > 1 and not tf.distribute.has_strategy():
            self._waited = tf.Variable(0.0, dtype=tf.float64, trainable=False)
            self._left = tf.Variable(0.0, dtype=tf.float64, trainable=False)
        compat.wrap_train_step(model, self._timed)

    def _timed(self, original: Callable[[Any], Any]) -> Callable[[Any], Any]:
        model, waited, left = self.model, self._waited, self._left

        def timed_train_step(data: Any) -> Any:
            flat = tf.nest.flatten(data)
            with tf.control_dependencies(flat):  # the batch has left the iterator
                entered = tf.timestamp()
            if waited is not None and left is not None:  # since the previous step's end
                waiting = waited.assign_add(entered - left.read_value())
            logs = original(data)
            if waited is not None and left is not None:
                # the step ends once its logs are computed and its weights updated (a read of
                # each follows its last write), not when its forward pass is done
                updated = [v.read_value() for v in model.trainable_variables]
                with tf.control_dependencies([*tf.nest.flatten(logs), *updated, waiting]):
                    left.assign(tf.timestamp())
            if not isinstance(logs, dict):
                return logs
            # under a tf.distribute strategy Keras reduces each replica's logs into one
            # (summing them, unless the model's distribute_reduction_method says "first"): the
            # timestamp comes out as the replicas' mean and the batch as the process's samples
            ctx = tf.distribute.get_replica_context()
            n = int(ctx.num_replicas_in_sync) if ctx is not None else 1
            batch = tf.shape(flat[0])[0]
            if n > 1 and model.distribute_reduction_method != "first":
                entered = entered / n
            elif n > 1:
                batch = batch * n
            return {**logs, ENTERED: entered, BATCH: batch}

        return timed_train_step

    def _wrap_train_function(self) -> None:
        """Keras calls ``model.train_function(iterator)`` once a step (fit has just made it): the
        wrapper hands it the twin's iterator on the twin's steps, and takes the timestamp out
        of the step's logs before any callback sees them."""
        from pipeprof.rank.fit import CHOICE

        def wrapper(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
            def train_function(iterator: Any) -> Any:
                if self._waited is not None and self._left is not None:  # an execution starts
                    self._waited.assign(0.0)
                    self._left.assign(time.time())
                logs = original(CHOICE.iterator(iterator))
                if isinstance(logs, dict):
                    self._entered = logs.pop(ENTERED, None)
                    self._batch_size = logs.pop(BATCH, None)
                return logs

            return train_function

        compat.wrap_train_function(self.model, wrapper)

    # -- Keras hooks ------------------------------------------------------------------------
    def on_train_begin(self, logs: dict | None = None) -> None:
        if not self.active:
            return  # outside pipeprof: nothing to measure, nothing started
        try:
            compat.require("pipeprof.keras.PipeprofCallback")
        except PipeprofError as exc:
            in_script.fail(exc.message)
        rank, size, _, _ = in_script.ranks()
        self.rank, self.size = rank, size
        self.host = identity().host
        job = in_script.job()
        if job is not None and job.mode == "compare":
            self._start_compare(job)
        self.telemetry = in_script.start_telemetry(
            self.address,
            self.run_dir,
            gpu_interval_s=self.gpu_interval_s,
            host_interval_s=self.host_interval_s,
        )
        if self.measurement is None:
            in_script.announce(self.telemetry, rank, size, self.variant)
        if self.measure_input_wait:
            self._wrap_train_step()
        if self.measure_input_wait or self.measurement is not None:
            self._wrap_train_function()
        self._prev_end, self._prev_cpu = time.perf_counter(), time.process_time()

    def _start_compare(self, job: ScriptJob) -> None:
        from pipeprof.rank.fit import CHOICE
        from pipeprof.rank.script_measure import FitMeasurement

        if not CHOICE.instrumented:
            in_script.fail(
                f"the script calls model.fit without pipeprof.keras.instrument: {ADD_INSTRUMENT}"
            )
        engine = in_script.compare_engine(
            job,
            self.model.distribute_strategy,
            "the script must build and compile its model under",
        )
        # the twin's batches reach the replicas as fit hands them the dataset's (a strategy's
        # split of each batch; one replica a process: as they are)
        CHOICE.distribute = engine.distribute
        try:
            CHOICE.ready()
        except StopIteration:
            in_script.fail("the dataset given to pipeprof.keras.instrument yielded no batch")
        self.measurement = FitMeasurement(
            job, engine=engine, on_record=in_script.streamer(lambda: self.telemetry)
        )

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if not self.active:
            return
        if self.measurement is not None:
            self.measurement.before_step()
        self._entered, self._first = None, batch
        self._t0, self._t0_unix = time.perf_counter(), time.time()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if not self.active:
            return
        t2 = time.perf_counter()
        # Keras calls this once an execution, with its last step's index: every figure of an
        # execution of n steps is its own ÷ n, one step's share
        n = max(1, batch - self._first + 1)
        if n > 1:
            wait_ms = float(self._waited) * 1e3 / n if self._waited is not None else math.nan
        elif self._entered is not None:
            wait_ms = (float(self._entered) - self._t0_unix) * 1e3
        else:
            wait_ms = math.nan
        if self._batch_size is not None:
            self._batch = int(self._batch_size)
        if self.measurement is not None:
            # a step runs from the end of the previous one, as in pipeprof's own loop
            step_ms, self._prev_end = (t2 - self._prev_end) * 1e3 / n, t2
            cpu = time.process_time()
            cpu_ms, self._prev_cpu = (cpu - self._prev_cpu) * 1e3 / n, cpu
            logs = logs or {}
            if self.measurement.after_step(
                step_ms,
                wait_ms,
                self._batch,
                float(logs.get("loss", float("nan"))),
                float(logs.get("accuracy", float("nan"))),
                cpu_ms,
                steps=n,
            ):
                self.model.stop_training = True
            return
        record = StepRecord(
            np=self.size,
            variant=self.variant,
            rank=self.rank,
            step=self.step,
            warmup=self.step < self.warmup_steps,
            input_wait_ms=wait_ms,
            step_time_ms=(t2 - self._t0) * 1e3 / n,
            batch_size=self._batch,
            end_unix_s=time.time(),
            host=self.host,
        )
        self.step += n
        if self.telemetry is not None:
            self.telemetry.put("step", record)

    def on_train_end(self, logs: dict | None = None) -> None:
        if self.measurement is not None:
            self.measurement.fit_ended()
        if self.telemetry is not None:
            self.telemetry.stop()
            self.telemetry = None
