"""pipeprof in your own Horovod Keras training script: two lines.

    import pipeprof.keras as pk
    dataset = pk.instrument(dataset)                       # before model.fit
    model.fit(dataset, ..., callbacks=[..., pk.PipeprofCallback()])

Outside pipeprof both change nothing: ``instrument`` returns the dataset itself and the
callback does nothing. Under ``pipeprof watch -- CMD`` the callback streams every step to the
live dashboard. Under ``pipeprof compare --np 1,2 -- python train.py ARGS`` (one launch per
worker count) ``instrument`` makes the dataset's synthetic twin (your dataset itself is
returned untouched) and the callback measures the twin alone, then your pipeline in rounds
against it, and ends ``fit`` once the gap is known (``pipeprof.rank.fit``). Under ``compare --ablation``, ``instrument`` measures
each transformation of your dataset alone (``pipeprof.data.chain``), writes the figures to the
run directory, and ends the script there: no model is trained in that launch.

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
import os
import sys
import time
from typing import TYPE_CHECKING, Any, cast

import tensorflow as tf

from pipeprof.errors import PipeprofError
from pipeprof.launch.job import ENV_SCRIPT_JOB, ERROR_TAG, ScriptJob
from pipeprof.rank.identity import identity
from pipeprof.records import StepRecord
from pipeprof.telemetry.agent import RankTelemetry
from pipeprof.telemetry.stream import ENV_ADDRESS, ENV_RUN_DIR, ENV_TOKEN, StreamClient

if TYPE_CHECKING:
    from pipeprof.rank.fit import FitMeasurement

log = logging.getLogger("pipeprof.keras")
# what the wrapped train step adds to its logs, taken out again before any callback sees them
ENTERED, BATCH = "_pipeprof_batch_entered_unix_s", "_pipeprof_batch_size"
ADD_INSTRUMENT = "add `dataset = pipeprof.keras.instrument(dataset)` before model.fit"


def _job() -> ScriptJob | None:
    text = os.environ.get(ENV_SCRIPT_JOB)
    return ScriptJob.decode(text) if text else None


def _attached_engine():
    """The training engine the script started (Horovod after ``hvd.init()``), else None."""
    from pipeprof.rank import engine as engines

    try:
        engine = engines.get()
    except (ImportError, PipeprofError):
        return None  # plain Keras without Horovod: one process
    return engine if engine.attached() else None


def _mirrored_engine(model: Any, job: ScriptJob):
    """Under ``--engine mirrored``: the engine of the MirroredStrategy the script built its
    model under, checked to drive the replicas compare asked for."""
    from pipeprof.rank.mirrored_engine import MirroredEngine

    strategy = model.distribute_strategy
    if not isinstance(strategy, tf.distribute.MirroredStrategy):
        _fail(
            "--engine mirrored: the script must build and compile its model under "
            "tf.distribute.MirroredStrategy().scope(), and it did not"
        )
    if strategy.num_replicas_in_sync != job.np:
        _fail(
            f"--engine mirrored: np={job.np} but the script's MirroredStrategy has "
            f"{strategy.num_replicas_in_sync} replica(s): make it with the devices pipeprof "
            "gives the script (all it sees: MirroredStrategy() with no devices named)"
        )
    return MirroredEngine.attach(strategy)


def _make_replicas() -> None:
    """Under ``compare --engine mirrored -- CMD`` on a host without GPUs: the CPU split into
    the job's np logical devices, now, before the script's strategy looks for devices
    (importing pipeprof.keras is the script's first use of it)."""
    job = _job()
    if job is None or job.engine != "mirrored":
        return
    from pipeprof.rank.mirrored_engine import make_replicas

    try:
        make_replicas(tf, job.np)
    except PipeprofError as exc:
        _fail(exc.message)


def _ranks() -> tuple[int, int, int, int]:
    """(rank, size, local_rank, local_size) from the engine if the script started it, else
    from what the launcher put in the environment (``rank.identity``)."""
    engine = _attached_engine()
    if engine is not None:
        return engine.rank, engine.size, engine.local_rank, engine.local_size
    me = identity()
    return me.rank, me.size, me.local_rank, me.local_size


def _fail(message: str) -> None:
    """End the script with pipeprof's one line (the launcher shows it, no traceback)."""
    print(identity().error_line(ERROR_TAG, message), file=sys.stderr, flush=True)
    raise SystemExit(2)


def instrument(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """Your training dataset, as pipeprof needs it: itself outside pipeprof. A tf.data
    pipeline, a Keras ``Sequence`` (returned as it is) or a Python generator of batches (its
    first batch read, then put back): whatever you pass to ``fit``."""
    job = _job()
    if job is None:
        return dataset
    batches = isinstance(dataset, tf.keras.utils.Sequence) or inspect.isgenerator(dataset)
    if not isinstance(dataset, tf.data.Dataset) and not batches:
        _fail(
            "pipeprof.keras.instrument takes what model.fit reads: a tf.data.Dataset, a Keras "
            f"Sequence or a generator of batches; got {type(dataset).__name__}"
        )
    if job.mode == "ablate":
        if batches:
            _fail(
                f"--ablation splits a tf.data pipeline into its stages; a {type(dataset).__name__} "
                "has none to split: build the input with tf.data (tf.data.Dataset.from_generator "
                "wraps a generator), or compare without --ablation"
            )
        from pipeprof.data.ablate_script import ablate_and_exit

        ablate_and_exit(dataset, job)
    from pipeprof.rank.fit import instrumented, instrumented_batches

    if not batches:
        return instrumented(dataset)
    try:
        return instrumented_batches(dataset)
    except StopIteration:
        _fail("the generator given to pipeprof.keras.instrument yielded no batch")


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
        self.run_dir = run_dir or os.environ.get(ENV_RUN_DIR)
        self.address = address or os.environ.get(ENV_ADDRESS)
        self.gpu_interval_s, self.host_interval_s = gpu_interval_s, host_interval_s
        self.telemetry: RankTelemetry | None = None
        self.measurement: FitMeasurement | None = None  # under pipeprof compare
        self.step = 0
        self._t0 = self._prev_end = self._prev_cpu = 0.0
        self._entered: tf.Tensor | None = None  # the step's timestamp (unix seconds)
        self._batch_size: tf.Tensor | None = None  # and its batch's size
        self._t0_unix = 0.0
        self._batch = 0
        self.rank = self.size = 0

    @property
    def active(self) -> bool:
        """Whether pipeprof is listening (a launcher's stream, a run directory, or a compare job)."""
        return bool(self.address or self.run_dir)

    # -- the timestamp inside the train step, and the source of each step's batch ----------
    def _wrap_train_step(self) -> None:
        model = self.model
        if getattr(model, "_pipeprof_wrapped", False) or getattr(model, "_jit_compile", False):
            return  # XLA compiles no host timestamp: input wait is then not measured
        original = model.train_step

        def timed_train_step(data: Any) -> Any:
            flat = tf.nest.flatten(data)
            with tf.control_dependencies(flat):  # the batch has left the iterator
                entered = tf.timestamp()
            logs = original(data)
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

        model.train_step = timed_train_step
        model._pipeprof_wrapped = True

    def _wrap_train_function(self) -> None:
        """Keras calls ``model.train_function(iterator)`` once a step (fit has just made it): the
        wrapper hands it the twin's iterator on the twin's steps, and takes the timestamp out
        of the step's logs before any callback sees them."""
        model = self.model
        original = getattr(model.train_function, "_pipeprof_original", model.train_function)
        from pipeprof.rank.fit import CHOICE

        def train_function(iterator: Any) -> Any:
            logs = original(CHOICE.iterator(iterator))
            if isinstance(logs, dict):
                self._entered, self._batch_size = logs.pop(ENTERED, None), logs.pop(BATCH, None)
            return logs

        cast(Any, train_function)._pipeprof_original = original  # a function attribute
        model.train_function = train_function

    # -- Keras hooks ------------------------------------------------------------------------
    def on_train_begin(self, logs: dict | None = None) -> None:
        if not self.active:
            return  # outside pipeprof: nothing to measure, nothing started
        rank, size, local_rank, local_size = _ranks()
        self.rank, self.size = rank, size
        self.host = identity().host
        job = _job()
        if job is not None and job.mode == "compare":
            self._start_compare(job)
        client = StreamClient(
            self.address, token=os.environ.get(ENV_TOKEN, ""), rank=rank, fallback_dir=self.run_dir
        )
        self.telemetry = RankTelemetry(
            client,
            rank=rank,
            local_rank=local_rank,
            local_size=local_size,
            size=size,
            gpu_interval_s=self.gpu_interval_s,
            host_interval_s=self.host_interval_s,
        ).start()
        if rank == 0 and self.measurement is None:
            self.telemetry.put(
                "variant_start", {"np": size, "variant": self.variant, "index": 0, "of_variants": 1}
            )
        if self.measure_input_wait:
            self._wrap_train_step()
        if self.measure_input_wait or self.measurement is not None:
            self._wrap_train_function()
        self._prev_end, self._prev_cpu = time.perf_counter(), time.process_time()

    def _start_compare(self, job: ScriptJob) -> None:
        from pipeprof.rank.fit import CHOICE, FitMeasurement

        if not CHOICE.instrumented:
            _fail(f"the script calls model.fit without pipeprof.keras.instrument: {ADD_INSTRUMENT}")
        if (
            getattr(self.model, "_steps_per_execution", None) is not None
            and int(self.model._steps_per_execution.numpy()) != 1  # a (mirrored) variable
        ):
            _fail(
                "model.compile(steps_per_execution > 1) runs several steps per call: pipeprof times each step, so "
                "compile with steps_per_execution=1 when measuring"
            )

        if job.engine == "mirrored":
            engine = _mirrored_engine(self.model, job)
            CHOICE.distribute = engine.strategy.experimental_distribute_dataset
        else:
            engine = _attached_engine()
        if engine is None:
            _fail(
                "the script did not start Horovod (hvd.init()) before model.fit: pipeprof compares its ranks "
                "through it"
            )

        def stream(record: StepRecord) -> None:
            if self.telemetry is not None:
                self.telemetry.put("step", record)

        self.measurement = FitMeasurement(job, engine=engine, on_record=stream)

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if not self.active:
            return
        if self.measurement is not None:
            self.measurement.before_step()
        self._entered = None
        self._t0, self._t0_unix = time.perf_counter(), time.time()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if not self.active:
            return
        t2 = time.perf_counter()
        wait_ms = (
            (float(self._entered) - self._t0_unix) * 1e3
            if self._entered is not None
            else float("nan")
        )
        if self._batch_size is not None:
            self._batch = int(self._batch_size)
        if self.measurement is not None:
            # a step runs from the end of the previous one, as in pipeprof's own loop
            step_ms, self._prev_end = (t2 - self._prev_end) * 1e3, t2
            cpu = time.process_time()
            cpu_ms, self._prev_cpu = (cpu - self._prev_cpu) * 1e3, cpu
            logs = logs or {}
            if self.measurement.after_step(
                step_ms,
                wait_ms,
                self._batch,
                float(logs.get("loss", float("nan"))),
                float(logs.get("accuracy", float("nan"))),
                cpu_ms,
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
            step_time_ms=(t2 - self._t0) * 1e3,
            batch_size=self._batch,
            end_unix_s=time.time(),
            host=self.host,
        )
        self.step += 1
        if self.telemetry is not None:
            self.telemetry.put("step", record)

    def on_train_end(self, logs: dict | None = None) -> None:
        if self.measurement is not None:
            self.measurement.fit_ended()
        if self.telemetry is not None:
            self.telemetry.stop()
            self.telemetry = None


_make_replicas()
