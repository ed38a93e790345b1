"""Keras 3 as a framework (``train.framework = "keras3"``), on the backend its distribution
asks for: JAX (``keras.distribution``: ``data_parallel``) or TensorFlow (tf.distribute:
``mirrored``). The backend is Keras's ``KERAS_BACKEND``, set before Keras is first imported
(a distribution's ``start`` sets it for pipeprof's own ranks).

A step is Keras's own, compiled as ``fit`` compiles it: on JAX, the train function Keras makes
(``jax.jit`` of its stateless ``train_step``, under the model's ``jit_compile``), called from
pipeprof's loop with the training state kept between steps; on TensorFlow, ``train_step`` in a
``tf.function``, run on every replica by the strategy. The Keras internals this reaches are in
``keras3_compat``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib import metadata
from typing import Any, ClassVar

import numpy

from pipeprof.errors import PipeprofError
from pipeprof.frameworks import Step, digest, keras3_compat
from pipeprof.models import build_model
from pipeprof.scenario import TrainConfig


class Model:
    """A Keras 3 model and, on JAX, its training state between steps (trainable,
    non-trainable, optimizer and metrics variables' values), which Keras's stateless step
    takes and returns; the variables hold it again whenever pipeprof reads or changes them."""

    def __init__(self, model: Any, backend: str) -> None:
        self.model, self.backend = model, backend
        self.state: tuple[Any, ...] | None = None  # JAX, after the first step

    def synced(self) -> Any:
        """The model, its variables holding the state the steps left."""
        if self.state is not None:
            keras3_compat.write_state(self.model, self.state)
        return self.model

    def reread(self) -> None:
        """After a change to the variables: the steps' state read from them again."""
        if self.state is not None:
            self.state = keras3_compat.read_state(self.model)


class Keras3:
    name = "keras3"
    inputs: ClassVar[tuple[str, ...]] = ("tfdata", "grain")

    @staticmethod
    def installed() -> bool:
        """Keras 3 is the ``keras`` package installed (``auto`` prefers the framework that is)."""
        try:
            return metadata.version("keras").startswith("3.")
        except metadata.PackageNotFoundError:
            return False

    def __init__(self) -> None:
        import keras

        self.keras = keras
        self.backend = keras.backend.backend()
        self.version = keras.__version__

    def setup(self, distribution: Any, intra_op_threads: int = 0) -> str:
        if self.backend == "tensorflow":
            import tensorflow as tf

            from pipeprof.frameworks.keras2 import setup_devices

            return setup_devices(tf, distribution, intra_op_threads)
        if self.backend == "jax":
            import jax

            kind = jax.default_backend().upper()
            return f"{kind} ({len(jax.local_devices())} device(s), Keras {self.keras.__version__} on JAX)"
        raise PipeprofError(
            f"train.framework keras3: pipeprof's own ranks train on JAX or TensorFlow; "
            f"KERAS_BACKEND is {self.backend}"
        )

    def build(
        self,
        model: str,
        input_shape: tuple[int, int, int],
        num_classes: int,
        train: TrainConfig,
        learning_rate: float,
        distribution: Any,
    ) -> Model:
        keras = self.keras
        with distribution.scope():
            built = build_model(model, input_shape, num_classes, keras=keras)
            optimizer = (
                keras.optimizers.SGD(learning_rate=learning_rate, momentum=train.momentum)
                if train.optimizer == "sgd"
                else keras.optimizers.Adam(learning_rate=learning_rate)
            )
            built.compile(
                optimizer=distribution.wrap_optimizer(optimizer),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"],
            )
            if self.backend == "tensorflow":  # its variables made now, under the strategy
                keras3_compat.build_for_training(built, input_shape)
        return Model(built, self.backend)

    def train_step(
        self, model: Any, distribution: Any, prepare: Callable[[Any, Any], Any] | None = None
    ) -> Step:
        handle: Model = model
        if self.backend == "jax":
            if prepare is not None:
                raise PipeprofError(
                    "augment.placement = device: Keras 3 on JAX runs no TensorFlow op inside "
                    "its step; use placement batch or image"
                )
            return _JaxStep(handle)
        import tensorflow as tf

        keras_model = handle.model

        def replica_step(x: Any, y: Any) -> Any:
            return keras_model.train_step((prepare(x, y) if prepare else x, y))

        runner = distribution.replica_runner()
        return runner(replica_step) if runner is not None else tf.function(replica_step)

    def compiled(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        if self.backend == "jax":
            import jax

            return jax.jit(fn)
        import tensorflow as tf

        return tf.function(fn)

    def emulated_step(
        self, distribution: Any, device_ms: float, parameters: int, seed: int = 0
    ) -> Step:
        if self.backend == "tensorflow":
            import tensorflow as tf

            from pipeprof.frameworks.keras2 import emulated_step

            return emulated_step(tf, distribution, device_ms, parameters, seed=seed)
        import random

        gradient = numpy.zeros([parameters], numpy.float32)
        spread = random.Random(seed)

        def step(x: Any, y: Any) -> Any:
            # the device's time (no CPU), with a tenth of a ms of spread either way, then the
            # gradient's exchange over the replicas, for real
            time.sleep(max(0.0, device_ms + 0.2 * (spread.random() - 0.5)) / 1e3)
            reduced = distribution.allreduce(gradient, name="pipeprof_emulated_gradient")
            return {"loss": float(numpy.asarray(reduced[:1]).sum()), "accuracy": 0.0}

        return step

    def parameters(self, model: Any) -> int:
        return int(sum(numpy.prod(v.shape) for v in model.model.trainable_variables))

    def on_device(self, make: Callable[[], Any]) -> Any:
        if self.backend == "tensorflow":
            import tensorflow as tf

            with tf.device("/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0"):
                return make()
        return make()  # JAX: the distribution lays the batch out over its devices

    def variables(self, model: Any) -> Any:
        return model.synced().variables

    def optimizer_variables(self, model: Any) -> Any:
        return model.synced().optimizer.variables

    def weights_digest(self, model: Any) -> str:
        """On JAX, each weight's copy on this process's first device (a weight replicated
        over several processes' devices is not whole on any one of them)."""
        values = (v.value for v in model.synced().weights)
        if self.backend == "jax":
            return digest(x.addressable_data(0) for x in values)
        return digest(v.numpy() for v in model.synced().weights)

    def set_learning_rate(self, model: Any, rate: float) -> None:
        model.synced().optimizer.learning_rate.assign(rate)
        model.reread()

    def learning_rate(self, model: Any) -> Callable[[], Any]:
        return lambda: model.synced().optimizer.learning_rate


class _JaxStep:
    """Keras's compiled train function on JAX, called with the state the last step left: its
    first call is Keras's ``train_on_batch``, which builds the model's training state and
    compiles the function (a warm-up step, never measured)."""

    def __init__(self, handle: Model) -> None:
        self.handle = handle

    def __call__(self, x: Any, y: Any) -> Any:
        h = self.handle
        if h.state is None:
            local = keras3_compat.process_local
            logs = h.model.train_on_batch(local(x), local(y), return_dict=True)
            h.state = keras3_compat.read_state(h.model)
            return logs
        logs, h.state = keras3_compat.jax_step(h.model, h.state, (x, y))
        return logs
