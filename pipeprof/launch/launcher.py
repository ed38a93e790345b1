"""The launcher axis: what starts the ranks of one worker count (``launch.launcher`` in a
scenario, ``--launcher`` on the command line; ``launch.choose`` resolves "auto").

A launcher turns a worker count, the scenario's placement (``launch.hosts``,
``launch.hostfile``) and a rank command into one command line and its environment; the
workflows run that command through ``launch.runner.run``, which supervises it and names the
failing rank and host. pipeprof's own ranks (``python -m pipeprof.rank JOB``) and a user's
training script are both started this way.

Adding a launcher is one module with a class that has ``Launcher``'s methods, and one line
in ``pipeprof.plugins`` (or a call to ``register``, as the tests' fake does).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from pipeprof import plugins
from pipeprof.errors import PipeprofError
from pipeprof.launch import topology

if TYPE_CHECKING:
    from pipeprof.scenario import LaunchConfig


class Launcher(Protocol):
    """One way of starting ranks (horovodrun, mpirun, srun, ...)."""

    name: str  # what the manifest records and a failure line names ("horovodrun exited with 1")

    def check(self, np: int, launch: LaunchConfig, gpu_count: int, distribution: Any) -> None:
        """Refuse, with one line, what this launcher cannot start, before anything is spent:
        its program missing, too few slots for ``np``, what ``distribution`` (the class of
        train.engine's point: its capabilities) would need of it that is not there."""

    def env(
        self, base: dict[str, str], cwd: str, *, emulated: bool = False, local_ranks: int = 1
    ) -> dict[str, str]:
        """The ranks' environment: ``base_env`` plus this launcher's own settings."""

    def ranks_argv(self, np: int, launch: LaunchConfig, rank_cmd: list[str]) -> list[str]:
        """The command that starts ``np`` copies of pipeprof's own rank command."""

    def script_argv(self, np: int, launch: LaunchConfig, cmd: list[str]) -> list[str]:
        """The command that starts ``np`` copies of a user's training command."""

    def rank_exit(self, line: str) -> tuple[int, int] | None:
        """(rank, exit code) where ``line`` of this launcher's output reports a rank's end;
        None otherwise. The failure line names the first rank to end badly from these."""


AUTO, EXTERNAL = plugins.AUTO, plugins.EXTERNAL  # launch.launcher's words for no launcher named


def register(name: str, factory: str | Callable[[], Launcher]) -> None:
    """Make ``launch.launcher = NAME`` start ranks with ``factory()`` (a callable, or its
    "module:attribute" path, which ranks in other processes can import too)."""
    plugins.register(plugins.LAUNCHER, name, factory)


def get(name: str) -> Launcher:
    """The launcher called ``name``; an unknown name is a one-line error listing the known ones."""
    launcher: Launcher = plugins.make(plugins.LAUNCHER, name)
    return launcher


def worker_counts(spec: str | int | list[int]) -> list[int]:
    """``32`` → 1, 2, 4, 8, 16, 32 (powers of two up to it, and it); ``1,3,8`` → that list."""
    if isinstance(spec, list):
        counts = spec
    else:
        text = str(spec).strip()
        try:
            if "," in text:
                counts = [int(p) for p in text.split(",") if p.strip()]
            else:
                top = int(text)
                counts = (
                    [n for n in (2**i for i in range(0, 31)) if n < top] + [top]
                    if top >= 1
                    else [top]
                )
        except ValueError:
            raise PipeprofError(
                f"--np {spec!r}: expected a worker count (e.g. 32) or a list (e.g. 1,3,8)"
            ) from None
    if not counts or any(n < 1 for n in counts):
        raise PipeprofError(f"--np {spec!r}: worker counts must be positive")
    return sorted(set(counts))


def local_slots(gpu_count: int) -> tuple[int, str]:
    """Slots on this host when no hosts are given: one per GPU, else one per CPU core."""
    if gpu_count > 0:
        return gpu_count, f"{gpu_count} GPU(s)"
    cores = topology.usable_cores()
    return cores, f"{cores} CPU cores, no GPU"


def check_slots(np: int, launch: LaunchConfig, gpu_count: int) -> None:
    """Refuse ``np`` ranks where the hosts given (or this host) have fewer slots, unless
    ``launch.oversubscribe`` (this host only: a host list is never exceeded)."""
    if (named := topology.host_slots(launch)) is not None:
        slots, what = sum(s for _, s in named[0]), named[1]
        if np > slots:  # launchers start one rank per slot of a host list, never more
            raise PipeprofError(
                f"np={np} needs {np} slots but {what} offers {slots}; add hosts or slots"
            )
    else:
        slots, what = local_slots(gpu_count)
        what = f"localhost ({what})"
    if np > slots and not launch.oversubscribe:
        raise PipeprofError(
            f"np={np} needs {np} slots but {what} offers {slots}; "
            f"add hosts with -H/--hostfile, or pass --oversubscribe to run anyway"
        )


def check_joins_by_torch(launcher: str, distribution: Any) -> None:
    """Refuse ``launcher`` (torchrun, dask: they start processes that meet through
    ``torch.distributed``'s variables) for an engine whose processes do not."""
    if launcher not in getattr(distribution, "launchers", ()):
        engine = getattr(distribution, "name", "")
        raise PipeprofError(
            f"--launcher {launcher} starts processes that join by torch.distributed; "
            f"train.engine {engine} does not (use --engine ddp)"
        )


def base_env(base: dict[str, str], cwd: str) -> dict[str, str]:
    """What every rank's environment needs, whatever starts it."""
    env = dict(base)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's start-up chatter out of the log
    env["PYTHONUNBUFFERED"] = "1"  # progress lines arrive as they happen
    # user factories ("module:function") are found from the launch directory, on every rank
    env["PYTHONPATH"] = os.pathsep.join(p for p in (cwd, base.get("PYTHONPATH", "")) if p)
    return env
