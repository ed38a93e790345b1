"""An input library with no TensorFlow (``data.library = "fake"``): a variant's pipeline is a
thread that makes a batch every ``PIPEPROF_FAKE_BATCH_MS`` ms into a small prefetch queue (as
tf.data's prefetch does), so a run's true gap is known: max(0, 1 − step / batch time).
``PIPEPROF_FAKE_FAIL_RANK`` makes that rank's pipeline fail as one whose input breaks does;
``PIPEPROF_FAKE_KILL_RANK`` makes that rank die of SIGKILL there, saying nothing."""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from pipeprof.errors import PipeprofError
from pipeprof.rank.identity import identity
from pipeprof.scenario import AugmentConfig, DataConfig, PipelineConfig

ENV_BATCH_MS = "PIPEPROF_FAKE_BATCH_MS"
ENV_FAIL_RANK = "PIPEPROF_FAKE_FAIL_RANK"
ENV_KILL_RANK = "PIPEPROF_FAKE_KILL_RANK"
DEPTH = 2  # batches kept ready


def no_data():  # data.factory of the fake scenarios: the fake pipelines make their own batches
    raise AssertionError("the fake input library never calls its data factory")


class FakePipeline:
    def __init__(self, batch: int, variant: str) -> None:
        self.batch, self.variant = batch, variant

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        rank = identity().rank
        if rank == int(os.environ.get(ENV_FAIL_RANK, "-1")):
            raise PipeprofError(f"fake input failure in variant {self.variant}")
        if rank == int(os.environ.get(ENV_KILL_RANK, "-1")):
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer or a user's kill -9 does
        return self._batches(float(os.environ.get(ENV_BATCH_MS, "0")) / 1e3)

    def _batches(self, every_s: float) -> Iterator[tuple[Any, Any]]:
        ready: queue.Queue = queue.Queue(maxsize=DEPTH)
        stop = threading.Event()

        def make() -> None:
            while not stop.is_set():
                time.sleep(every_s)
                while not stop.is_set():
                    try:
                        ready.put(("x", "y"), timeout=0.05)
                        break
                    except queue.Full:
                        continue

        threading.Thread(target=make, daemon=True, name="fake-pipeline").start()
        try:
            while True:
                yield ready.get()
        finally:  # dropped: its thread stops, as tf.data's do when an iterator is deleted
            stop.set()


class FakeInputs:
    name = "fake"

    def pipeline(
        self,
        data: DataConfig,
        pipe: PipelineConfig,
        *,
        data_root: str,
        shard: tuple[int, int],
        batch_size: int,
        epochs: int | None = None,
        cache_prefix: str = "",
        bad_files: Any = None,
    ) -> FakePipeline:
        return FakePipeline(batch_size, getattr(bad_files, "variant", ""))

    def element_spec(self, pipeline: Any) -> Any:
        return ("fake batch", pipeline.batch)

    def spec_of(self, batch_size: int, input_shape: tuple[int, int, int]) -> Any:
        return ("fake batch", batch_size)

    def synthetic_batch(self, spec: Any, num_classes: int, seed: int = 0) -> tuple[Any, Any]:
        return ("noise", "labels")

    def restartable(self, pipe: PipelineConfig) -> bool:
        return True

    def epoch_elements(
        self, data: DataConfig, pipe: PipelineConfig, data_root: str, shard: tuple[int, int]
    ) -> int | None:
        return None

    def batch_augment(self, augment: AugmentConfig, size: int) -> Callable[[Any, Any], Any]:
        return lambda x, y: (x, y)
