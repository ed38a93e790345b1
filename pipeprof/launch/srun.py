"""Slurm's srun as the launcher (``launch.launcher = "srun"``, the default inside an allocation).

Inside ``salloc`` or an ``sbatch`` script, each worker count runs as one job step of the
allocation, with no ssh and no horovodrun: ``srun`` starts one task per rank on the nodes
pipeprof placed them on (``--distribution=arbitrary`` with one node named per task, so what
pipeprof assumes is what runs). For Horovod, each task becomes a Horovod rank through
``launch.srun_rank`` (rank, size, local and cross rank from Slurm's task id and the
placement), and the ranks meet at a Gloo rendezvous that this process serves (Horovod's own
HTTP rendezvous server, as horovodrun runs it). A distribution that does not join through
Horovod (``joins_through_horovod``: Keras's DataParallel, whose processes meet at JAX's
coordinator) gets its tasks as srun starts them, each knowing itself from Slurm's variables.

The allocation is read from Slurm's variables: its nodes (``SLURM_JOB_NODELIST``, a hostlist
such as ``gpu[01-04]``), and its slots per node: the tasks asked for (``-n``,
``--ntasks-per-node``: ``SLURM_TASKS_PER_NODE``), else the CPUs granted
(``SLURM_JOB_CPUS_PER_NODE``). A worker count beyond them is refused with the numbers.
``scancel`` or a stop signal reaches srun, which ends every task of the step on every node.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeprof.errors import PipeprofError
from pipeprof.launch import hosts, topology
from pipeprof.launch.horovod import worker_env
from pipeprof.rank.identity import slurm_counts
from pipeprof.scenario import LaunchConfig

_BRACKET = re.compile(r"\[([^\]]*)\]")


def _split_top(spec: str) -> list[str]:
    """``a[1,3],b`` → ["a[1,3]", "b"]: commas outside brackets only."""
    parts, depth, cur = [], 0, ""
    for ch in spec:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p for p in [*parts, cur] if p.strip()]


def _range(item: str, where: str) -> list[str]:
    lo, _, hi = item.partition("-")
    if not lo.isdigit() or (hi and not hi.isdigit()) or (hi and int(hi) < int(lo)):
        raise PipeprofError(f"{where}: cannot read the range '{item}'")
    if not hi:
        return [lo]
    return [str(i).zfill(len(lo)) for i in range(int(lo), int(hi) + 1)]


def expand_nodelist(spec: str, where: str = "SLURM_JOB_NODELIST") -> list[str]:
    """A Slurm hostlist as ``scontrol show hostnames`` expands it: ``n[01-03,7],gpu1`` →
    n01 n02 n03 n7 gpu1 (zero padding kept from the range's first bound)."""
    out: list[str] = []
    for part in _split_top(spec.strip()):
        names = [""]
        pos = 0
        for m in _BRACKET.finditer(part):
            items = [x for i in m.group(1).split(",") for x in _range(i.strip(), where)]
            names = [n + part[pos : m.start()] + x for n in names for x in items]
            pos = m.end()
        if "[" in part[pos:] or "]" in part[pos:]:
            raise PipeprofError(f"{where}: cannot read the hostlist '{spec}'")
        out += [n + part[pos:] for n in names]
    if not out:
        raise PipeprofError(f"{where}: no nodes in '{spec}'")
    return out


def per_node(spec: str, where: str) -> list[int]:
    """``2(x3),1`` → [2, 2, 2, 1] (Slurm's per-node counts); a one-line error naming ``where``."""
    counts = slurm_counts(spec)
    if counts is None:
        raise PipeprofError(f"{where}: cannot read '{spec}' (expected e.g. 2(x3),1)")
    return counts


@dataclass(frozen=True)
class Allocation:
    """The Slurm job this process runs inside: its nodes and each node's slots and CPUs."""

    job_id: str
    nodelist: str  # as Slurm wrote it ("pp-h[0-1]")
    nodes: tuple[str, ...]
    slots: tuple[int, ...]  # per node: tasks asked for, else CPUs granted
    cpus: tuple[int, ...]  # per node
    slots_are: str  # "task" or "CPU": what a slot is in this allocation

    @property
    def hosts_arg(self) -> str:
        """The allocation as a host list (``-H``'s form), every node with its slots."""
        return ",".join(f"{n}:{s}" for n, s in zip(self.nodes, self.slots))

    def describe(self) -> str:
        if len(set(self.slots)) == 1:
            each = f"{self.slots[0]} {self.slots_are}(s) on each of {len(self.nodes)} node(s)"
        else:
            each = ", ".join(f"{s} on {n}" for n, s in zip(self.nodes, self.slots))
            each = f"{self.slots_are}s: {each}"
        return f"Slurm allocation {self.job_id} ({self.nodelist}: {each})"


def in_step(env: Mapping[str, str]) -> bool:
    """Whether this process is a task of a job step (``srun --pty bash``), not the allocation's
    own shell or batch script: the step holds CPUs, and its variables describe the step."""
    return bool(env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID"))


def allocation(env: Mapping[str, str]) -> Allocation | None:
    """The allocation ``env`` says this process is inside (salloc, sbatch, or a step of
    either), or None. The job's variables, never the step's: inside a step, the tasks asked
    for are the step's, so a slot is a CPU of the job."""
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not job or not nodelist:
        return None
    nodes = expand_nodelist(nodelist)
    counts: dict[str, list[int]] = {}
    if cpus_spec := env.get("SLURM_JOB_CPUS_PER_NODE", ""):
        counts["SLURM_JOB_CPUS_PER_NODE"] = per_node(cpus_spec, "SLURM_JOB_CPUS_PER_NODE")
    tasks_spec = env.get("SLURM_TASKS_PER_NODE", "")
    asked_tasks = bool(env.get("SLURM_NTASKS") or env.get("SLURM_NTASKS_PER_NODE"))
    if asked_tasks and tasks_spec and not in_step(env):
        counts["SLURM_TASKS_PER_NODE"] = per_node(tasks_spec, "SLURM_TASKS_PER_NODE")
    for name, per in counts.items():
        if len(per) != len(nodes):
            raise PipeprofError(
                f"SLURM_JOB_NODELIST={nodelist} names {len(nodes)} node(s) but "
                f"{name}={env[name]} covers {len(per)}"
            )
    cpus = counts.get("SLURM_JOB_CPUS_PER_NODE", [1] * len(nodes))
    if "SLURM_TASKS_PER_NODE" in counts:
        slots, kind = counts["SLURM_TASKS_PER_NODE"], "task"
    else:
        slots, kind = cpus, "CPU"
    return Allocation(job, nodelist, tuple(nodes), tuple(slots), tuple(cpus), kind)


def required_allocation(env: Mapping[str, str]) -> Allocation:
    found = allocation(env)
    if found is None:
        raise PipeprofError(
            "--launcher srun: not inside a Slurm allocation (SLURM_JOB_ID is not set); run "
            "pipeprof inside salloc or an sbatch script, or use --launcher horovodrun"
        )
    return found


def find_srun() -> str:
    found = shutil.which("srun")
    if not found:
        raise PipeprofError("--launcher srun: srun not found on PATH (Slurm's client commands)")
    return found


# srun's own lines for a task's end: "srun: error: node1: task 1: Exited with exit code 3",
# "srun: error: node0: tasks 0-1: Killed", "... task 2: Out Of Memory"
_TASK_END = re.compile(
    r"srun: error: \S+: tasks? (\d+)(?:[-,][\d,-]*)?: "
    r"(?:Exited with exit code (\d+)|(Killed|Out Of Memory)|(Terminated))"
)


def srun_exit(line: str) -> tuple[int, int] | None:
    """(rank, code) from srun's line for a task's end (killed, or by the OOM killer, as
    128 + 9; terminated 128 + 15)."""
    m = _TASK_END.search(line)
    if m is None:
        return None
    code = int(m.group(2)) if m.group(2) else 137 if m.group(3) else 143
    return int(m.group(1)), code


def srun_argv(
    np: int, launch: LaunchConfig, alloc: Allocation, cmd: list[str], *, overlap: bool = False
) -> list[str]:
    """The job step that starts ``np`` tasks on the nodes ``topology.assign`` places them on,
    each with its share of its node's CPUs; ``overlap``: sharing the CPUs of the step this
    process runs in (Slurm 20.11 on gives a step's CPUs to it alone otherwise)."""
    topo = topology.assign(np, launch)
    cpus = dict(zip(alloc.nodes, alloc.cpus))
    per_rank = min(max(1, cpus.get(h, 1) // n) for h, n in topo.ranks_by_host.items())
    return [
        find_srun(),
        f"--ntasks={np}",
        f"--nodes={len(topo.ranks_by_host)}",
        "--distribution=arbitrary",
        f"--nodelist={','.join(s.host for s in topo.slots)}",
        f"--cpus-per-task={per_rank}",
        "--kill-on-bad-exit=1",  # a rank that fails ends the step, as under horovodrun
        *(["--overlap"] if overlap else []),
        *cmd,
    ]


class SrunLauncher:
    """``launch.launcher = "srun"``: a job step per worker count; Horovod's Gloo controller for
    Horovod's ranks."""

    name = "srun"

    @staticmethod
    def claims(env: Mapping[str, str], named: bool) -> tuple[bool, str] | None:
        """Whether ``launch.launcher = "auto"`` is this launcher inside a Slurm allocation
        (True, and why), or why not (False: the hosts are named, srun is missing); None
        outside one."""
        alloc = allocation(env)
        if alloc is None:
            return None
        if named:
            return (
                False,
                "the default where -H/--hostfile (launch.hosts, launch.hostfile) names the hosts",
            )
        if shutil.which("srun") is None:
            return False, f"inside Slurm allocation {alloc.job_id}, but srun is not on PATH"
        return True, "the default inside a Slurm allocation"

    @classmethod
    def settle(
        cls, launch: LaunchConfig, env: Mapping[str, str], why: str
    ) -> tuple[LaunchConfig, str]:
        """The launch with the allocation's nodes as its hosts; a one-line error outside an
        allocation, or with hosts of the user's."""
        alloc = required_allocation(env)
        if launch.hostfile or launch.hosts not in ("", alloc.hosts_arg):  # the latter: settled
            raise PipeprofError(
                "--launcher srun places ranks on the Slurm allocation's nodes: drop -H/--hostfile "
                "(and launch.hosts, launch.hostfile), or use --launcher horovodrun or mpirun"
            )
        return (
            dataclasses.replace(launch, launcher=cls.name, hosts=alloc.hosts_arg),
            f"launcher {cls.name} ({why}; {alloc.describe()})",
        )

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._env = os.environ if env is None else env
        self._rendezvous: Any = None  # horovod's RendezvousServer, started at the first launch
        self._port = 0
        self._horovod = True  # the ranks join through Horovod (its rendezvous served here)

    def rank_exit(self, line: str) -> tuple[int, int] | None:
        return srun_exit(line)

    def check(self, np: int, launch: LaunchConfig, gpu_count: int, distribution: Any) -> None:
        alloc = required_allocation(self._env)
        find_srun()
        self._horovod = bool(getattr(distribution, "joins_through_horovod", True))
        if self._horovod and launch.controller == "mpi":
            raise PipeprofError(
                "--launcher srun starts ranks with Horovod's Gloo controller; for MPI inside "
                "the allocation use --launcher mpirun --mpi"
            )
        if np > sum(alloc.slots):
            raise PipeprofError(
                f"np={np} needs {np} slots but {alloc.describe()} offers {sum(alloc.slots)}; "
                "ask salloc/sbatch for more (-n, --ntasks-per-node, -N) or lower --np"
            )
        if alloc.slots_are == "CPU" and 0 < gpu_count < np:
            raise PipeprofError(
                f"np={np}: {alloc.describe()} asked for no tasks, so its slots are CPUs and "
                f"{alloc.nodes[0]} would get ranks past its {gpu_count} GPU(s); ask salloc/sbatch "
                f"for one task per GPU (--ntasks-per-node={gpu_count})"
            )
        if not self._horovod:
            return
        try:
            import horovod.runner.http.http_server  # noqa: F401  (the rendezvous it serves)
        except ImportError as exc:
            raise PipeprofError(f"--launcher srun: cannot import Horovod's runner: {exc}") from None

    def env(
        self, base: dict[str, str], cwd: str, *, emulated: bool = False, local_ranks: int = 1
    ) -> dict[str, str]:
        return worker_env(base, cwd, emulated=emulated, local_ranks=local_ranks)

    def _wrapped(self, np: int, launch: LaunchConfig, cmd: list[str]) -> list[str]:
        if not self._horovod:  # each task knows itself from Slurm's variables
            alloc = required_allocation(self._env)
            return srun_argv(np, launch, alloc, cmd, overlap=in_step(self._env))
        from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
        from horovod.runner.http.http_server import RendezvousServer

        topo = topology.assign(np, launch)
        if self._rendezvous is None:
            self._rendezvous = RendezvousServer()
            self._port = self._rendezvous.start()  # serves until this process ends
        self._rendezvous.init(get_host_assignments(parse_hosts(topo.hosts_arg), np))
        others = tuple(h for h in topo.ranks_by_host if not topology.is_this_host(h))
        if not others:
            address = "127.0.0.1"
        elif len(others) < len(topo.ranks_by_host):  # this host is one of the ranks'
            address = hosts.address_for(launch.network_interface, others)
        else:  # a host outside the allocation (a login node): it may lack the ranks' interface
            address = hosts.address_for("", others)
        alloc = required_allocation(self._env)
        wrapper = [sys.executable, "-m", "pipeprof.launch.srun_rank", topo.hosts_arg]
        wrapper += [f"{address}:{self._port}", launch.network_interface, "--"]
        return srun_argv(np, launch, alloc, wrapper + cmd, overlap=in_step(self._env))

    def ranks_argv(self, np: int, launch: LaunchConfig, rank_cmd: list[str]) -> list[str]:
        return self._wrapped(np, launch, rank_cmd)

    def script_argv(self, np: int, launch: LaunchConfig, cmd: list[str]) -> list[str]:
        return self._wrapped(np, launch, cmd)
