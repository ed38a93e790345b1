"""The one place a launcher is chosen: ``launch.launcher = "auto"`` resolved, in words for the
first line of output, from what the distribution can be started by (its ``launchers``, the
first one that is installed), what it drives (one process for every replica: its own), and
the environment (a launcher that claims it: srun inside a Slurm allocation)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pipeprof import plugins
from pipeprof.errors import PipeprofError

if TYPE_CHECKING:
    from pipeprof.scenario import LaunchConfig


def choose(
    launch: LaunchConfig, env: Mapping[str, str] | None = None, engine: str = "horovod"
) -> tuple[LaunchConfig, str]:
    """The launch as it will run, and the words that say so on the first line of output:
    ``auto`` resolved; a launcher's own settings filled in (srun's hosts from its allocation).
    Choosing again from what it returns gives the same launch. A launcher the environment
    cannot give (srun outside an allocation) is a one-line error."""
    env = os.environ if env is None else env
    name = launch.launcher
    if name == plugins.EXTERNAL:
        raise PipeprofError(
            "--launcher external: pipeprof starts no ranks then; start `pipeprof rank SCENARIO "
            "--run-dir DIR` with your launcher (mpirun, an MPIJob, srun) at each worker count, "
            "then `pipeprof report DIR` (docs/cluster.md)"
        )
    if engine == plugins.AUTO:
        engine = plugins.choose_engine()[0]
    dist = plugins.kind(plugins.DISTRIBUTION, engine)
    if dist.one_process:
        own = dist.launchers[0]
        if name not in (plugins.AUTO, own):
            raise PipeprofError(
                f"--launcher {name}: train.engine {engine} runs one process that drives every "
                f"replica; leave --launcher out (it is {own} then)"
            )
        why = f"train.engine {engine}: one process drives every replica"
        return dataclasses.replace(launch, launcher=own), f"launcher {own} ({why})"
    if name != plugins.AUTO:
        return _settled(name, launch, env, "as asked")
    named = bool(launch.hosts or launch.hostfile)
    why = ""
    for claimant in plugins.names(plugins.LAUNCHER):
        claim = getattr(plugins.kind(plugins.LAUNCHER, claimant), "claims", None)
        said = claim(env, named) if claim is not None else None
        if said is not None:
            taken, why = said
            if taken:
                return _settled(claimant, launch, env, why)
            break
    return _default(dist, engine, launch, why or "the default outside a Slurm allocation")


def _default(dist: Any, engine: str, launch: LaunchConfig, why: str) -> tuple[LaunchConfig, str]:
    """The distribution's own launcher: its first that is installed, else its first (whose
    check then says what to install). Where hosts are named (-H, --hostfile), a launcher that
    starts processes on this host alone (``this_host_only``) is passed over."""
    named = bool(launch.hosts or launch.hostfile)
    usable = [
        name
        for name in dist.launchers
        if not (named and getattr(plugins.kind(plugins.LAUNCHER, name), "this_host_only", False))
    ] or list(dist.launchers)
    first = usable[0]
    for name in usable:
        if getattr(plugins.kind(plugins.LAUNCHER, name), "available", lambda: True)():
            if name != first:
                missing = getattr(plugins.kind(plugins.LAUNCHER, first), "needs", first)
                why = (
                    f"train.engine {engine} with no {missing} installed: {name} starts its workers"
                )
            elif named and first != dist.launchers[0]:
                why = f"train.engine {engine} on the hosts named: {name} starts its processes"
            return dataclasses.replace(launch, launcher=name), f"launcher {name} ({why})"
    return dataclasses.replace(launch, launcher=first), f"launcher {first} ({why})"


def _settled(
    name: str, launch: LaunchConfig, env: Mapping[str, str], why: str
) -> tuple[LaunchConfig, str]:
    """``name`` as the launcher, with what it fills in from the environment (``settle``)."""
    settle = getattr(plugins.kind(plugins.LAUNCHER, name), "settle", None)
    if settle is not None:
        return settle(launch, env, why)
    return dataclasses.replace(launch, launcher=name), f"launcher {name} ({why})"
