"""The hosts a launch names, asked before anything runs there.

Launchers that start ranks over ssh (horovodrun, mpirun) fail late and at length when a host
cannot be reached, and horovodrun fails outright when two hosts answer to one hostname (as
containers started from one image do): it tells hosts apart by hostname. ``check`` asks each
host its hostname over ssh (in parallel, with ssh's batch mode: no prompt can hang it) and
turns either problem into one line naming the host, before a run directory exists.
"""

from __future__ import annotations

import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from pipeprof.errors import PipeprofError
from pipeprof.launch import topology

if TYPE_CHECKING:
    from pipeprof.scenario import LaunchConfig

SSH_TIMEOUT_S = 10  # ssh's own connect timeout; the whole question gets twice that


def ssh_argv(host: str, *command: str) -> list[str]:
    """``command`` on ``host`` over ssh as horovodrun reaches it (a host key not yet known is
    accepted, as horovodrun's own ssh does), never prompting; the user's ssh config applies."""
    return [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        f"ConnectTimeout={SSH_TIMEOUT_S}",
        host,
        *command,
    ]


def hostname_of(host: str) -> str:
    """The hostname ``host`` gives itself: this process's for this host, else over ssh; a
    one-line error naming the host when ssh fails."""
    if topology.is_this_host(host):
        return socket.gethostname()
    try:
        proc = subprocess.run(
            ssh_argv(host, "hostname"),
            capture_output=True,
            text=True,
            timeout=2 * SSH_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise PipeprofError(
            f"host {host}: ssh is not installed here; it starts ranks on other hosts"
        ) from None
    except subprocess.TimeoutExpired:
        raise PipeprofError(f"host {host}: no answer over ssh in {2 * SSH_TIMEOUT_S} s") from None
    said = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    if proc.returncode != 0 or not proc.stdout.strip():
        raise PipeprofError(
            f"host {host}: ssh {host} failed ({said[:200]}); ranks start there over ssh"
        )
    return proc.stdout.strip().splitlines()[-1]


def hostnames(hosts: list[str]) -> dict[str, str | PipeprofError]:
    """Each host's hostname, or the error asking it gave (all asked at once)."""

    def ask(host: str) -> str | PipeprofError:
        try:
            return hostname_of(host)
        except PipeprofError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=min(32, max(1, len(hosts)))) as pool:
        return dict(zip(hosts, pool.map(ask, hosts)))


def shared_hostname(answers: dict[str, str]) -> str | None:
    """One line naming the hosts that share a hostname, or None."""
    by_name: dict[str, list[str]] = {}
    for host, name in answers.items():
        by_name.setdefault(name, []).append(host)
    for name, hosts in by_name.items():
        if len(hosts) > 1:
            return (
                f"hosts {', '.join(hosts)} all have the hostname '{name}': Horovod tells hosts "
                "apart by hostname; give each its own (e.g. a container's --hostname)"
            )
    return None


class CheckedOnce:
    """A launcher's host check, asked once per set of hosts a worker count uses (a spare host
    of the list is not asked): ``checked(np, launch)``."""

    def __init__(self) -> None:
        self._asked: set[tuple[str, ...]] = set()

    def __call__(self, np: int, launch: LaunchConfig) -> None:
        used = tuple(topology.assign(np, launch).ranks_by_host)
        if used not in self._asked:
            check(list(used))  # reachable over ssh, and no two with one hostname
            self._asked.add(used)


def check(hosts: list[str]) -> None:
    """Refuse, in one line, a launch on ``hosts`` when ssh cannot reach one or two share a
    hostname. This host alone asks nothing."""
    if all(topology.is_this_host(h) for h in hosts):
        return
    answers = hostnames(hosts)
    for answer in answers.values():
        if isinstance(answer, PipeprofError):
            raise answer
    if (clash := shared_hostname({h: str(a) for h, a in answers.items()})) is not None:
        raise PipeprofError(clash)


def interface_address(interface: str) -> str:
    """This host's IPv4 address on ``interface``; a one-line error when it has none."""
    import psutil

    found = psutil.net_if_addrs()
    for addr in found.get(interface, []):
        if addr.family == socket.AF_INET:
            return addr.address
    have = ", ".join(
        sorted(n for n, a in found.items() if any(x.family == socket.AF_INET for x in a))
    )
    raise PipeprofError(
        f"launch.network_interface '{interface}': this host has no IPv4 address on it "
        f"(interfaces with one: {have or 'none'})"
    )


def route_address(host: str) -> str | None:
    """The address this host sends from to reach ``host`` (a UDP socket's, connected: no packet
    is sent); None when ``host`` does not resolve, is this host, or has no route."""
    try:
        target = socket.gethostbyname(host)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, 9))
            mine = s.getsockname()[0]
    except OSError:
        return None
    return None if mine.startswith("127.") else mine


def address_for(interface: str, peers: tuple[str, ...]) -> str:
    """The address other hosts reach this one at: its address on ``interface`` (the one the
    ranks talk over), else the one it would send from to the first of ``peers`` (the other
    hosts) that resolves, else its name."""
    if interface:
        return interface_address(interface)
    for peer in peers[:3]:  # each a DNS lookup: an alias ssh alone knows may time out
        if (mine := route_address(peer)) is not None:
            return mine
    return socket.gethostname()
