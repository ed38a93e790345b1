"""The launcher seam: what starts the ranks of one worker count, and the one place a
launcher is chosen (``launch.launcher`` in a scenario, ``--launcher`` on the command line).

A launcher turns a worker count, the scenario's placement (``launch.hosts``,
``launch.hostfile``) and a rank command into one command line and its environment; the
workflows run that command through ``launch.runner.run``, which supervises it and names the
failing rank and host. pipeprof's own ranks (``python -m pipeprof.rank JOB``) and a user's
training script are both started this way.

Adding a launcher is one module with a class that has ``Launcher``'s methods, and one line
in ``LAUNCHERS`` below (or a call to ``register``, as the tests' fake does).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from pipeprof import registry
from pipeprof.errors import PipeprofError
from pipeprof.launch import topology

if TYPE_CHECKING:
    from pipeprof.scenario import LaunchConfig


class Launcher(Protocol):
    """One way of starting ranks (horovodrun, mpirun, srun, ...)."""

    name: str  # what the manifest records and a failure line names ("horovodrun exited with 1")

    def check(self, np: int, launch: LaunchConfig, gpu_count: int, engine: str = "horovod") -> None:
        """Refuse, with one line, what this launcher cannot start, before anything is spent:
        its program missing, too few slots for ``np``, what ``engine`` (train.engine) would
        need of it that is not there."""

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


# name → "module:factory"; imported only when chosen, so a launcher's package (Horovod, an
# MPI binding) is needed only by the runs that use it
LAUNCHERS: dict[str, str | Callable[[], Launcher]] = {
    "horovodrun": "pipeprof.launch.horovod:HorovodLauncher",
    "mpirun": "pipeprof.launch.mpirun:MpirunLauncher",
    "srun": "pipeprof.launch.srun:SrunLauncher",
    "local": "pipeprof.launch.local:LocalLauncher",
}
# engines whose one process drives every replica on its host: their launcher is "local"
ONE_PROCESS_ENGINES = ("mirrored",)
AUTO = "auto"  # the default: srun inside a Slurm allocation, else horovodrun (``choose``)
# ranks started by a launcher pipeprof does not drive, each running `pipeprof rank`
# (workflows.rank); compare and run start ranks, so they refuse it with the way to go
EXTERNAL = "external"


def choose(
    launch: LaunchConfig, env: Mapping[str, str] | None = None, engine: str = "horovod"
) -> tuple[LaunchConfig, str]:
    """The launch as it will run, and the words that say so on the first line of output:
    ``auto`` resolved from the environment (inside a Slurm allocation, srun over the
    allocation's nodes, unless hosts are named with -H or --hostfile; otherwise horovodrun),
    and srun's hosts filled in from the allocation. Choosing again from what it returns gives
    the same launch. srun outside an allocation, or with hosts of the user's, is a one-line
    error."""
    from pipeprof.launch import srun

    env = os.environ if env is None else env
    named = bool(launch.hosts or launch.hostfile)
    name = launch.launcher
    if name == EXTERNAL:
        raise PipeprofError(
            "--launcher external: pipeprof starts no ranks then; start `pipeprof rank SCENARIO "
            "--run-dir DIR` with your launcher (mpirun, an MPIJob, srun) at each worker count, "
            "then `pipeprof report DIR` (docs/cluster.md)"
        )
    if engine in ONE_PROCESS_ENGINES:
        if name not in (AUTO, "local"):
            raise PipeprofError(
                f"--launcher {name}: train.engine {engine} runs one process that drives every "
                "replica; leave --launcher out (it is local then)"
            )
        why = f"train.engine {engine}: one process drives every replica"
        return dataclasses.replace(launch, launcher="local"), f"launcher local ({why})"
    if name not in (AUTO, "srun"):  # Slurm's variables are not read: they cannot fail it
        return dataclasses.replace(launch, launcher=name), f"launcher {name} (as asked)"
    alloc = srun.allocation(env)
    if name == AUTO:
        if alloc is None:
            why = "the default outside a Slurm allocation"
        elif named:
            why = "the default where -H/--hostfile (launch.hosts, launch.hostfile) names the hosts"
        elif shutil.which("srun") is None:
            why = f"inside Slurm allocation {alloc.job_id}, but srun is not on PATH"
        else:
            name, why = "srun", "the default inside a Slurm allocation"
        if name == AUTO and engine != "horovod" and not horovodrun_found():
            if shutil.which("mpirun") is not None:  # tf.distribute's workers need no Horovod
                why = f"train.engine {engine} with no Horovod installed: mpirun starts its workers"
                return dataclasses.replace(launch, launcher="mpirun"), f"launcher mpirun ({why})"
        if name == AUTO:
            return dataclasses.replace(
                launch, launcher="horovodrun"
            ), f"launcher horovodrun ({why})"
    else:
        why = "as asked"
    alloc = srun.required_allocation(env)
    if launch.hostfile or launch.hosts not in ("", alloc.hosts_arg):  # the latter: chosen already
        raise PipeprofError(
            "--launcher srun places ranks on the Slurm allocation's nodes: drop -H/--hostfile "
            "(and launch.hosts, launch.hostfile), or use --launcher horovodrun or mpirun"
        )
    return (
        dataclasses.replace(launch, launcher=name, hosts=alloc.hosts_arg),
        f"launcher srun ({why}; {alloc.describe()})",
    )


def horovodrun_found() -> bool:
    from pipeprof.launch.horovod import find_horovodrun

    try:
        find_horovodrun()
    except PipeprofError:
        return False
    return True


def register(name: str, factory: str | Callable[[], Launcher]) -> None:
    """Make ``launch.launcher = NAME`` start ranks with ``factory()`` (a callable, or its
    "module:attribute" path)."""
    LAUNCHERS[name] = factory


def get(name: str) -> Launcher:
    """The launcher called ``name``; an unknown name is a one-line error listing the known ones."""
    return registry.make(LAUNCHERS, name, "launch.launcher", "launcher")


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


def base_env(base: dict[str, str], cwd: str) -> dict[str, str]:
    """What every rank's environment needs, whatever starts it."""
    env = dict(base)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's start-up chatter out of the log
    env["PYTHONUNBUFFERED"] = "1"  # progress lines arrive as they happen
    # user factories ("module:function") are found from the launch directory, on every rank
    env["PYTHONPATH"] = os.pathsep.join(p for p in (cwd, base.get("PYTHONPATH", "")) if p)
    return env
