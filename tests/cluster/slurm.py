"""A Slurm cluster on the test cluster's hosts (tests/cluster/netns.py): a munge daemon, a
controller on the first host and a slurmd on each, Debian's slurm-wlm 22.05 started by the
suite, never as a service, and stopped with everything it started.

Its files (munge key and socket, slurm.conf, state, spool, logs) live in the cluster's folder;
every client command reads slurm.conf through ``SLURM_CONF`` (``env``), so the machine's own
Slurm configuration, if any, is never read or written. No cgroups are used (process tracking
by the process tree, ``task/none``), but slurmd 22.05 will not start without the cgroup v1
hierarchies mounted, and ``ip netns`` gives each host a fresh /sys: each slurmd mounts them in
its host's own mount namespace first.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tests.cluster.netns import Cluster

PROGRAMS = ("munged", "slurmctld", "slurmd", "srun", "salloc", "sbatch", "scancel", "squeue")
CTL_PORT, SLURMD_PORT = 16817, 16818  # not Slurm's defaults: a machine's own Slurm keeps them
CGROUPS = ("cpuset", "memory", "freezer", "devices")
START_TIMEOUT_S = 30.0


def unavailable() -> str | None:
    """Why Slurm cannot run here (None when it can)."""
    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    if missing:
        return (
            f"Slurm is not installed ({', '.join(missing)} missing): bash scripts/setup.sh test "
            "installs Debian's slurmctld, slurmd, slurm-client and munge as root"
        )
    return None


class Slurm:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.root = cluster.root / "slurm"
        self.conf = self.root / "slurm.conf"
        self.socket = self.root / "munge.socket"
        self.procs: list[subprocess.Popen] = []

    @property
    def env(self) -> dict[str, str]:
        return dict(self.cluster.env, SLURM_CONF=str(self.conf))

    def start(self) -> Slurm:
        stop_leftovers(self.root)
        shutil.rmtree(self.root, ignore_errors=True)
        self.root.mkdir(mode=0o755, parents=True)
        self.root.chmod(0o755)  # munge's socket must be reachable by every user
        try:
            self._munge()
            self._files()
            h0 = self.cluster.hosts[0]
            # -f names the folder on each daemon's command line: how its leftovers are found
            ctl = ["slurmctld", "-D", "-i", "-f", str(self.conf)]
            self._spawn("slurmctld", self.cluster.command(h0, ctl))
            for host in self.cluster.hosts:
                mounts = "; ".join(
                    f"mkdir -p /sys/fs/cgroup/{c} && mount -t cgroup -o {c} cgroup /sys/fs/cgroup/{c}"
                    for c in CGROUPS
                )
                shell = (
                    f"mount -t tmpfs cgroup_root /sys/fs/cgroup && {mounts} && "
                    f"exec slurmd -D -N {host.name} -f {self.conf}"
                )
                self._spawn(f"slurmd-{host.name}", self.cluster.command(host, ["sh", "-c", shell]))
            self._wait_idle()
        except BaseException:
            self.stop()
            raise
        return self

    def _munge(self) -> None:
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--key-file={key}",
                f"--socket={self.socket}",
                f"--pid-file={self.root / 'munged.pid'}",
                f"--log-file={self.root / 'munged.log'}",
                f"--seed-file={self.root / 'munge.seed'}",
            ],
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.socket.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"munged did not start: {self.log('munged')}")
            time.sleep(0.1)

    def _files(self) -> None:
        hosts = self.cluster.hosts
        (self.root / "state").mkdir()
        for host in hosts:
            (self.root / f"spool-{host.name}").mkdir()
        (self.root / "cgroup.conf").write_text(
            "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n"
        )
        nodes = "\n".join(f"NodeName={h.name} NodeAddr={h.ip} CPUs=1 State=UNKNOWN" for h in hosts)
        r = self.root
        self.conf.write_text(
            f"""ClusterName=pipeprof
SlurmctldHost={hosts[0].name}({hosts[0].ip})
SlurmctldPort={CTL_PORT}
SlurmdPort={SLURMD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.socket}
CredType=cred/munge
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool-%n
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd-%n.pid
SlurmctldLogFile={r}/slurmctld.log
SlurmdLogFile={r}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
KillWait=5
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
{nodes}
PartitionName=test Nodes={",".join(h.name for h in hosts)} Default=YES MaxTime=INFINITE State=UP
"""
        )

    def _spawn(self, name: str, argv: list[str]) -> None:
        with open(self.root / f"{name}.out", "ab") as out:
            self.procs.append(
                subprocess.Popen(
                    argv,
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def _wait_idle(self) -> None:
        """Until every node is idle in the controller's view."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            got = self.run("sinfo", "-h", "-N", "-o", "%N %t")
            states = dict(line.split() for line in got.stdout.splitlines() if line.strip())
            if got.returncode == 0 and set(states) == {h.name for h in self.cluster.hosts}:
                if set(states.values()) == {"idle"}:
                    return
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                raise RuntimeError(
                    f"Slurm did not come up ({states or got.stderr.strip()}): "
                    + " | ".join(
                        self.log(n) for n in ("slurmctld", "slurmd-" + self.cluster.hosts[0].name)
                    )
                )
            time.sleep(0.3)

    def command(self, *argv: str) -> list[str]:
        """``argv`` run on the first host, as a user logged in there runs Slurm's commands."""
        return self.cluster.command(self.cluster.hosts[0], list(argv))

    def run(self, *argv: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.command(*argv), env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def log(self, name: str) -> str:
        path = self.root / f"{name}.out"
        return path.read_text(errors="replace")[-1500:] if path.exists() else f"({name}: no log)"

    def stop(self) -> None:
        for proc in reversed(self.procs):  # the daemons, then munge
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=3)  # slurmctld saves its state: a test's is not kept
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()
        stop_leftovers(self.root)
        shutil.rmtree(self.root, ignore_errors=True)

    def is_daemon(self, process: str) -> bool:
        """Whether a line of ``Cluster.processes`` is one of this Slurm's daemons (the
        controller's script helper among them; a job's processes and slurmstepd are not)."""
        return str(self.root) in process or process.endswith(": slurmscriptd")


def leftovers(root: Path) -> list[str]:
    """This Slurm's daemons still running (each names its folder: munged its key, slurmctld
    and slurmd their slurm.conf); a job's processes run in the cluster's hosts, whose
    namespaces the cluster's own tear-down ends."""
    found = subprocess.run(["pgrep", "-af", str(root)], capture_output=True, text=True).stdout
    return [line for line in found.splitlines() if line.strip() and "pgrep" not in line]


def stop_leftovers(root: Path) -> None:
    """End what an earlier run left (interrupted before its tear-down)."""
    subprocess.run(["pkill", "-KILL", "-f", str(root)], capture_output=True)
