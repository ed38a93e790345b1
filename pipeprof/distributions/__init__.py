"""The distribution axis: what makes a rank's training data-parallel (``train.engine``), with
its rendezvous and the collectives pipeprof needs. Points: ``horovod``, ``mirrored``,
``multi_worker_mirrored`` (``pipeprof.plugins``).

pipeprof's own ranks (``rank.worker``), a user's script under ``compare -- CMD`` and the
emulated device use only ``Distribution``'s methods and attributes, so each backend's package
(Horovod, tf.distribute) is imported by its own module alone (``tests/unit/test_seams.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from pipeprof.errors import PipeprofError

# train.distribute_input: tf.distribute's two ways of feeding replicas from a tf.data pipeline
SPLIT = "experimental_distribute_dataset"  # global batches, each split among the replicas
PER_REPLICA = "distribute_datasets_from_function"  # one batch per replica, from the function
DISTRIBUTE_INPUTS = ("auto", SPLIT, PER_REPLICA)


class Distribution(Protocol):
    """One way of making training data-parallel. Class attributes are its capabilities, read
    before anything runs (``plugins.kind``)."""

    name: str
    # the frameworks it serves ("*": any); the first is the one ``train.framework = "auto"`` takes
    frameworks: ClassVar[tuple[str, ...]]
    # the ``train.distribute_input`` values it takes
    input_modes: ClassVar[tuple[str, ...]]
    # one process drives every replica on its host (the worker count is its replicas)
    one_process: ClassVar[bool]
    # one process on each host of the placement drives that host's replicas (``processes``)
    per_host: ClassVar[bool]
    # the launchers that can start its processes, preferred first (``launch.choose``)
    launchers: ClassVar[tuple[str, ...]]
    # its ranks join through Horovod's controller: MPI's under mpirun, Gloo's rendezvous
    # under srun (the others only read who they are from the launcher's variables)
    joins_through_horovod: ClassVar[bool]
    device_kind: str  # what its replicas run on, said where the device is named ("": the rank's)

    def start(
        self, controller: str = "", np: int = 1, rendezvous: dict[str, Any] | None = None
    ) -> None:
        """Join the other ranks: ``controller`` the one the launch used (a backend built
        without it is a one-line error), ``np`` the launch's worker count, ``rendezvous``
        what ``rendezvous`` gave the launch (the workers' addresses)."""

    def attached(self) -> bool:
        """Whether this process's ranks are already joined (a user's script started them)."""

    @property
    def rank(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def local_rank(self) -> int: ...

    @property
    def local_size(self) -> int: ...

    @property
    def replicas(self) -> int:
        """The replicas this process drives (one a process: 1; np is size × replicas)."""

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        """Where the model and its optimizer are made (tf.distribute's strategy scope)."""

    def set_input(self, how: str) -> None:
        """How this process's dataset reaches its replicas (``train.distribute_input``)."""

    def input_batch(self, per_replica: int) -> int:
        """The batch this process's dataset yields, ``per_replica`` samples for each replica."""

    def distribute(self, dataset: Any) -> Any:
        """This process's dataset as its replicas take it."""

    def distribute_batch(self, batch: tuple[Any, Any]) -> tuple[Any, Any]:
        """One of this process's batches as its replicas take it (the synthetic twin's)."""

    def replica_runner(self) -> Callable[[Callable[..., Any]], Callable[..., Any]] | None:
        """How a replica's step runs on every replica of this process, or None where a
        process is one replica (the framework compiles the step itself)."""

    def wrap_optimizer(self, optimizer: Any) -> Any:
        """The optimizer whose gradients are averaged over the ranks."""

    def broadcast(self, variables: Any, root: int = 0) -> None:
        """Every rank's ``variables`` set to rank ``root``'s."""

    def barrier(self, name: str) -> None:
        """Return once every rank has called it with this name."""

    def average(self, values: list[float], name: str) -> Any:
        """The mean over ranks of each of ``values`` (a float64 numpy array)."""

    def allreduce(self, tensor: Any, name: str) -> Any:
        """A tensor reduced over ranks as a gradient is (the emulated device's exchange)."""

    def gather(self, objects: list[Any], name: str) -> list[list[Any]]:
        """Every rank's list of picklable ``objects``, in rank order, on every rank."""

    def describe(self, device: str, how: str) -> str:
        """``device`` (its own ``device_kind`` where it has one, the emulated device's words)
        as outputs name it, with this distribution's part (``how``: the
        ``train.distribute_input`` asked, "auto" when not)."""


def refuse_input(engine: str, how: str, ways: tuple[str, ...]) -> None:
    """A one-line error for a ``train.distribute_input`` that ``engine`` does not take."""
    if how != "auto" and how not in ways:
        takes = (
            f"auto or {' or '.join(ways)}"
            if ways
            else "only auto (its ranks read their own shards)"
        )
        raise PipeprofError(f"train.distribute_input {how!r}: train.engine {engine} takes {takes}")


class PerProcess:
    """``Distribution``'s methods for one replica a process (Horovod's way): the process's
    dataset and batches are its replica's, and its step is the framework's own."""

    frameworks: ClassVar[tuple[str, ...]] = ("keras2",)
    input_modes: ClassVar[tuple[str, ...]] = ("auto",)
    one_process: ClassVar[bool] = False
    per_host: ClassVar[bool] = False
    launchers: ClassVar[tuple[str, ...]] = ("horovodrun",)
    joins_through_horovod: ClassVar[bool] = False
    device_kind = ""

    @property
    def replicas(self) -> int:
        return 1

    def set_input(self, how: str) -> None:
        refuse_input(self.name, how, ())  # type: ignore[attr-defined]

    def input_batch(self, per_replica: int) -> int:
        return per_replica

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def distribute(self, dataset: Any) -> Any:
        return dataset  # each rank reads its own shard

    def distribute_batch(self, batch: tuple[Any, Any]) -> tuple[Any, Any]:
        return batch

    def replica_runner(self) -> Callable[[Callable[..., Any]], Callable[..., Any]] | None:
        return None

    def describe(self, device: str, how: str) -> str:
        return device


def labelled(device: str, name: str, how: str) -> str:
    """A device as a distribution of its own replicas names it: ``device (name[, how])``."""
    return f"{device} ({name}" + (f", {how})" if how != "auto" else ")")


def rendezvous_of(name: str, np: int, launch: Any, run_dir: str) -> dict[str, Any]:
    """What the launch of ``np`` ranks gives ``name``'s ranks to meet (its class's
    ``rendezvous(np, launch, run_dir)``, where it has one: the workers' addresses), made by
    the launching process."""
    from pipeprof import plugins

    made = getattr(plugins.kind(plugins.DISTRIBUTION, name), "rendezvous", None)
    return made(np, launch, run_dir) if made is not None else {}
