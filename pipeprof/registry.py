"""The one way a seam's registry (``launch.launcher.LAUNCHERS``, ``rank.engine.ENGINES``)
turns a name into an implementation: a factory registered directly, or its "module:attribute"
path imported only when chosen (so a backend's package is needed only by the runs using it)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from pipeprof.errors import PipeprofError
from pipeprof.models import resolve_callable

T = TypeVar("T")


def make(registry: Mapping[str, str | Callable[[], T]], name: str, key: str, what: str) -> T:
    """``registry[name]()``; an unknown name is a one-line error naming ``key`` and the known ones."""
    factory = registry.get(name)
    if factory is None:
        raise PipeprofError(f"{key}: unknown {what} {name!r}; known: {', '.join(sorted(registry))}")
    made: Callable[[], T] = resolve_callable(factory, key) if isinstance(factory, str) else factory
    return made()
