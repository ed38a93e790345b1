"""Keras 2 on TensorFlow as a framework (``train.framework = "keras2"``), and a rank's device
set up the same way for pipeprof's ranks and for the benchmarks that compare against them: a
GPU pinned by local rank with memory growth, or CPU thread pools sized to the rank's share of
the cores; and the emulated device of ``train.device = "emulated:MS"``."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any, ClassVar

from pipeprof.frameworks import Step, digest
from pipeprof.launch import topology
from pipeprof.models import build_model
from pipeprof.scenario import TrainConfig

HOROVOD_DEFAULT_CYCLE_MS = "1"  # Horovod's own, where HOROVOD_CYCLE_TIME is not set


def setup_devices(tf, distribution, intra_op_threads: int = 0) -> str:
    """Pin this rank to its GPU by local rank (memory growth on); size CPU thread pools."""
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        # With CUDA_VISIBLE_DEVICES already narrowed to one GPU per rank, there is only one.
        tf.config.set_visible_devices(gpus[distribution.local_rank % len(gpus)], "GPU")
        return f"GPU:{distribution.local_rank % len(gpus)}"
    threads = intra_op_threads or topology.cores_per_rank(distribution.local_size)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    return f"CPU ({threads} intra-op threads)"


def emulated_step(tf, distribution, device_ms: float, gradient_floats: int, seed: int = 0):
    """A model step that keeps the device busy for ``device_ms`` without using the CPU (the
    rank sleeps, as its host thread would while a GPU computes), then allreduces a gradient
    of the model's size through the distribution (Horovod's allreduce) for real.

    The sleep varies by up to half a Horovod cycle (``HOROVOD_CYCLE_TIME``) either way, its
    mean ``device_ms``. A fixed sleep phase-locks the step to Horovod's coordination cycle:
    each allreduce then waits the same part of a cycle for tens of steps, and that part
    depends on the few tenths of a ms the step spends besides the sleep, so two variants
    (twin and real) waited different amounts for reasons that are not theirs. Measured at
    np=1, 30 ms and a 5 ms cycle: rounds of 28 steps at a median of either 30.6 or 35.6 ms,
    and a 5.6% gap on a pipeline that costs nothing (docs/measurement.md). With the spread,
    each step's wait is an independent draw over the cycle, the same for every variant."""
    import random

    gradient = tf.zeros([gradient_floats], tf.float32)
    loss = tf.constant(0.0)
    cycle_ms = float(os.environ.get("HOROVOD_CYCLE_TIME", HOROVOD_DEFAULT_CYCLE_MS))
    spread = random.Random(seed)

    def step(x, y):
        time.sleep(max(0.0, device_ms + cycle_ms * (spread.random() - 0.5)) / 1e3)
        reduced = distribution.allreduce(gradient, name="pipeprof_emulated_gradient")
        return {"loss": loss + tf.reduce_sum(reduced[:1]), "accuracy": loss}

    return step


class Keras2:
    """Keras 2 on TensorFlow 2.15 (``tf.keras``), the framework of Horovod's Keras API: the
    built-in models (``models.BUILTIN_MODELS``) or the user's, an SGD or Adam optimizer made
    under the distribution's scope and wrapped by it, Keras's own ``train_step`` compiled by
    ``tf.function`` (or run on every replica by a tf.distribute strategy)."""

    name = "keras2"
    inputs: ClassVar[tuple[str, ...]] = ("tfdata",)

    @staticmethod
    def installed() -> bool:
        """TensorFlow before 2.16 is installed, whose ``tf.keras`` is Keras 2."""
        for dist in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu"):
            try:
                major, minor = (int(p) for p in metadata.version(dist).split(".")[:2])
            except (metadata.PackageNotFoundError, ValueError):
                continue
            return (major, minor) < (2, 16)
        return False

    backend = "tensorflow"

    def __init__(self) -> None:
        import tensorflow as tf

        self.tf = tf
        self.version = str(getattr(tf.keras, "__version__", tf.__version__))

    def setup(self, distribution: Any, intra_op_threads: int = 0) -> str:
        return setup_devices(self.tf, distribution, intra_op_threads)

    def build(
        self,
        model: str,
        input_shape: tuple[int, int, int],
        num_classes: int,
        train: TrainConfig,
        learning_rate: float,
        distribution: Any,
    ) -> Any:
        tf = self.tf
        with distribution.scope():  # tf.distribute's strategy owns what is made here
            built = build_model(model, input_shape, num_classes)
            optimizer = (
                tf.keras.optimizers.SGD(learning_rate=learning_rate, momentum=train.momentum)
                if train.optimizer == "sgd"
                else tf.keras.optimizers.Adam(learning_rate=learning_rate)
            )
            built.compile(
                optimizer=distribution.wrap_optimizer(optimizer),
                loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"],
            )
        return built

    def train_step(
        self, model: Any, distribution: Any, prepare: Callable[[Any, Any], Any] | None = None
    ) -> Step:
        def replica_step(x: Any, y: Any) -> Any:
            return model.train_step((prepare(x, y) if prepare else x, y))

        runner = distribution.replica_runner()
        return runner(replica_step) if runner is not None else self.tf.function(replica_step)

    def compiled(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return self.tf.function(fn)

    def emulated_step(
        self, distribution: Any, device_ms: float, parameters: int, seed: int = 0
    ) -> Step:
        return emulated_step(self.tf, distribution, device_ms, parameters, seed=seed)

    def parameters(self, model: Any) -> int:
        return int(sum(int(self.tf.size(v)) for v in model.trainable_variables))

    def on_device(self, make: Callable[[], Any]) -> Any:
        tf = self.tf
        with tf.device("/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0"):
            return make()

    def variables(self, model: Any) -> Any:
        return model.variables

    def optimizer_variables(self, model: Any) -> Any:
        return model.optimizer.variables

    def weights_digest(self, model: Any) -> str:
        return digest(v.numpy() for v in model.weights)

    def set_learning_rate(self, model: Any, rate: float) -> None:
        model.optimizer.learning_rate.assign(rate)

    def learning_rate(self, model: Any) -> Callable[[], Any]:
        return lambda: model.optimizer.learning_rate
