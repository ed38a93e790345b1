"""Processes on this host, started by pipeprof itself (``launch.launcher = "local"``).

For a distribution whose one process drives every replica (``one_process``: mirrored) it
starts that process as is: the worker count is its replicas. For one of a replica a process it
starts ``np`` copies of the command, each told who it is by ``IDENTITY`` (read by
``rank.identity``), and supervises them as a launcher does: their output merged, each one's
end said in one line (``rank_exit``), and the others ended once one fails.

    python -m pipeprof.launch.local NP CMD...
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

from pipeprof.errors import PipeprofError
from pipeprof.host import usable_cores
from pipeprof.launch.launcher import base_env, check_slots
from pipeprof.scenario import LaunchConfig

# what each process is told: rank, size, local rank, local size (torchrun's names)
IDENTITY = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
ENDED = "pipeprof {launcher} launcher: {unit} {rank} exited with {code}"  # unit: rank, node
STOP_WAIT_S = 10.0  # a rank asked to stop, before it is killed


class LocalLauncher:
    name = "local"
    this_host_only = True  # it starts processes here alone

    def __init__(self) -> None:
        self.one_process = True

    def check(self, np: int, launch: LaunchConfig, gpu_count: int, distribution: Any) -> None:
        engine = getattr(distribution, "name", "")
        # one process for every replica here (mirrored's; data_parallel's on this host alone)
        self.one_process = bool(
            getattr(distribution, "one_process", True) or getattr(distribution, "per_host", False)
        )
        if launch.hosts or launch.hostfile:
            raise PipeprofError(
                f"--launcher {self.name} starts its processes on this host (train.engine "
                f"{engine}): drop -H/--hostfile (launch.hosts, launch.hostfile), or use a "
                "launcher that reaches other hosts"
            )
        if not self.one_process:
            check_slots(np, launch, gpu_count)
            return
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
        return self.script_argv(np, launch, rank_cmd)

    def script_argv(self, np: int, launch: LaunchConfig, cmd: list[str]) -> list[str]:
        if self.one_process:
            return list(cmd)
        return [sys.executable, "-m", "pipeprof.launch.local", str(np), *cmd]

    def rank_exit(self, line: str) -> tuple[int, int] | None:
        return ended(self.name, line)


def ended(launcher: str, line: str) -> tuple[int, int] | None:
    """(rank, code) from ``launcher``'s line for a rank's end (``ENDED``), else None: also for
    a line that only begins as one (two processes' output run together on one line, as a
    dying rank's traceback did in the clean-clone CI run on a8af22f)."""
    m = re.fullmatch(
        rf"pipeprof {re.escape(launcher)} launcher: rank (\d+) exited with (-?\d+)", line
    )
    return (int(m.group(1)), int(m.group(2))) if m else None


def main(argv: list[str]) -> int:
    """Start ``np`` copies of the command and wait for them (``wait_all``)."""
    np, cmd = int(argv[0]), argv[1:]
    return wait_all(
        [
            subprocess.Popen(
                cmd, env=dict(os.environ, **dict(zip(IDENTITY, map(str, (r, np, r, np)))))
            )
            for r in range(np)
        ]
    )


def wait_all(
    procs: list[subprocess.Popen],
    launcher: str = "local",
    unit: str = "rank",
    order: list[int] | None = None,
) -> int:
    """Wait for a launch's processes (rank ``i`` is ``procs[i]``; node ``i`` where ``unit`` is
    "node", a process that starts a node's ranks), saying each one's end in one line (and
    appending its index to ``order``, the order they ended in): the first to fail ends the others (SIGTERM, then SIGKILL ``STOP_WAIT_S`` later), a
    stop signal to this process reaches them all, and the launch's code is the first failure's."""
    code, said = 0, set()

    def say_ends() -> None:
        for r, p in enumerate(procs):
            if p.returncode is not None and r not in said:
                said.add(r)
                if order is not None:
                    order.append(r)
                print(
                    ENDED.format(launcher=launcher, unit=unit, rank=r, code=p.returncode),
                    flush=True,
                )

    def stop(signum: int, _frame: Any) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
    deadline = None
    while [p.poll() for p in procs].count(None):
        say_ends()
        if code == 0 and (failed := [p.returncode for p in procs if p.returncode not in (None, 0)]):
            code, deadline = failed[0], time.monotonic() + STOP_WAIT_S
            for p in procs:
                if p.poll() is None:
                    p.terminate()
        if deadline is not None and time.monotonic() > deadline:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.02)
    say_ends()
    return code or next((p.returncode for p in procs if p.returncode), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
