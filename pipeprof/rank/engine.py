"""The training-engine seam: what a rank needs of the library that makes its training
data-parallel (Horovod today; tf.distribute next), in one interface, chosen in one place.

pipeprof's own ranks (``rank.worker``), a user's ``model.fit`` under ``pipeprof compare --
CMD`` (``rank.fit``, ``pipeprof.keras``) and the emulated device use only these methods, so
Horovod is imported by ``rank/horovod_engine.py`` and the Horovod launcher alone.

Adding an engine is one module with a class that has ``Engine``'s methods, and one line in
``ENGINES`` (or a call to ``register``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pipeprof import registry


class Engine(Protocol):
    name: str

    def start(self, controller: str = "") -> None:
        """Join the other ranks (Horovod's ``init``); ``controller``: the one the launch used,
        checked first (an engine built without it is a one-line error naming the fix)."""

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


ENGINES: dict[str, str | Callable[[], Engine]] = {
    "horovod": "pipeprof.rank.horovod_engine:HorovodEngine",
}
DEFAULT = "horovod"


def register(name: str, factory: str | Callable[[], Engine]) -> None:
    """Make ``train.engine = NAME`` use ``factory()`` (a callable, or its "module:attribute")."""
    ENGINES[name] = factory


def get(name: str = DEFAULT) -> Engine:
    return registry.make(ENGINES, name, "train.engine", "engine")
