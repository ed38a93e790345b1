"""Keras 3's ``keras.distribution.DataParallel`` on JAX as a distribution (``train.engine =
"data_parallel"``): one process on each host drives every device of that host, the model's
variables replicated on all of them and each batch split among them along its first axis. The
worker count is the devices (replicas): a host's GPUs, or on a host without GPUs that many CPU
devices that XLA makes of the one CPU (``--xla_force_host_platform_device_count``), which
share its cores (said as such wherever the device is named).

On one host that one process is started as is (``launch.local``). Across hosts there is one
process a host (``launch.topology.processes``: ssh, mpirun or srun starts them), joined at JAX's
coordinator on the first host through Keras's own variables (``KERAS_DISTRIBUTION_JOB_ADDRESSES``,
``_NUM_PROCESSES``, ``_PROCESS_ID``, then ``keras.distribution.initialize()``), so a user's
script that calls ``initialize()`` with no arguments joins the same way. Between processes
the collectives are JAX's (Gloo on CPUs): pipeprof's barriers, averages and gathers go
through ``jax.experimental.multihost_utils``.

Its process sets Keras's backend (``KERAS_BACKEND=jax``) and XLA's CPU device count before
JAX or Keras is first imported (``start``). A batch reaches the devices as Keras's own
``fit`` hands it to them: the process's batch laid out over its devices, the processes' batches
one global batch (``jax.make_array_from_process_local_data`` with the distribution's layout).
"""

from __future__ import annotations

import contextlib
import os
import pickle
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar

import numpy

from pipeprof.distributions import labelled, refuse_input
from pipeprof.errors import PipeprofError
from pipeprof.launch.topology import per_host_replicas
from pipeprof.rank.identity import identity

DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
# JAX's coordinator listens on the first host from this port up, one port a worker count
COORDINATOR_PORT = 24571
# what Keras's initialize() reads when called without arguments
JOB_ADDRESSES, NUM_PROCESSES, PROCESS_ID = (
    f"KERAS_DISTRIBUTION_{k}" for k in ("JOB_ADDRESSES", "NUM_PROCESSES", "PROCESS_ID")
)


class DataParallel:
    name = "data_parallel"
    frameworks: ClassVar[tuple[str, ...]] = ("keras3",)
    input_modes: ClassVar[tuple[str, ...]] = ("auto",)
    one_process: ClassVar[bool] = False
    per_host: ClassVar[bool] = True
    # this host alone; across hosts pipeprof's own ssh launcher, or mpirun, or srun
    launchers: ClassVar[tuple[str, ...]] = ("local", "ssh", "mpirun", "srun")
    joins_through_horovod: ClassVar[bool] = False
    keras_backend: ClassVar[str] = "jax"
    stack: ClassVar[str] = "Keras 3 and JAX"

    @staticmethod
    def installed() -> bool:
        from importlib.util import find_spec

        from pipeprof.frameworks.keras3 import Keras3

        return find_spec("jax") is not None and Keras3.installed()

    @staticmethod
    def rendezvous(np: int, launch: Any, run_dir: str = "") -> dict[str, Any]:
        """Each process's devices, in process order (a host's process drives that host's
        replicas), and, for more than one process, the coordinator's address on the first."""
        by_host = per_host_replicas(DataParallel.name, np, launch)
        if len(by_host) == 1:
            return {"devices": [np]}
        first = next(iter(by_host))
        return {
            "devices": list(by_host.values()),
            "coordinator": f"{first}:{COORDINATOR_PORT + np % 16}",
        }

    def __init__(self) -> None:
        self._replicas = 1
        self._local = 1
        self._dist: Any = None
        self._reduce: Any = None
        self._rank, self._size = 0, 1
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

    @classmethod
    def joining(cls, np: int, rendezvous: dict[str, Any] | None) -> tuple[int, int]:
        """This process's devices and the processes of the launch, with its environment set
        before JAX starts: Keras's backend, XLA's CPU devices, and, for more than one process,
        what ``keras.distribution.initialize()`` reads to join them (each set unless set)."""
        counts = list((rendezvous or {}).get("devices") or [np])
        processes = len(counts)
        local = np
        if processes > 1:  # this host's process among the hosts': Keras's variables join it
            me = identity()
            if me.size != processes or not 0 <= me.rank < processes:
                raise PipeprofError(
                    f"train.engine {cls.name}: {processes} process(es), one a host, were "
                    f"placed, but the launcher made this process {me.rank} of {me.size}"
                )
            os.environ.setdefault(JOB_ADDRESSES, rendezvous["coordinator"])  # type: ignore[index]
            os.environ.setdefault(NUM_PROCESSES, str(processes))
            os.environ.setdefault(PROCESS_ID, str(me.rank))
            local = counts[me.rank]
        cls.prepare_environment(local)
        return local, processes

    @classmethod
    def prepare_script(cls, np: int, rendezvous: dict[str, Any] | None = None) -> None:
        """Before a user's script imports JAX (importing pipeprof.keras comes first): its
        backend, its host's CPU devices, and the variables its own
        ``keras.distribution.initialize()`` reads across hosts."""
        cls.joining(np, rendezvous)

    @classmethod
    def attach_script(cls, strategy: Any, np: int, where: str) -> DataParallel:
        """The distribution of a user's script under ``compare --engine data_parallel``: the
        one it set (``keras.distribution.set_distribution``), checked to span the ``np``
        devices compare asked for; with none set, one device (np=1). ``where``: what the
        script must build under it."""
        import jax
        import keras

        dist = keras.distribution.distribution()
        if dist is None:
            if np > 1:
                raise PipeprofError(
                    f"--engine {cls.name}: np={np}, and {where} a keras.distribution: call "
                    "keras.distribution.set_distribution(keras.distribution.DataParallel()) "
                    "before building the model (it takes every device pipeprof gives the script)"
                )
            devices = [jax.local_devices()[0]]
        else:
            devices = list(numpy.ravel(dist.device_mesh.devices))
            devices = [d if isinstance(d, jax.Device) else _device(d) for d in devices]
        if len(devices) != np:
            raise PipeprofError(
                f"--engine {cls.name}: np={np} but the script's distribution spans "
                f"{len(devices)} device(s): make it with every device pipeprof gives the script "
                "(DataParallel() with no devices named)"
            )
        engine = cls()
        engine._dist = dist
        engine._rank, engine._size = jax.process_index(), jax.process_count()
        engine._replicas = np
        engine._local = sum(d.process_index == engine._rank for d in devices)
        engine.device_kind = f"{np} device(s) of the script's distribution"
        return engine

    def start(
        self, controller: str = "", np: int = 1, rendezvous: dict[str, Any] | None = None
    ) -> None:
        local, processes = self.joining(np, rendezvous)
        import jax
        import keras

        if processes > 1:
            keras.distribution.initialize()
        mine = jax.local_devices()
        if len(mine) < local:
            raise PipeprofError(
                f"np={np}: train.engine data_parallel drives one replica per device and "
                f"{identity().host} has {len(mine)} {mine[0].platform.upper()} device(s)"
                + (
                    f" (XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r} sets the CPU's)"
                    if mine[0].platform == "cpu"
                    else ""
                )
            )
        by_process: dict[int, list[Any]] = {}
        for d in jax.devices():
            by_process.setdefault(d.process_index, []).append(d)
        # every host has as many replicas (``per_host_replicas``): each process its first ``local``
        chosen = [d for p in sorted(by_process) for d in by_process[p][:local]]
        self._dist = keras.distribution.DataParallel(
            devices=[f"{d.platform}:{d.id}" for d in chosen]
        )
        keras.distribution.set_distribution(self._dist)
        self._rank, self._size = jax.process_index(), jax.process_count()
        self._replicas, self._local = len(chosen), local
        platform = chosen[0].platform
        each = f"{local} CPU device(s)" if platform == "cpu" else f"{local} {platform.upper()}(s)"
        if processes > 1:
            self.device_kind = f"{each} in each of {processes} processes (one a host)"
        else:
            self.device_kind = f"{each} of one process"
        if platform == "cpu":
            self.device_kind += ", sharing its host's CPU (XLA's host device count)"

    def attached(self) -> bool:
        return False

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size

    @property
    def local_rank(self) -> int:
        return 0  # one process a host

    @property
    def local_size(self) -> int:
        return 1

    @property
    def replicas(self) -> int:
        return self._local  # this process's: the worker count is the processes' sum

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        return self._dist.scope()

    def set_input(self, how: str) -> None:
        refuse_input(self.name, how, ())

    def input_batch(self, per_replica: int) -> int:
        return per_replica * self._local  # the process's batch, split among its devices

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
        """Nothing to send: the variables are replicated on every device when made, and
        across processes made alike (``initialize`` agrees the processes' random seed)."""

    def barrier(self, name: str) -> None:
        if self._size > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices(name)

    def average(self, values: list[float], name: str) -> Any:
        mine = numpy.asarray(values, dtype=numpy.float64)
        if self._size == 1:
            return mine
        from jax.experimental import multihost_utils

        # float32 crosses the processes (JAX's default); each value is a rate or a mean
        every = multihost_utils.process_allgather(mine.astype(numpy.float32))
        return numpy.asarray(every, dtype=numpy.float64).mean(axis=0)

    def allreduce(self, tensor: Any, name: str) -> Any:
        """``tensor`` summed over every device, each giving it (the emulated step's gradient
        exchange: one all-reduce of XLA's over the devices of every process)."""
        import jax
        import jax.numpy as jnp

        if self._replicas == 1:
            return tensor
        if self._reduce is None:
            self._reduce = jax.jit(lambda t: jnp.sum(t, axis=0))
        stacked = numpy.broadcast_to(numpy.asarray(tensor), (self._local, *numpy.shape(tensor)))
        return self._reduce(self._laid_out(stacked))

    def gather(self, objects: list[Any], name: str) -> list[list[Any]]:
        """Every process's ``objects``, in process order: each pickled, padded to the
        longest and gathered as bytes."""
        if self._size == 1:
            return [list(objects)]
        from jax.experimental import multihost_utils

        data = numpy.frombuffer(pickle.dumps(list(objects)), dtype=numpy.uint8)
        sizes = multihost_utils.process_allgather(numpy.asarray([data.size], numpy.int32))
        longest = int(numpy.max(sizes))
        padded = numpy.zeros(longest, numpy.uint8)
        padded[: data.size] = data
        every = numpy.asarray(multihost_utils.process_allgather(padded))
        return [
            pickle.loads(every[p, : int(numpy.ravel(sizes[p])[0])].tobytes())
            for p in range(self._size)
        ]

    def describe(self, device: str, how: str) -> str:
        return labelled(device, self.name, how)


def _device(name: str) -> Any:
    """The JAX device a Keras device name (``cpu:0``) names."""
    import jax

    kind, _, index = str(name).partition(":")
    return next(d for d in jax.devices(kind) if d.id == int(index or 0))


class _LaidOut:
    """A pipeline's batches, each laid out over the distribution's devices as it is taken."""

    def __init__(self, dataset: Any, lay_out: Callable[[Any], Any]) -> None:
        self.dataset, self.lay_out = dataset, lay_out

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        for x, y in self.dataset:
            yield self.lay_out(x), self.lay_out(y)
