"""This host: the CPU cores this process may use, and the names that mean this host. Read by
the launch side (``launch.topology``) and by what only describes a run (``rundir``,
``analysis``), so neither needs the other."""

from __future__ import annotations

import os
import socket


def usable_cores() -> int:
    """The CPU cores this process may run on: its affinity mask where the OS has one."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on this OS (macOS, Windows)
        return os.cpu_count() or 1


def is_this_host(name: str) -> bool:
    here = {"localhost", socket.gethostname(), socket.gethostname().split(".")[0]}  # no DNS lookups
    return name in here or name.startswith("127.")
