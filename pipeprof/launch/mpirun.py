"""Open MPI's mpirun, called directly (``launch.launcher = "mpirun"``): the ranks start without
horovodrun and Horovod's MPI controller joins them, as on clusters where mpirun and a hostfile
are how jobs start. For a distribution whose ranks do not join over MPI
(multi_worker_mirrored's workers read their rank from Open MPI's variables and write their
TF_CONFIG) mpirun only starts them, so Horovod need not be installed at all.

The command line is what horovodrun --mpi would run, built here so that Open MPI's settings
are the user's to pass (OMPI_MCA_* variables reach mpirun unchanged): one rank per slot of
the ``-H`` list ``topology.assign`` makes, no binding, TCP between hosts (on
``--network-interface`` when given), and every variable of the ranks' environment exported
to the other hosts by name. mpirun's own lines for a rank's end are read as horovodrun's are
under MPI (``horovod.ExitLines``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from typing import Any

from pipeprof.errors import PipeprofError
from pipeprof.launch import hosts, topology
from pipeprof.launch.horovod import ExitLines, worker_env
from pipeprof.launch.launcher import check_slots
from pipeprof.scenario import LaunchConfig

# not exported to other hosts: a shell's own, and what names this host's devices
NOT_EXPORTED = re.compile(r"BASH_FUNC_.*|OLDPWD|PWD|SHLVL|_|HOSTNAME|.*CUDA_VISIBLE_DEVICES")
# Horovod with MPI is probed in a child, since the probe imports TensorFlow (a few seconds)
MPI_PROBE = "import sys, horovod.tensorflow as h; sys.exit(0 if h.mpi_built() else 3)"


def find_mpirun() -> str:
    found = shutil.which("mpirun")
    if not found:
        raise PipeprofError(
            "mpirun not found: install Open MPI (Debian: apt-get install openmpi-bin "
            "libopenmpi-dev), and for train.engine horovod Horovod built with it "
            "(HOROVOD_WITH_MPI=1), or use --launcher horovodrun"
        )
    return found


def mpirun_argv(
    np: int, launch: LaunchConfig, cmd: list[str], exported: list[str], mpirun: str = "mpirun"
) -> list[str]:
    """The mpirun command line that starts ``np`` copies of ``cmd`` on the hosts
    ``topology.assign`` places them on, exporting the variables named in ``exported``."""
    argv = [mpirun]
    if os.geteuid() == 0:  # Open MPI refuses root unless told (containers often run as root)
        argv.append("--allow-run-as-root")
    argv += ["--tag-output", "-np", str(np), "-H", topology.assign(np, launch).hosts_arg]
    argv += ["-bind-to", "none", "-map-by", "slot", "-mca", "pml", "ob1", "-mca", "btl", "^openib"]
    if launch.oversubscribe:
        argv.append("--oversubscribe")
    if launch.network_interface:
        iface = launch.network_interface
        argv += ["-mca", "btl_tcp_if_include", iface, "-mca", "oob_tcp_if_include", iface]
        argv += ["-x", f"NCCL_SOCKET_IFNAME={iface}"]
    for name in exported:
        argv += ["-x", name]
    return argv + cmd


class MpirunLauncher:
    """``launch.launcher = "mpirun"``: Horovod's MPI controller, started by mpirun itself."""

    name = "mpirun"

    @staticmethod
    def available() -> bool:
        return shutil.which("mpirun") is not None

    def __init__(self) -> None:
        self._hosts_checked = hosts.CheckedOnce()
        self._probed = False
        self._exported: list[str] = []
        self.rank_exit = ExitLines()

    def check(self, np: int, launch: LaunchConfig, gpu_count: int, distribution: Any) -> None:
        check_slots(np, launch, gpu_count)
        find_mpirun()
        # ranks that join through Horovod's MPI controller need it built; workers that only
        # read their rank (tf.distribute's) need no Horovod
        if distribution.joins_through_horovod and not self._probed:
            probe = subprocess.run(
                [sys.executable, "-c", MPI_PROBE], capture_output=True, text=True, timeout=300
            )
            if probe.returncode == 3:
                raise PipeprofError(
                    "--launcher mpirun: this Horovod was built without MPI; rebuild it with "
                    "HOROVOD_WITH_MPI=1 (bash scripts/setup.sh test does), or use --launcher "
                    "horovodrun"
                )
            if probe.returncode != 0:
                last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
                raise PipeprofError(f"--launcher mpirun: cannot import Horovod: {last}")
            self._probed = True
        self._hosts_checked(np, launch)

    def env(
        self, base: dict[str, str], cwd: str, *, emulated: bool = False, local_ranks: int = 1
    ) -> dict[str, str]:
        env = worker_env(base, cwd, emulated=emulated, local_ranks=local_ranks)
        self._exported = sorted(k for k in env if not NOT_EXPORTED.fullmatch(k))
        return env

    def ranks_argv(self, np: int, launch: LaunchConfig, rank_cmd: list[str]) -> list[str]:
        self.rank_exit = ExitLines()  # each launch's lines read afresh
        return mpirun_argv(np, launch, rank_cmd, self._exported, mpirun=find_mpirun())

    def script_argv(self, np: int, launch: LaunchConfig, cmd: list[str]) -> list[str]:
        self.rank_exit = ExitLines()
        return mpirun_argv(np, launch, cmd, self._exported, mpirun=find_mpirun())
