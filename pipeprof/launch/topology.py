"""Where ranks run: ranks per host, local ranks and cores per rank, computed once, here.

Hosts come from ``-H a:8,b:8``, a hostfile, or this host alone (``localhost:np``), read by
one parser; ranks fill each host's slots in order (as horovodrun, mpirun and srun place
them), and the launcher is given exactly that placement, so what pipeprof assumes is what
runs. Cores are the ones this process may use (its CPU affinity: taskset,
cpusets, Slurm), not the machine's; other hosts are taken to have as many.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeprof.errors import PipeprofError
from pipeprof.host import is_this_host, usable_cores
from pipeprof.scenario import LaunchConfig

_HOST_NAME = re.compile(r"[\w.-]+")  # what horovodrun and mpirun accept


_PIN = "import os,sys\nos.sched_setaffinity(0, [int(c) for c in sys.argv[1].split(',')])\nos.execvp(sys.argv[2], sys.argv[2:])\n"


def pinned_argv(argv: list[str], cores: int) -> list[str]:
    """``argv`` started on the first ``cores`` cores this process may use (one rank's share),
    before it starts anything that sizes its thread pools from them (TensorFlow does)."""
    mine = sorted(os.sched_getaffinity(0))[: max(1, cores)]
    return [sys.executable, "-c", _PIN, ",".join(map(str, mine)), *argv]


def cores_per_rank(local_ranks: int, cores: int | None = None) -> int:
    """Whole cores each of ``local_ranks`` ranks on one host gets (at least 1)."""
    return max(1, (cores or usable_cores()) // max(1, local_ranks))


def _host(name: str, slots: int, where: str) -> tuple[str, int]:
    if not _HOST_NAME.fullmatch(name):
        raise PipeprofError(
            f"{where}: '{name}' is not a host name (letters, digits, '.', '-', '_')"
        )
    if slots < 1:
        raise PipeprofError(f"{where}: host '{name}' has {slots} slots; give it at least 1")
    return name, slots


def _unique(hosts: list[tuple[str, int]], where: str) -> list[tuple[str, int]]:
    if not hosts:
        raise PipeprofError(f"{where}: no hosts given")
    seen = set()
    for name, _ in hosts:
        if name in seen:
            raise PipeprofError(
                f"{where}: host '{name}' is listed twice; give it once with all its slots"
            )
        seen.add(name)
    return hosts


def parse_hosts(hosts: str) -> list[tuple[str, int]]:
    """``node1:8,node2:8`` → [("node1", 8), ("node2", 8)]; a host without slots has 1."""
    where = f"-H {hosts!r}"
    out = []
    for item in hosts.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, slots = item.partition(":")
        try:
            out.append(_host(name, int(slots) if slots else 1, where))
        except ValueError:
            raise PipeprofError(
                f"{where}: slots of '{name}' must be an integer, got '{slots}'"
            ) from None
    return _unique(out, where)


def parse_hostfile(path: str) -> list[tuple[str, int]]:
    """A horovodrun/MPI hostfile: ``host slots=N``, ``host:N`` or ``host`` (1 slot) per line;
    ``#`` starts a comment."""
    p = Path(path)
    if not p.is_file():
        raise PipeprofError(f"--hostfile {path}: file does not exist")
    out = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"--hostfile {path}:{n}"
        try:
            if "slots=" in line:
                name, slots = line.split()[0], int(line.split("slots=", 1)[1].split()[0])
            elif ":" in line:
                name, _, count = line.partition(":")
                slots = int(count)
            else:
                name, slots = line, 1
        except ValueError:
            raise PipeprofError(f"{where}: cannot read the slot count in {line!r}") from None
        out.append(_host(name.strip(), slots, where))
    return _unique(out, f"--hostfile {path}")


def host_slots(launch: LaunchConfig) -> tuple[list[tuple[str, int]], str] | None:
    """The hosts and slots the launch names, and how it named them; None for this host alone."""
    if launch.hosts:
        return parse_hosts(launch.hosts), f"-H {launch.hosts}"
    if launch.hostfile:
        return parse_hostfile(launch.hostfile), f"--hostfile {launch.hostfile}"
    return None


@dataclass(frozen=True)
class Slot:
    """One rank's place, as Horovod assigns it."""

    host: str
    rank: int
    local_rank: int
    local_size: int


@dataclass(frozen=True)
class Topology:
    np: int
    slots: tuple[Slot, ...]  # by rank
    cores: int  # usable cores of a host (this one's; other hosts are taken to be alike)

    @property
    def ranks_by_host(self) -> dict[str, int]:
        """Ranks on each host that gets any, in Horovod's order."""
        out: dict[str, int] = {}
        for s in self.slots:
            out[s.host] = out.get(s.host, 0) + 1
        return out

    @property
    def hosts_of_ranks(self) -> dict[int, str]:
        """Each rank's host."""
        return {s.rank: s.host for s in self.slots}

    @property
    def ranks_per_host(self) -> int:
        """Ranks on the busiest host: the one whose RAM and cores run out first."""
        return max(self.ranks_by_host.values())

    @property
    def ranks_here(self) -> int:
        """Ranks this host starts (0 when the launcher is not one of the hosts)."""
        return sum(n for host, n in self.ranks_by_host.items() if is_this_host(host))

    @property
    def cores_per_rank(self) -> int:
        """Cores each rank has on the busiest host."""
        return cores_per_rank(self.ranks_per_host, self.cores)

    @property
    def hosts_arg(self) -> str:
        """horovodrun's ``-H``: exactly the slots used. Gloo starts a rank in every slot it
        is given, whatever ``-np`` says, so a host list is never passed longer than this."""
        return ",".join(f"{host}:{n}" for host, n in self.ranks_by_host.items())


def assign(np: int, launch: LaunchConfig, cores: int | None = None) -> Topology:
    """Where ``np`` ranks go for this launch config: each host's slots filled in the order
    given, ranks numbered across hosts, local ranks within one (horovodrun's
    ``get_host_assignments``, mpirun's ``--map-by slot`` and srun's block distribution alike;
    a unit test holds it to Horovod's own where Horovod is installed)."""
    named = host_slots(launch)
    hosts, what = named if named is not None else ([("localhost", np)], "localhost")
    total = sum(s for _, s in hosts)
    if np > total:
        raise PipeprofError(
            f"np={np} needs {np} slots but {what} offers {total}; add hosts or slots"
        )
    slots: list[Slot] = []
    for host, n in hosts:
        here = min(n, np - len(slots))
        slots += [Slot(host, len(slots) + i, i, here) for i in range(here)]
        if len(slots) == np:
            break
    return Topology(np=np, slots=tuple(slots), cores=cores or usable_cores())


def per_host_replicas(engine: str, np: int, launch: LaunchConfig) -> dict[str, int]:
    """Each host's replicas for ``np`` workers placed as the launch places ranks, for a
    distribution whose one process on a host drives that host's replicas; unequal replicas on
    the hosts are a one-line error (one mesh spans them all)."""
    by_host = assign(np, launch).ranks_by_host
    if len(set(by_host.values())) > 1:
        laid = ",".join(f"{h}:{n}" for h, n in by_host.items())
        raise PipeprofError(
            f"np={np}: train.engine {engine} runs one process a host with as many replicas "
            f"on each, but the hosts' slots place them {laid}; give each host the same slots, "
            "or choose --np as a multiple of them"
        )
    return by_host


def processes(dist: Any, np: int, launch: LaunchConfig, launcher: Any) -> tuple[int, LaunchConfig]:
    """The processes a launch of ``np`` workers starts, and the placement its launcher is
    given for them: one a replica; or, for a distribution whose one process on a host drives
    that host's replicas (``per_host``), one on each host the workers are placed on (one slot
    each: process ``i`` is host ``i``'s), where the launcher reaches hosts (the local one,
    ``this_host_only``, starts that one process here as it is)."""
    if not getattr(dist, "per_host", False) or getattr(launcher, "this_host_only", False):
        return np, launch
    by_host = per_host_replicas(dist.name, np, launch)
    hosts = ",".join(f"{host}:1" for host in by_host)
    return len(by_host), dataclasses.replace(launch, hosts=hosts, hostfile="")
