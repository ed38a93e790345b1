"""A distribution whose collectives go through files (``train.engine = "files"``): the fake
framework's stand-in for Horovod, registered the way any point is (``pipeprof.plugins``).

Its rendezvous is a folder the launching process makes in the run directory for each launch
(``rendezvous``, as a real distribution's is its controller's address); each collective call writes this rank's part
to ``DIR/NAME.RANK.json`` and waits until every rank's part is there. Ranks learn who they are
from the launcher's environment (``rank.identity``). Slow (files, polling every few ms), but
real: ranks do wait for each other, and a dead rank stops the others (after ``TIMEOUT_S``)."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

from pipeprof.distributions import PerProcess
from pipeprof.rank.identity import identity

TIMEOUT_S = 60.0


class FileDistribution(PerProcess):
    name = "files"
    frameworks: ClassVar[tuple[str, ...]] = ("fake",)
    launchers: ClassVar[tuple[str, ...]] = ("local",)

    @staticmethod
    def rendezvous(np: int, launch: Any, run_dir: str) -> dict[str, Any]:
        """A new folder for one launch's collectives, in its run directory (the ranks are on
        this host)."""
        return {"dir": tempfile.mkdtemp(prefix=f"collectives-np{np}-", dir=run_dir)}

    def __init__(self) -> None:
        self.me = identity()
        self.dir = Path()
        self.calls: dict[str, int] = {}

    def start(
        self, controller: str = "", np: int = 1, rendezvous: dict[str, Any] | None = None
    ) -> None:
        self.dir = Path((rendezvous or {})["dir"])
        self.dir.mkdir(parents=True, exist_ok=True)
        self.barrier("start")

    def attached(self) -> bool:
        return True

    @property
    def rank(self) -> int:
        return self.me.rank

    @property
    def size(self) -> int:
        return self.me.size

    @property
    def local_rank(self) -> int:
        return self.me.local_rank

    @property
    def local_size(self) -> int:
        return self.me.local_size

    def wrap_optimizer(self, optimizer: Any) -> Any:
        return optimizer

    def broadcast(self, variables: Any, root: int = 0) -> None:
        self.barrier("broadcast")

    def barrier(self, name: str) -> None:
        self.gather([], name)

    def average(self, values: list[float], name: str) -> Any:
        import numpy

        parts = self.gather([float(v) for v in values], name)
        return numpy.mean(numpy.array(parts, dtype=numpy.float64), axis=0)

    def allreduce(self, tensor: Any, name: str) -> Any:
        self.barrier(name)  # ranks meet each step, as an allreduce makes them
        return tensor

    def gather(self, objects: list[Any], name: str) -> list[list[Any]]:
        n = self.calls[name] = self.calls.get(name, 0) + 1  # the same name may be called again
        key = f"{name}-{n}"
        mine = self.dir / f"{key}.{self.rank}.json"
        tmp = mine.with_suffix(".tmp")
        tmp.write_text(json.dumps(objects))
        tmp.replace(mine)
        deadline = time.monotonic() + TIMEOUT_S
        paths = [self.dir / f"{key}.{r}.json" for r in range(self.size)]
        while not all(p.exists() for p in paths):
            if time.monotonic() > deadline:
                missing = [r for r, p in enumerate(paths) if not p.exists()]
                raise RuntimeError(f"collective {key}: ranks {missing} never came")
            time.sleep(0.002)
        return [json.loads(p.read_text()) for p in paths]
