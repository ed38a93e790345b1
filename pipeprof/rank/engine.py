"""The training-engine seam: what a rank needs of the library that makes its training
data-parallel (Horovod, tf.distribute), in one interface, chosen in one place.

pipeprof's own ranks (``rank.worker``), a user's ``model.fit`` under ``pipeprof compare --
CMD`` (``rank.fit``, ``pipeprof.keras``) and the emulated device use only these methods, so
Horovod is imported by ``rank/horovod_engine.py`` and the Horovod launcher alone.

Adding an engine is one module with a class that has ``Engine``'s methods, and one line in
``ENGINES`` (or a call to ``register``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Protocol

from pipeprof import registry
from pipeprof.errors import PipeprofError


class Engine(Protocol):
    name: str

    def start(self, controller: str = "", np: int = 1) -> None:
        """Join the other ranks (Horovod's ``init``); ``controller``: the one the launch used,
        checked first (an engine built without it is a one-line error naming the fix);
        ``np``: the launch's worker count (an engine that drives several replicas from one
        process makes that many)."""

    def attached(self) -> bool:
        """Whether this process's ranks are already joined (a user's script started the engine)."""

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
        """The replicas this process drives (Horovod: 1; the worker count is size × replicas)."""

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        """Where the model and its optimizer are made (tf.distribute's strategy scope)."""

    def set_input(self, how: str) -> None:
        """How this process's dataset reaches its replicas (``train.distribute_input``):
        ``auto``, the engine's own way, or the tf.distribute function named; an engine with
        one way refuses another in one line."""

    def input_batch(self, per_replica: int) -> int:
        """The batch this process's dataset yields, ``per_replica`` samples for each replica:
        a global batch that ``distribute`` splits, or one replica's batch."""

    def distribute(self, dataset: Any) -> Any:
        """This process's dataset as its replicas take it (one global batch split among them)."""

    def distribute_batch(self, batch: tuple[Any, Any]) -> tuple[Any, Any]:
        """One of this process's batches as its replicas take it (the synthetic twin's)."""

    def train_step(self, model: Any, prepare: Callable[[Any, Any], Any] | None = None) -> Any:
        """Keras's ``train_step`` on this process's replicas, as a function of (x, y) giving
        the logs; ``prepare(x, y)``: what becomes x first (augmentation on the device)."""

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


# train.distribute_input: tf.distribute's two ways of feeding replicas from a tf.data pipeline
SPLIT = "experimental_distribute_dataset"  # global batches, each split among the replicas
PER_REPLICA = "distribute_datasets_from_function"  # one batch per replica, from the function
DISTRIBUTE_INPUTS = ("auto", SPLIT, PER_REPLICA)


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
    """``Engine``'s methods for an engine with one replica per process (Horovod's way): the
    process's dataset and batches are its replica's, and its step is Keras's own."""

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

    def train_step(self, model: Any, prepare: Callable[[Any, Any], Any] | None = None) -> Any:
        import tensorflow as tf

        if prepare is None:
            return tf.function(lambda x, y: model.train_step((x, y)))
        return tf.function(lambda x, y: model.train_step((prepare(x, y), y)))


ENGINES: dict[str, str | Callable[[], Engine]] = {
    "horovod": "pipeprof.rank.horovod_engine:HorovodEngine",
    "mirrored": "pipeprof.rank.mirrored_engine:MirroredEngine",
    "multi_worker_mirrored": "pipeprof.rank.multiworker_engine:MultiWorkerEngine",
}
DEFAULT = "horovod"


def register(name: str, factory: str | Callable[[], Engine]) -> None:
    """Make ``train.engine = NAME`` use ``factory()`` (a callable, or its "module:attribute")."""
    ENGINES[name] = factory


def get(name: str = DEFAULT) -> Engine:
    return registry.make(ENGINES, name, "train.engine", "engine")
