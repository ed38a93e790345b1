"""Who this process is among the ranks, read from what its launcher put in the environment:
one function that knows Horovod's, pipeprof's own (``launch.local``, torchrun's names), Open
MPI's, PMI's, PMIx's and Slurm's variables, so a rank can name itself (in its error line, its
telemetry) before any distribution starts, and under any launcher.

Launchers nest (``mpirun`` inside a Slurm allocation leaves ``SLURM_PROCID=0`` on every
rank; horovodrun with MPI sets Open MPI's variables), so the most specific wins: Horovod's,
then the MPI library's, then the process manager's."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from pipeprof.launch import local

# (rank, size, local rank, local size) variables of each launcher, most specific first
SOURCES: tuple[tuple[str, tuple[str, str, str, str]], ...] = (
    ("horovodrun", ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE")),
    ("pipeprof's local launcher", local.IDENTITY),
    (
        "Open MPI",
        (
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
        ),
    ),
    ("PMI", ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")),
    ("PMIx", ("PMIX_RANK", "PMIX_SIZE", "PMIX_LOCAL_RANK", "PMIX_LOCAL_SIZE")),
    ("Slurm", ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "")),
)


@dataclass(frozen=True)
class Identity:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    host: str = ""
    source: str = ""  # whose variables said so ("" when none: a lone process)

    def error_line(self, tag: str, message: str) -> str:
        """The line a failing rank prints for its launcher: which rank, on which host (not
        said where the launcher calls it "localhost": every rank is on this one)."""
        named = self.host and self.host != "localhost"
        where = f"rank {self.rank} on {self.host}" if named else f"rank {self.rank}"
        return f"{tag} {where}: {message}"


def slurm_counts(spec: str) -> list[int] | None:
    """Slurm's per-node counts, ``2(x3),1`` → [2, 2, 2, 1]; None when ``spec`` is not one."""
    counts: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if m is None:
            return None
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts


def slurm_local_size(env: Mapping[str, str]) -> int | None:
    """This node's task count from ``SLURM_TASKS_PER_NODE`` (``2(x3),1``: two tasks on each of
    the first three nodes, one on the fourth) and ``SLURM_NODEID``."""
    node = env.get("SLURM_NODEID", "")
    counts = slurm_counts(env.get("SLURM_TASKS_PER_NODE", ""))
    if counts is None or not node.isdigit():
        return None
    return counts[int(node)] if int(node) < len(counts) else None


def _int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name, "") if name else ""
    return int(value) if value.strip().isdigit() else None


def identity(env: Mapping[str, str] | None = None) -> Identity:
    """This process's rank, size, local rank and local size, and its host."""
    env = os.environ if env is None else env
    host = env.get("HOROVOD_HOSTNAME") or socket.gethostname()
    for source, (r, s, lr, ls) in SOURCES:
        rank = _int(env, r)
        if rank is None:
            continue
        size = _int(env, s) or rank + 1
        local_rank = _int(env, lr)
        local_size = _int(env, ls) or (slurm_local_size(env) if source == "Slurm" else None)
        return Identity(
            rank,
            size,
            rank if local_rank is None else local_rank,
            local_size or (size if local_rank is None else local_rank + 1),
            host,
            source,
        )
    return Identity(host=host)
