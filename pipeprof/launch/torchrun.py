"""torchrun as the launcher (``launch.launcher = "torchrun"``, ``--launcher torchrun``): PyTorch's
own, for the engines that join by ``torch.distributed`` (train.engine ddp).

It starts ``np`` processes on this host (``--standalone``, one node), each told who it is by
the variables ``rank.identity`` reads (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), and
never restarts one (``--max-restarts=0``): a rank that fails ends the launch, and the failure is
named from torchrun's own report of its first failure (its rank and exit code), not retried.
A user's command runs as given (``--no-python``). torchrun is run as ``python -m
torch.distributed.run``, the module its ``torchrun`` script calls, from the same Python.

Across hosts a torchrun starts on each node, and the ddp engine's store would have to be on
the first: pipeprof starts neither yet, and says so in one line where hosts are named.
"""

from __future__ import annotations

import re
import sys
from importlib.util import find_spec
from typing import Any

from pipeprof.errors import PipeprofError
from pipeprof.launch.launcher import base_env, check_slots
from pipeprof.scenario import LaunchConfig

# torchrun's report of a failed process: "rank      : 1 (local_rank: 1)", then
# "exitcode  : 3 (pid: 6496)" a line later, under "Root Cause (first observed failure):"
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+) \(local_rank: \d+\)")
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+) \(pid: \d+\)")
_ROOT = "Root Cause (first observed failure):"
PACKAGE = "torch"  # the Python package torchrun comes with (not the framework's plugin name)


class TorchrunLauncher:
    name = "torchrun"
    this_host_only = True  # one node: across hosts each would need a torchrun of its own
    needs = "PyTorch (torch.distributed.run)"

    def __init__(self) -> None:
        self._rank: int | None = None
        self._root = False

    @staticmethod
    def available() -> bool:
        return find_spec(PACKAGE) is not None

    def check(self, np: int, launch: LaunchConfig, gpu_count: int, distribution: Any) -> None:
        engine = getattr(distribution, "name", "")
        if "torchrun" not in getattr(distribution, "launchers", ()):
            raise PipeprofError(
                f"--launcher torchrun starts processes that join by torch.distributed; "
                f"train.engine {engine} does not (use --engine ddp)"
            )
        if launch.hosts or launch.hostfile:
            raise PipeprofError(
                "--launcher torchrun: pipeprof starts it on this host only (one node), not yet "
                "on the hosts named (-H/--hostfile)"
            )
        if not self.available():
            raise PipeprofError(
                "--launcher torchrun needs PyTorch, whose torch.distributed.run is torchrun: "
                "pip install 'pipeprof[torch]'"
            )
        check_slots(np, launch, gpu_count)

    def env(
        self, base: dict[str, str], cwd: str, *, emulated: bool = False, local_ranks: int = 1
    ) -> dict[str, str]:
        return base_env(base, cwd)

    def ranks_argv(self, np: int, launch: LaunchConfig, rank_cmd: list[str]) -> list[str]:
        return self.script_argv(np, launch, rank_cmd)

    def script_argv(self, np: int, launch: LaunchConfig, cmd: list[str]) -> list[str]:
        return [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
            f"--nproc-per-node={np}", "--max-restarts=0", "--no-python", *cmd,
        ]  # fmt: skip

    def rank_exit(self, line: str) -> tuple[int, int] | None:
        """The first failure torchrun reports, as (rank, exit code): its "Root Cause" entry
        (the entries above it are the ranks it ended after that one)."""
        if line.strip() == _ROOT:
            self._root, self._rank = True, None
        elif self._root and (m := _RANK.match(line)):
            self._rank = int(m.group(1))
        elif self._root and self._rank is not None and (m := _EXIT.match(line)):
            rank, self._root, self._rank = self._rank, False, None
            return rank, int(m.group(1))
        return None
