"""Processes on the launch's hosts over ssh, started by pipeprof itself (``launch.launcher =
"ssh"``), as horovodrun starts its remote ranks: for a distribution that needs no launcher of
its own (Keras 3's DataParallel, whose processes meet at JAX's coordinator), where neither
horovodrun nor mpirun is wanted.

Each slot of the placement (``topology.assign``) is one process: on this host started as is,
on another host through ``ssh HOST cd CWD && env VARS CMD`` (the ranks' environment exported
by name, as mpirun's ``-x`` does, and each told who it is by ``local.IDENTITY``). A supervisor
process (``python -m pipeprof.launch.ssh PLAN -- CMD``) starts them, merges their output, says
each one's end in one line (``rank_exit``), and ends the others once one fails: a remote rank
hears of it when its ssh connection closes (``supervise.end_when_output_closes``).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from typing import Any

from pipeprof.launch import hosts, topology
from pipeprof.launch.launcher import base_env, check_slots
from pipeprof.launch.local import IDENTITY, ended, wait_all
from pipeprof.launch.mpirun import NOT_EXPORTED
from pipeprof.scenario import LaunchConfig


class ExportsByName:
    """A launcher whose processes on other hosts are given the launch's variables by name
    (``exported_env``): ``env`` keeps the names, those mpirun's ``-x`` would pass too."""

    _exported: list[str]

    def env(
        self, base: dict[str, str], cwd: str, *, emulated: bool = False, local_ranks: int = 1
    ) -> dict[str, str]:
        env = base_env(base, cwd)
        self._exported = sorted(k for k in env if not NOT_EXPORTED.fullmatch(k))
        return env


class SshLauncher(ExportsByName):
    name = "ssh"

    def __init__(self) -> None:
        self._hosts_checked = hosts.CheckedOnce()
        self._exported = []

    @staticmethod
    def available() -> bool:
        from shutil import which

        return which("ssh") is not None

    def check(self, np: int, launch: LaunchConfig, gpu_count: int, distribution: Any) -> None:
        check_slots(np, launch, gpu_count)
        self._hosts_checked(np, launch)

    def ranks_argv(self, np: int, launch: LaunchConfig, rank_cmd: list[str]) -> list[str]:
        return self.script_argv(np, launch, rank_cmd)

    def script_argv(self, np: int, launch: LaunchConfig, cmd: list[str]) -> list[str]:
        placed = topology.assign(np, launch)
        plan = {
            "slots": [[s.host, s.rank, s.local_rank, s.local_size] for s in placed.slots],
            "np": np,
            "cwd": os.getcwd(),
            "exported": self._exported,
        }
        return [sys.executable, "-m", "pipeprof.launch.ssh", json.dumps(plan), "--", *cmd]

    def rank_exit(self, line: str) -> tuple[int, int] | None:
        return ended(self.name, line)


def exported_env(names: list[str]) -> dict[str, str]:
    """What a remote node's processes are given: the variables the launch exported by name,
    and every one of pipeprof's (a user's script learns its job from them, set after the
    launcher's environment was made)."""
    return {
        k: v
        for k, v in os.environ.items()
        if (k in names or k.startswith("PIPEPROF_")) and not NOT_EXPORTED.fullmatch(k)
    }


def remote_argv(host: str, cwd: str, env: dict[str, str], cmd: list[str]) -> list[str]:
    """``cmd`` on ``host`` over ssh, in ``cwd`` with ``env`` (each variable given by value)."""
    exported = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    line = f"cd {shlex.quote(cwd)} && env {exported} {shlex.join(cmd)}"
    return hosts.ssh_argv(host, line)


def main(argv: list[str]) -> int:
    """Start a process for each slot of the plan and wait for them: the first to fail ends the
    others (SIGTERM, then SIGKILL; a remote one through its ssh client), and the launch's code
    is the first failure's."""
    plan, cmd = json.loads(argv[0]), argv[argv.index("--") + 1 :]
    procs = []
    for host, rank, local_rank, local_size in plan["slots"]:
        who = dict(zip(IDENTITY, map(str, (rank, plan["np"], local_rank, local_size))))
        if topology.is_this_host(host):
            procs.append(subprocess.Popen(cmd, env=dict(os.environ, **who)))
        else:
            env = exported_env(plan["exported"]) | who
            procs.append(
                subprocess.Popen(remote_argv(host, plan["cwd"], env, cmd), stdin=subprocess.DEVNULL)
            )
    return wait_all(procs, launcher="ssh")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
