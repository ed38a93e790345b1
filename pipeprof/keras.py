"""``PipeprofCallback``: pipeprof's measurements inside your own Horovod ``model.fit``.

    import horovod.tensorflow.keras as hvd
    from pipeprof.keras import PipeprofCallback
    hvd.init()
    ...
    model.fit(dataset, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), PipeprofCallback()])

Run it under ``pipeprof watch -- horovodrun -np 4 python train.py`` to see the live dashboard;
the callback finds the launcher through ``PIPEPROF_STREAM``. Without ``watch``, pass
``run_dir=`` and it writes the same records to ``RUN_DIR/stream/rankN.jsonl``.

How input wait is measured inside ``fit``: Keras pulls the next batch from the iterator
inside its compiled train function, out of a callback's sight. The callback wraps the
model's ``train_step`` with a host-side timestamp (a ``tf.py_function``) that runs as soon as
the batch has left the iterator and before the forward pass. Input wait is then the time
from ``on_train_batch_begin`` to that timestamp. It includes Keras's dispatch overhead
(tens of microseconds), and it only works if the train function is traced after the
callback starts, which is the case for the first ``fit`` of a model.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import tensorflow as tf

from pipeprof.records import StepRecord
from pipeprof.telemetry.agent import RankTelemetry
from pipeprof.telemetry.stream import ENV_ADDRESS, ENV_RUN_DIR, ENV_TOKEN, StreamClient

log = logging.getLogger("pipeprof.keras")


def _horovod_ranks() -> tuple[int, int, int, int]:
    """(rank, size, local_rank, local_size) from Horovod if it is initialised, else from the environment."""
    try:
        import horovod.tensorflow as hvd

        if hvd.is_initialized():
            return hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size()
    except ImportError:
        pass  # plain Keras without Horovod: one process
    env = os.environ
    return (int(env.get("HOROVOD_RANK", 0)), int(env.get("HOROVOD_SIZE", 1)),
            int(env.get("HOROVOD_LOCAL_RANK", 0)), int(env.get("HOROVOD_LOCAL_SIZE", 1)))


class PipeprofCallback(tf.keras.callbacks.Callback):
    def __init__(self, *, variant: str = "fit", warmup_steps: int = 5, measure_input_wait: bool = True,
                 run_dir: str | None = None, address: str | None = None, gpu_interval_s: float = 0.1,
                 host_interval_s: float = 0.5) -> None:
        super().__init__()
        self.variant = variant
        self.warmup_steps = warmup_steps
        self.measure_input_wait = measure_input_wait
        self.run_dir = run_dir or os.environ.get(ENV_RUN_DIR)
        self.address = address or os.environ.get(ENV_ADDRESS)
        self.gpu_interval_s, self.host_interval_s = gpu_interval_s, host_interval_s
        self.telemetry: RankTelemetry | None = None
        self.step = 0
        self._t0 = 0.0
        self._entered: float | None = None
        self._batch = 0
        self._wrapped = False
        self.rank = self.size = 0

    # -- the timestamp inside the train step ------------------------------------------------
    def _mark(self, batch_size: tf.Tensor) -> tf.Tensor:
        self._entered = time.perf_counter()
        self._batch = int(batch_size)
        return batch_size

    def _wrap_train_step(self) -> None:
        model = self.model
        if self._wrapped or getattr(model, "_pipeprof_wrapped", False):
            return
        original = model.train_step

        def timed_train_step(data: Any) -> Any:
            flat = tf.nest.flatten(data)
            batch = tf.shape(flat[0])[0]
            with tf.control_dependencies(flat):
                marker = tf.py_function(self._mark, [batch], tf.int32)
            with tf.control_dependencies([marker]):
                data = tf.nest.map_structure(tf.identity, data)
            return original(data)

        model.train_step = timed_train_step
        model._pipeprof_wrapped = True
        self._wrapped = True

    # -- Keras hooks ------------------------------------------------------------------------
    def on_train_begin(self, logs: dict | None = None) -> None:
        rank, size, local_rank, local_size = _horovod_ranks()
        self.rank, self.size = rank, size
        if not self.address and not self.run_dir:
            log.warning("pipeprof: no PIPEPROF_STREAM (run under `pipeprof watch`) and no run_dir: records are not kept")
        client = StreamClient(self.address, token=os.environ.get(ENV_TOKEN, ""), rank=rank, fallback_dir=self.run_dir)
        self.telemetry = RankTelemetry(client, rank=rank, local_rank=local_rank, local_size=local_size,
                                       gpu_interval_s=self.gpu_interval_s, host_interval_s=self.host_interval_s).start()
        if rank == 0:
            self.telemetry.put("variant_start", {"np": size, "variant": self.variant, "index": 0, "of_variants": 1})
        if self.measure_input_wait:
            self._wrap_train_step()

    def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
        self._entered = None
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        t2 = time.perf_counter()
        wait_ms = (self._entered - self._t0) * 1e3 if self._entered is not None else float("nan")
        record = StepRecord(np=self.size, variant=self.variant, rank=self.rank, step=self.step,
                            warmup=self.step < self.warmup_steps, input_wait_ms=wait_ms,
                            step_time_ms=(t2 - self._t0) * 1e3, batch_size=self._batch, end_unix_s=time.time())
        self.step += 1
        if self.telemetry is not None:
            self.telemetry.put("step", record.to_dict())

    def on_train_end(self, logs: dict | None = None) -> None:
        if self.telemetry is not None:
            self.telemetry.stop()
            self.telemetry = None
