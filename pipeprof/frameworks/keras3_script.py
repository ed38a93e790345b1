"""pipeprof in a user's own Keras 3 script (``pipeprof.keras`` where Keras 3 is installed), on
JAX or TensorFlow, with the lines of Keras 2's (``frameworks.keras2_script``).

Inside ``fit``: Keras 3 calls its train function once an execution with an iterator of
batches, and the train function takes ``steps_per_execution`` batches from it in Python, each
handed to the step Keras compiled (on JAX ``train_function(state, iterator)``; on TensorFlow
``train_function(iterator)``, which takes that path for an iterator that is not one of
TensorFlow's, and otherwise pulls the batch inside its own graph). The callback wraps the
train function so that the iterator it gets is pipeprof's: each take is timed as it leaves
the pipeline, which is the step's input wait, apart from the step and under the model's own
``jit_compile`` (XLA stays as the script set it); and on the twin's steps the batch is the
synthetic twin's: the first batch Keras's iterator gave, already laid out on the devices as
Keras lays every batch out, handed again with no input work. A step ends when its logs are
ready (the callback reads them).

On torch, Keras's trainer takes each batch from its epoch iterator before it calls the train
function (``steps_per_execution`` is 1 there): the callback gives that epoch iterator
pipeprof's iterator (``keras3_compat.torch_epoch_iterator``), each take timed, and the twin's
batch, put on the device as Keras puts a batch, on the twin's steps. Keras 3.15.1 trains
there in one process: its torch trainer has no DDP, so a compare at np >= 2 stops with one
line saying so.

A custom loop is measured as on Keras 2 (``rank.loop``): ``for batch in instrument(dataset)``
and ``with step() as s``; on JAX, where a call returns before its work is done, the step ends
once ``s.loss`` (or a ``step_fn``'s result) is ready.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import keras

from pipeprof.frameworks import keras3_compat
from pipeprof.rank import in_script
from pipeprof.rank.identity import identity
from pipeprof.rank.script_measure import COMPILES, SOURCE, SYNTHETIC
from pipeprof.records import StepRecord
from pipeprof.telemetry.agent import RankTelemetry

if TYPE_CHECKING:
    from pipeprof.rank.script_measure import FitMeasurement

TORCH = "torch"  # Keras's backend (KERAS_BACKEND), not pipeprof's framework of that name
ADD_INSTRUMENT = "add `dataset = pipeprof.keras.instrument(dataset)` before model.fit"
WRAPPED = "_pipeprof_train_function"  # set on a model whose train function is wrapped
# JAX's compile of a function: tracing it, lowering it, and XLA's compile (jax._src.dispatch)
JAX_COMPILE_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
}


def watch_compiles() -> None:
    """On JAX, count its compiles' seconds (``COMPILES``), which a step's time leaves out."""
    if keras.backend.backend() == "jax":
        import jax.monitoring

        COMPILES.watch(jax.monitoring.register_event_duration_secs_listener, JAX_COMPILE_EVENTS)


class Registered:
    """The datasets ``instrument`` was given in this process (fit needs one)."""

    count = 0


def instrument(dataset: Any) -> Any:
    """Your training dataset, as pipeprof needs it: itself outside pipeprof. Whatever ``fit``
    reads (a tf.data pipeline, a ``keras.utils.PyDataset``, arrays, a generator): returned as it
    is, since ``fit``'s batches are timed as its train function takes them. For a custom loop:
    a tf.data pipeline, a tf.distribute dataset, or any iterable of batches, whose iteration by
    the loop is measured (mark its steps with ``step()``)."""
    job = in_script.job()
    if job is None and not any(in_script.listening()):
        return dataset
    if job is not None and job.mode == "ablate":
        if not _is_tf_data(dataset):
            in_script.fail(
                f"--ablation splits a tf.data pipeline into its stages; a {type(dataset).__name__} "
                "has none to split: compare without --ablation"
            )
        from pipeprof.data.ablate_script import ablate_and_exit

        ablate_and_exit(dataset, job)
    Registered.count += 1
    watch_compiles()
    from pipeprof.rank import loop

    if _is_tf_data(dataset):
        return loop.loop_dataset(dataset)
    if _is_tf_distributed(dataset):
        return loop.distributed(dataset)
    if keras.backend.backend() == TORCH:
        from torch.utils.data import DataLoader

        if isinstance(dataset, DataLoader):
            return loop.class_kept(dataset)  # fit on torch takes a DataLoader by its class
        if isinstance(dataset, keras.utils.PyDataset):
            return dataset  # fit's takes are timed by the callback; a copy would not pickle
    return loop.LoopDataset(dataset, None)


def _is_tf_data(dataset: Any) -> bool:
    import sys

    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(dataset, tf.data.Dataset)


def _is_tf_distributed(dataset: Any) -> bool:
    import sys

    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(dataset, tf.distribute.DistributedDataset)


def step() -> Any:
    """A custom loop's training step, marked (``rank.loop.StepMark``)."""
    from pipeprof.rank.loop import StepMark

    return StepMark()


def step_fn(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, a custom loop's training step, with each call marked as ``step()`` marks it."""
    from pipeprof.rank.loop import step_fn as marked

    return marked(fn)


def rows(batch: Any) -> int:
    """The samples of a batch this process holds: its first array's rows (a JAX array laid
    out over several processes' devices counts this process's shards; a tf.distribute
    PerReplica value, its replicas' together)."""
    leaf = next(iter(keras.tree.flatten(batch)), None)
    values = getattr(leaf, "values", None)
    if isinstance(values, tuple):  # PerReplica
        return sum(int(v.shape[0]) for v in values)
    shards = getattr(leaf, "addressable_shards", None)
    if shards is not None and not getattr(leaf, "is_fully_addressable", True):
        held = {(s.index[0].start, s.index[0].stop): int(s.data.shape[0]) for s in shards}
        return sum(held.values())
    shape = getattr(leaf, "shape", None)
    return int(shape[0]) if shape is not None and len(shape) else 1


class Timed:
    """The iterator the train function takes its batches from: Keras's, or on the twin's
    steps the twin's; each take timed."""

    def __init__(self, source: Iterator[Any]) -> None:
        self.source = source
        self.waited_s = 0.0
        self.taken = 0
        self.samples = 0

    def __iter__(self) -> Timed:
        return self

    def __next__(self) -> Any:
        t0 = time.perf_counter()
        batch = next(self.source)
        self.waited_s += time.perf_counter() - t0
        self.taken += 1
        if not self.samples:
            self.samples = rows(batch)
        return batch

    def took(self) -> tuple[float, int]:
        """The seconds waited and the takes since the last call (a step's, or an
        execution's: a torch fit keeps one iterator over many steps)."""
        waited, taken = self.waited_s, self.taken
        self.waited_s, self.taken = 0.0, 0
        return waited, taken


class Twin:
    """The synthetic twin inside Keras 3's ``fit``: the first batch Keras's iterator gave,
    handed again on the twin's steps (``SOURCE``)."""

    def __init__(self) -> None:
        self.batch: Any = None
        self.made = False

    def source(self, keras_iterator: Iterator[Any]) -> Iterator[Any]:
        if SOURCE.source != SYNTHETIC:
            return keras_iterator
        if not self.made:
            self.batch, self.made = next(keras_iterator), True  # StopIteration: nothing read
        return itertools.repeat(self.batch)


class TorchSource:
    """On torch, the iterator a fit's epoch takes every batch from. Keras's torch trainer
    takes a step's batch before the step's callbacks, so the measurement's plan for the step
    is asked here, at the take (``before``), and the source chosen by it: Keras's iterator,
    made at the first take that needs it (its DataLoader workers start inside a measured
    wait, and none prefetches while the twin runs), or the twin's batch, made from the first
    batch Keras's gave and put on the device as Keras's torch backend puts every batch
    (``convert_to_tensor``)."""

    def __init__(
        self, twin: Twin, make: Callable[[], Iterator[Any]], before: Callable[[], None]
    ) -> None:
        self.twin, self.make, self.before = twin, make, before
        self.keras_iterator: Iterator[Any] | None = None

    def __iter__(self) -> TorchSource:
        return self

    def _keras_next(self) -> Any:
        if self.keras_iterator is None:
            self.keras_iterator = self.make()
        return next(self.keras_iterator)

    def __next__(self) -> Any:
        self.before()
        if SOURCE.source != SYNTHETIC:
            return self._keras_next()
        twin = self.twin
        if not twin.made:
            first = self._keras_next()  # StopIteration: nothing read
            twin.batch = keras.tree.map_structure(keras.ops.convert_to_tensor, first)
            twin.made = True
        return twin.batch


class PipeprofCallback(keras.callbacks.Callback):
    """pipeprof's callback for ``fit`` (Keras 3): outside pipeprof it does nothing."""

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
        self.twin = Twin()
        self.timed: Timed | None = None  # the execution's takes (on torch, the epoch's)
        self.epoch_iterator: Any = None  # on torch: fit's, given pipeprof's iterator
        self.step = 0
        self._prev_end = self._prev_cpu = self._t0 = 0.0
        self._compiled = 0.0  # COMPILES's seconds when the step began
        self.rank = self.size = 0
        self.host = ""

    @property
    def active(self) -> bool:
        return bool(self.address or self.run_dir)

    def _wrap_train_function(self) -> None:
        """The model's train function, handed pipeprof's iterator (``Timed``) each call."""
        model = self.model
        original = getattr(model, WRAPPED, None) or model.train_function
        setattr(model, WRAPPED, original)
        backend = keras.backend.backend()

        def taking(iterator: Iterator[Any]) -> Timed:
            self.timed = Timed(self.twin.source(iter(iterator)))
            return self.timed

        if backend == TORCH:
            epoch_iterator = keras3_compat.torch_epoch_iterator()
            if epoch_iterator is None:
                in_script.fail(
                    f"pipeprof.keras.PipeprofCallback found no epoch iterator in Keras "
                    f"{keras.__version__}'s torch fit: a callback of model.fit measures it"
                )
            from pipeprof.rank import loop

            own = epoch_iterator._get_iterator

            def torch_iterator() -> Timed:
                source = TorchSource(self.twin, lambda: loop.own_iterator(own()), self._before)
                self.timed = Timed(source)
                return self.timed

            epoch_iterator._get_iterator = torch_iterator
            self.epoch_iterator = epoch_iterator
            return
        if backend == "jax":

            def jax_train_function(state: Any, iterator: Any) -> Any:
                return original(state, taking(iterator))

            model.train_function = jax_train_function
        elif backend == "tensorflow":

            def tf_train_function(iterator: Any) -> Any:
                timed = taking(iterator)
                # the first take here: an iterator that is empty ends the epoch as Keras's
                # own does (StopIteration), not inside the train function's loop
                first = next(timed)
                return original(itertools.chain((first,), timed))

            model.train_function = tf_train_function
        else:
            in_script.fail(
                f"pipeprof.keras.PipeprofCallback measures Keras 3 on JAX, TensorFlow or torch; "
                f"this script runs Keras on {backend}"
            )

    def _before(self) -> None:
        """The measurement's plan for the step about to start (its source, its phase)."""
        if self.measurement is not None:
            self.measurement.before_step()

    def on_train_begin(self, logs: dict | None = None) -> None:
        if not self.active:
            return
        self.twin, self.timed = Twin(), None  # this fit's own: its first batch
        rank, size, _, _ = in_script.ranks()
        self.rank, self.size, self.host = rank, size, identity().host
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
        if self.measure_input_wait or self.measurement is not None:
            self._wrap_train_function()
        watch_compiles()
        self._prev_end, self._prev_cpu = time.perf_counter(), time.process_time()

    def _start_compare(self, job: Any) -> None:
        from pipeprof.rank.script_measure import FitMeasurement

        if not Registered.count:
            in_script.fail(
                f"the script calls model.fit without pipeprof.keras.instrument: {ADD_INSTRUMENT}"
            )
        if keras.backend.backend() == TORCH:
            engine = torch_engine(job)
        else:
            strategy = getattr(self.model, "distribute_strategy", None)  # TensorFlow's backend
            engine = in_script.compare_engine(
                job, strategy, "the script must build and compile its model under"
            )
        self.measurement = FitMeasurement(
            job, engine=engine, on_record=in_script.streamer(lambda: self.telemetry)
        )
        self.size = self.measurement.size

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        """A step runs from the end of the previous one within an epoch: what fit did between
        epochs (validation, other callbacks) is no step's."""
        if self.active:
            self._prev_end, self._prev_cpu = time.perf_counter(), time.process_time()
            self._compiled = COMPILES.seconds

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        if not self.active:
            return
        if keras.backend.backend() == TORCH:
            # the batch was taken before this call (TorchSource asked the plan then): the
            # step began at the previous one's end
            self._t0 = self._prev_end
            return
        self._before()
        self.timed = None
        self._t0 = time.perf_counter()
        self._compiled = COMPILES.seconds

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if not self.active:
            return
        logs = logs or {}
        loss = _number(logs.get("loss"))  # read: the step's work is done
        t2 = time.perf_counter()
        compiled_ms = (COMPILES.seconds - self._compiled) * 1e3  # no step's work
        timed = self.timed
        waited, taken = timed.took() if timed is not None else (math.nan, 1)
        n = max(1, taken)
        wait_ms = waited * 1e3 / n
        samples = timed.samples if timed is not None else 0
        if self.measurement is not None:
            # a step runs from the end of the previous one, as in pipeprof's own loop; an
            # execution of n steps gives each its share
            step_ms = ((t2 - self._prev_end) * 1e3 - compiled_ms) / n
            cpu = time.process_time()
            cpu_ms = ((cpu - self._prev_cpu) * 1e3 - compiled_ms) / n
            done = self.measurement.after_step(
                step_ms,
                wait_ms,
                samples,
                loss,
                _number(logs.get("accuracy", logs.get("sparse_categorical_accuracy"))),
                cpu_ms,
                steps=n,
            )
            # the next step starts here: what the measurement did in between is no step's
            self._prev_end, self._prev_cpu = time.perf_counter(), time.process_time()
            if done:
                self.model.stop_training = True
            return
        record = StepRecord(
            np=self.size,
            variant=self.variant,
            rank=self.rank,
            step=self.step,
            warmup=self.step < self.warmup_steps,
            input_wait_ms=wait_ms,
            step_time_ms=((t2 - self._t0) * 1e3 - compiled_ms) / n,
            batch_size=samples,
            end_unix_s=time.time(),
            host=self.host,
        )
        self.step += n
        if self.telemetry is not None:
            self.telemetry.put("step", record)
        self._prev_end, self._prev_cpu = time.perf_counter(), time.process_time()

    def on_train_end(self, logs: dict | None = None) -> None:
        if self.epoch_iterator is not None:  # Keras's own _get_iterator again
            del self.epoch_iterator._get_iterator
            self.epoch_iterator = None
        original = getattr(self.model, WRAPPED, None)
        if original is not None:  # a later fit of the model gets Keras's own again
            self.model.train_function = original
            setattr(self.model, WRAPPED, None)
        if self.measurement is not None:
            self.measurement.fit_ended()
        if self.telemetry is not None:
            self.telemetry.stop()
            self.telemetry = None


def torch_engine(job: Any) -> Any:
    """The distribution a compare of Keras's ``fit`` on torch measures through: ddp in one
    process, which starts no process group (Keras trains there alone); a compare at np >= 2
    stops with one line, since Keras's torch trainer has no DDP."""
    from pipeprof import plugins

    dist = in_script.distribution_of(job)
    if getattr(dist, "keras_backend", None) != TORCH:
        in_script.fail(
            f"Keras {keras.__version__} on torch: compare this script with --engine ddp, not "
            f"{dist.name}"
        )
    if job.np > 1:
        why = (
            "pipeprof measures it in one process"
            if keras3_compat.torch_distribution()
            else "its torch backend has no keras.distribution and its trainer starts no DDP"
        )
        in_script.fail(
            f"Keras {keras.__version__}'s fit on torch trains in one process ({why}): compare "
            "it at --np 1, or train with DDP in your own loop (pipeprof.torch)"
        )
    return plugins.make(plugins.DISTRIBUTION, dist.name)


def _number(value: Any) -> float:
    try:
        return float(value) if value is not None else math.nan
    except (TypeError, ValueError):
        return math.nan
