"""Keras 3's ``keras.distribution.DataParallel`` on JAX as a distribution (``train.engine =
"data_parallel"``): one process drives every device of its host, the model's variables
replicated on them and each batch split among them along its first axis. The worker count is
the devices (replicas): a host's GPUs, or on a host without GPUs that many CPU devices that
XLA makes of the one CPU (``--xla_force_host_platform_device_count``), which share its cores
(said as such wherever the device is named).

Its process sets Keras's backend (``KERAS_BACKEND=jax``) and XLA's CPU device count before
JAX or Keras is first imported (``start``). A batch reaches the devices as Keras's own
``fit`` hands it to them: the process's batch laid out over its devices
(``jax.make_array_from_process_local_data`` with the distribution's data layout).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar

import numpy

from pipeprof.distributions import labelled, refuse_input
from pipeprof.errors import PipeprofError

DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


class DataParallel:
    name = "data_parallel"
    frameworks: ClassVar[tuple[str, ...]] = ("keras3",)
    input_modes: ClassVar[tuple[str, ...]] = ("auto",)
    one_process: ClassVar[bool] = True
    launchers: ClassVar[tuple[str, ...]] = ("local",)
    joins_over_mpi: ClassVar[bool] = False
    keras_backend: ClassVar[str] = "jax"
    stack: ClassVar[str] = "Keras 3 and JAX"

    @staticmethod
    def installed() -> bool:
        from importlib.util import find_spec

        from pipeprof.frameworks.keras3 import Keras3

        return find_spec("jax") is not None and Keras3.installed()

    def __init__(self) -> None:
        self._replicas = 1
        self._dist: Any = None
        self._reduce: Any = None
        self.device_kind = ""

    @staticmethod
    def prepare_environment(np: int) -> None:
        """Before JAX or Keras is imported: the JAX backend, and (for a host without GPUs)
        ``np`` CPU devices."""
        backend = os.environ.setdefault("KERAS_BACKEND", "jax")
        if backend != "jax":
            raise PipeprofError(
                f"train.engine data_parallel runs Keras 3 on JAX, but KERAS_BACKEND is {backend}"
            )
        flags = os.environ.get("XLA_FLAGS", "")
        if DEVICE_COUNT_FLAG not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} {DEVICE_COUNT_FLAG}={np}".strip()

    def start(
        self, controller: str = "", np: int = 1, rendezvous: dict[str, Any] | None = None
    ) -> None:
        self.prepare_environment(np)
        import jax
        import keras

        devices = jax.devices()
        if len(devices) < np:
            raise PipeprofError(
                f"np={np}: train.engine data_parallel drives one replica per device and this "
                f"host has {len(devices)} {devices[0].platform.upper()} device(s)"
                + (
                    f" (XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r} sets the CPU's)"
                    if devices[0].platform == "cpu"
                    else ""
                )
            )
        chosen = devices[:np]
        names = [f"{d.platform}:{d.id}" for d in chosen]
        self._dist = keras.distribution.DataParallel(devices=names)
        keras.distribution.set_distribution(self._dist)
        self._replicas = np
        platform = chosen[0].platform
        self.device_kind = (
            f"{np} CPU device(s) of one process, sharing this host's CPU (XLA's host device count)"
            if platform == "cpu"
            else f"{np} {platform.upper()}(s) of one process"
        )

    def attached(self) -> bool:
        return False

    @property
    def rank(self) -> int:
        return 0

    @property
    def size(self) -> int:
        return 1

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def local_size(self) -> int:
        return 1

    @property
    def replicas(self) -> int:
        return self._replicas

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        return self._dist.scope()

    def set_input(self, how: str) -> None:
        refuse_input(self.name, how, ())

    def input_batch(self, per_replica: int) -> int:
        return per_replica * self._replicas  # the process's batch, split among its devices

    def _laid_out(self, array: Any) -> Any:
        import jax

        local = numpy.asarray(array)
        layout = self._dist.get_data_layout(local.shape).backend_layout
        return jax.make_array_from_process_local_data(layout, local)

    def distribute(self, dataset: Any) -> Iterable[tuple[Any, Any]]:
        return _LaidOut(dataset, self._laid_out)

    def distribute_batch(self, batch: tuple[Any, Any]) -> tuple[Any, Any]:
        x, y = batch
        return self._laid_out(x), self._laid_out(y)

    def replica_runner(self) -> Callable[[Callable[..., Any]], Callable[..., Any]] | None:
        return None  # Keras's JAX trainer runs the step on every device itself

    def wrap_optimizer(self, optimizer: Any) -> Any:
        return optimizer  # the step's gradients are reduced over the devices by XLA

    def broadcast(self, variables: Any, root: int = 0) -> None:
        """One process: its variables are replicated on its devices when made."""

    def barrier(self, name: str) -> None:
        """One process: nothing to wait for."""

    def average(self, values: list[float], name: str) -> Any:
        return numpy.asarray(values, dtype=numpy.float64)

    def allreduce(self, tensor: Any, name: str) -> Any:
        """``tensor`` summed over the devices, each device giving it (the emulated step's
        gradient exchange: one all-reduce of XLA's over this process's devices)."""
        import jax
        import jax.numpy as jnp

        if self._replicas == 1:
            return tensor
        if self._reduce is None:
            self._reduce = jax.jit(lambda t: jnp.sum(t, axis=0))
        stacked = numpy.broadcast_to(numpy.asarray(tensor), (self._replicas, *numpy.shape(tensor)))
        return self._reduce(self._laid_out(stacked))

    def gather(self, objects: list[Any], name: str) -> list[list[Any]]:
        return [list(objects)]

    def describe(self, device: str, how: str) -> str:
        return labelled(device, self.name, how)


class _LaidOut:
    """A pipeline's batches, each laid out over the distribution's devices as it is taken."""

    def __init__(self, dataset: Any, lay_out: Callable[[Any], Any]) -> None:
        self.dataset, self.lay_out = dataset, lay_out

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        for x, y in self.dataset:
            yield self.lay_out(x), self.lay_out(y)
