"""horovodrun, pipeprof's first launcher (``launch.launcher = "horovodrun"``).

The command lines and environment are pure functions (tested by what they build); the
launch itself is supervised by ``launch.runner``. Ranks are placed as ``topology.assign``
says and passed to horovodrun as exactly that ``-H`` list (a hostfile is read by pipeprof's
parser), so what pipeprof assumes is what runs.
"""

from __future__ import annotations

import math
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from pipeprof.errors import PipeprofError
from pipeprof.launch import hosts, topology
from pipeprof.launch.launcher import base_env, check_slots
from pipeprof.scenario import LaunchConfig


def find_horovodrun() -> str:
    beside = Path(sys.executable).parent / "horovodrun"
    found = str(beside) if beside.exists() else shutil.which("horovodrun")
    if not found:
        raise PipeprofError(
            "horovodrun not found: train.engine horovod needs Horovod: pip install "
            "'pipeprof[horovod]' (bash scripts/setup.sh builds it), or use --engine mirrored"
        )
    return found


def horovodrun_argv(
    np: int, launch: LaunchConfig, worker: list[str], horovodrun: str = "horovodrun"
) -> list[str]:
    """The horovodrun command line that starts ``np`` copies of ``worker``, placed as
    ``topology.assign`` says (a hostfile is read by pipeprof's parser and passed as ``-H``)."""
    placed = topology.assign(np, launch)
    argv = [horovodrun, "-np", str(np), "-H", placed.hosts_arg]
    argv.append("--gloo" if launch.controller == "gloo" else "--mpi")
    # A launch that stays on this host talks over loopback, and horovodrun then demands that
    # the interface named carry 127.0.0.1 ("No interface is found for address 127.0.0.1"):
    # np=1 of a cluster's compare failed so. The interface is for ranks on other hosts.
    if launch.network_interface and placed.ranks_here < np:
        argv += ["--network-interface", launch.network_interface]
    return argv + worker


def own_ranks_argv(np: int, launch: LaunchConfig, worker: list[str]) -> list[str]:
    """``horovodrun_argv`` for pipeprof's own ranks, run by ``launch.hvdrun``: the same launch
    without horovodrun's build probe, which the ranks make themselves."""
    return [
        sys.executable,
        "-m",
        "pipeprof.launch.hvdrun",
        *horovodrun_argv(np, launch, worker)[1:],
    ]


# In emulation many ranks share a few cores; Horovod's default 1 ms negotiation cycle then
# costs each rank ~12% of a core at np=8 (measured), which a real node's spare cores absorb.
EMULATION_CYCLE_TIME_MS = "5"


# Every rank must reach Gloo's rendezvous within HOROVOD_GLOO_TIMEOUT_SECONDS (30 s by
# default). Importing TensorFlow takes a few CPU-seconds per rank, so 32 ranks on 2 cores
# miss it (measured: rank 0 aborted at np=32 here). Allow this much per rank per local core.
RENDEZVOUS_S_PER_RANK_PER_CORE = 8.0


def rendezvous_timeout_s(local_ranks: int, cores: int) -> int:
    return max(30, math.ceil(RENDEZVOUS_S_PER_RANK_PER_CORE * local_ranks / max(1, cores)))


def worker_env(
    base: dict[str, str], cwd: str, emulated: bool = False, local_ranks: int = 1
) -> dict[str, str]:
    """The ranks' environment under horovodrun. ``local_ranks``: the most ranks this host
    will start at once (sets the rendezvous timeout unless given)."""
    env = base_env(base, cwd)
    if emulated:
        env.setdefault("HOROVOD_CYCLE_TIME", EMULATION_CYCLE_TIME_MS)
    env.setdefault(
        "HOROVOD_GLOO_TIMEOUT_SECONDS",
        str(rendezvous_timeout_s(local_ranks, topology.usable_cores())),
    )
    return env


# What `horovodrun --check-build` prints, without its six more imports of TensorFlow: the
# part of `pipeprof doctor`'s probe (a subprocess that has imported TensorFlow) that asks
# Horovod; it fills ``out`` with "horovod", "horovod_build" or "horovod_error".
BUILD_PROBE = r"""
try:
    import glob
    import horovod
    out["horovod_version"] = horovod.__version__
    import horovod.tensorflow as hvd
    root = os.path.dirname(horovod.__file__)
    controllers = {"MPI": bool(hvd.mpi_built()), "Gloo": bool(hvd.gloo_built())}
    out["horovod_build"] = {
        "frameworks": {"TensorFlow": True, "PyTorch": bool(glob.glob(os.path.join(root, "torch", "mpi_lib_v2*"))),
                       "MXNet": bool(glob.glob(os.path.join(root, "mxnet", "mpi_lib*")))},
        "controllers": controllers,
        "tensor operations": {"NCCL": bool(hvd.nccl_built()), "DDL": bool(hvd.ddl_built()),
                              "CCL": bool(hvd.ccl_built()), **controllers}}
except Exception as exc:
    out["horovod_error"] = f"{type(exc).__name__}: {exc}"
"""


# How horovodrun says a rank ended: its own line under Gloo (the rank is the process's
# index); under MPI, mpirun's line for a rank ended by a signal, and its two lines for the
# first rank that exited non-zero ("Process name: [[JOB,1],RANK]", then "Exit code: N")
_GLOO_EXIT = re.compile(r"Process (\d+) exit with status code (-?\d+)\.")
_MPI_SIGNAL = re.compile(
    r"mpirun noticed that process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)"
)
_MPI_NAME = re.compile(r"\s*Process name: \[\[\d+,\d+\],(\d+)\]")
_MPI_CODE = re.compile(r"\s*Exit code:\s*(-?\d+)")


class ExitLines:
    """Reads horovodrun's lines for a rank's end, one line at a time (mpirun's take two)."""

    def __init__(self) -> None:
        self._named: int | None = None  # the rank mpirun just named, its exit code to come

    def __call__(self, line: str) -> tuple[int, int] | None:
        """(rank, code) when ``line`` completes a rank's end (a signal as a shell's 128 + N)."""
        if (m := _GLOO_EXIT.match(line)) is not None:
            return int(m.group(1)), int(m.group(2))
        if (m := _MPI_SIGNAL.match(line)) is not None:
            return int(m.group(1)), 128 + int(m.group(2))
        if (m := _MPI_NAME.match(line)) is not None:
            self._named = int(m.group(1))
        elif self._named is not None and (m := _MPI_CODE.match(line)) is not None:
            rank, self._named = self._named, None
            return rank, int(m.group(1))
        return None


class HorovodLauncher:
    """``launch.launcher = "horovodrun"``: Gloo or MPI as ``launch.controller`` says."""

    name = "horovodrun"
    needs = "Horovod"  # what a host without horovodrun lacks

    @staticmethod
    def available() -> bool:
        try:
            find_horovodrun()
        except PipeprofError:
            return False
        return True

    def __init__(self) -> None:
        self._hosts_checked = hosts.CheckedOnce()
        self.rank_exit = ExitLines()

    def check(self, np: int, launch: LaunchConfig, gpu_count: int, distribution: Any) -> None:
        check_slots(np, launch, gpu_count)
        find_horovodrun()
        self._hosts_checked(np, launch)

    def env(
        self, base: dict[str, str], cwd: str, *, emulated: bool = False, local_ranks: int = 1
    ) -> dict[str, str]:
        return worker_env(base, cwd, emulated=emulated, local_ranks=local_ranks)

    def ranks_argv(self, np: int, launch: LaunchConfig, rank_cmd: list[str]) -> list[str]:
        self.rank_exit = ExitLines()  # each launch's lines read afresh
        return own_ranks_argv(np, launch, rank_cmd)

    def script_argv(self, np: int, launch: LaunchConfig, cmd: list[str]) -> list[str]:
        self.rank_exit = ExitLines()
        return horovodrun_argv(np, launch, cmd, horovodrun=find_horovodrun())
