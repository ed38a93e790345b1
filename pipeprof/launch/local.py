"""One process on this host, started as is (``launch.launcher = "local"``): the launcher of an
engine that drives every replica from one process (``train.engine = "mirrored"``), chosen for
it by ``launcher.choose``. The process's own replicas are the worker count."""

from __future__ import annotations

from pipeprof.errors import PipeprofError
from pipeprof.launch.launcher import base_env
from pipeprof.launch.topology import usable_cores
from pipeprof.scenario import LaunchConfig


class LocalLauncher:
    name = "local"

    def check(self, np: int, launch: LaunchConfig, gpu_count: int, engine: str = "horovod") -> None:
        if launch.hosts or launch.hostfile:
            raise PipeprofError(
                "train.engine mirrored runs one process on this host: drop -H/--hostfile "
                "(launch.hosts, launch.hostfile), or train across hosts with multi_worker_mirrored "
                "or horovod"
            )
        if gpu_count and np > gpu_count:
            raise PipeprofError(
                f"np={np} needs {np} replicas, one per GPU, but this host has {gpu_count}"
            )
        cores = usable_cores()
        if not gpu_count and np > cores and not launch.oversubscribe:
            raise PipeprofError(
                f"np={np} logical CPU devices on {cores} CPU core(s): pass --oversubscribe to "
                "share them anyway"
            )

    def env(
        self, base: dict[str, str], cwd: str, *, emulated: bool = False, local_ranks: int = 1
    ) -> dict[str, str]:
        return base_env(base, cwd)

    def ranks_argv(self, np: int, launch: LaunchConfig, rank_cmd: list[str]) -> list[str]:
        return list(rank_cmd)

    def script_argv(self, np: int, launch: LaunchConfig, cmd: list[str]) -> list[str]:
        return list(cmd)

    def rank_exit(self, line: str) -> tuple[int, int] | None:
        return None  # the one process's exit code is the launch's
