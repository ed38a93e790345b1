"""One rank under srun, made a Horovod rank before its command starts (``launch.srun``).

``python -m pipeprof.launch.srun_rank HOSTS ADDR:PORT IFACE -- COMMAND...`` runs on every task
of the job step: it reads the task's place from Slurm (``SLURM_PROCID``), finds its slot in
``HOSTS`` (the step's placement, ``host:ranks,...``, in rank order), sets the variables
horovodrun would have set for that slot (rank, size, local and cross rank, the host's name
as the rendezvous knows it, the rendezvous address, Gloo's interface) and replaces itself
with ``COMMAND``: pipeprof's own rank, or a user's training script, which then calls
``hvd.init()`` as under horovodrun. ``IFACE`` empty: the interface that routes to the
rendezvous, found on this host.

It imports nothing heavy (no TensorFlow, no Horovod): it runs before every rank.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping

ERROR_TAG = "PIPEPROF-ERROR"  # launch.job's; not imported, to keep this start light


def slot_env(hosts: str, rank: int) -> dict[str, str]:
    """Horovod's variables for ``rank`` of the placement ``hosts`` (``a:2,b:1``: ranks 0 and 1
    on a, 2 on b), as horovodrun's ``get_host_assignments`` numbers them: the cross rank is
    the host's index among the hosts that have this local rank. (``topology.assign`` made
    the placement; reading it again here, in a few lines, keeps pipeprof's scenario and
    launch modules out of every task's start.)"""
    placed = [(h, int(n)) for h, _, n in (item.partition(":") for item in hosts.split(","))]
    size = sum(n for _, n in placed)
    if not 0 <= rank < size:
        raise ValueError(f"SLURM_PROCID={rank} is outside the step's {size} rank(s)")
    first = 0
    for host, n in placed:
        if rank < first + n:
            local = rank - first
            having = [h for h, m in placed if m > local]
            return {
                "HOROVOD_HOSTNAME": host,
                "HOROVOD_RANK": str(rank),
                "HOROVOD_SIZE": str(size),
                "HOROVOD_LOCAL_RANK": str(local),
                "HOROVOD_LOCAL_SIZE": str(n),
                "HOROVOD_CROSS_RANK": str(having.index(host)),
                "HOROVOD_CROSS_SIZE": str(len(having)),
            }
        first += n
    raise AssertionError("unreachable: the rank was checked against the size")


def route_interface(address: str) -> str:
    """This host's interface that traffic to ``address`` leaves by (a connected UDP socket's
    address, looked up among the interfaces; nothing is sent)."""
    import psutil

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((address, 9))
        mine = s.getsockname()[0]
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == mine for a in addrs):
            return name
    raise OSError(f"no interface holds {mine}, the address that routes to {address}")


def rank_env(env: Mapping[str, str], hosts: str, rendezvous: str, iface: str) -> dict[str, str]:
    """``env`` with Horovod's Gloo variables for the task Slurm made this process."""
    procid = env.get("SLURM_PROCID", "")
    if not procid.isdigit():
        raise ValueError("SLURM_PROCID is not set: this runs only as a task of an srun step")
    addr, _, port = rendezvous.rpartition(":")
    out = dict(env)
    out.update(slot_env(hosts, int(procid)))
    out.update(
        HOROVOD_GLOO_RENDEZVOUS_ADDR=addr,
        HOROVOD_GLOO_RENDEZVOUS_PORT=port,
        HOROVOD_CONTROLLER="gloo",
        HOROVOD_CPU_OPERATIONS="gloo",
        HOROVOD_GLOO_IFACE=iface or route_interface(addr),
    )
    out.setdefault("NCCL_SOCKET_IFNAME", out["HOROVOD_GLOO_IFACE"])
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[3] != "--":
        print(f"usage: {__name__} HOSTS ADDR:PORT IFACE -- COMMAND...", file=sys.stderr)
        return 2
    hosts, rendezvous, iface, command = argv[0], argv[1], argv[2], argv[4:]
    try:
        env = rank_env(os.environ, hosts, rendezvous, iface)
    except (ValueError, OSError) as exc:
        rank = os.environ.get("SLURM_PROCID", "?")
        print(f"{ERROR_TAG} rank {rank} on {socket.gethostname()}: {exc}", flush=True)
        return 1
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:  # the command is not there, or not executable, on this host
        rank = env["HOROVOD_RANK"]
        print(
            f"{ERROR_TAG} rank {rank} on {socket.gethostname()}: cannot start {command[0]}: "
            f"{exc.strerror}",
            flush=True,
        )
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
