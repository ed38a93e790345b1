"""Host and process sampling with psutil: per-core CPU, memory, disk and network rates, and
each rank's own process tree (CPU % and RSS)."""

from __future__ import annotations

import os
import socket
import time

import psutil

from pipeprof.telemetry.samples import HostSample, ProcSample


class HostSampler:
    """Rates are differences between consecutive samples (the first sample reports 0)."""

    def __init__(self) -> None:
        self.host = socket.gethostname()
        psutil.cpu_percent(percpu=True)  # prime: later calls measure since the previous one
        self._last = time.monotonic()
        self._disk = psutil.disk_io_counters()
        self._net = psutil.net_io_counters()

    def sample(self) -> HostSample:
        now = time.monotonic()
        dt = max(now - self._last, 1e-6)
        per_core = psutil.cpu_percent(percpu=True)
        disk, net = psutil.disk_io_counters(), psutil.net_io_counters()
        read_mb = (disk.read_bytes - self._disk.read_bytes) / 2**20 if disk and self._disk else 0.0
        net_mb = (
            (net.bytes_recv + net.bytes_sent) - (self._net.bytes_recv + self._net.bytes_sent)
        ) / 2**20
        self._last, self._disk, self._net = now, disk, net
        vm = psutil.virtual_memory()
        return HostSample(
            t_unix_s=time.time(),
            host=self.host,
            cpu_pct=sum(per_core) / max(1, len(per_core)),
            cpu_per_core_pct=";".join(f"{c:.0f}" for c in per_core),
            mem_used_mb=(vm.total - vm.available) / 2**20,
            mem_total_mb=vm.total / 2**20,
            disk_read_mb_per_s=read_mb / dt,
            net_mb_per_s=net_mb / dt,
        )


# Listing a process's children scans every process on the host (psutil reads each
# /proc/PID/stat): 70% of a host sample's CPU here, more on a busy cluster node. A rank's
# tree rarely changes, so it is listed again only this often.
TREE_REFRESH_S = 10.0


class ProcSampler:
    """CPU % (100 = one core) and RSS of one process and its children (a rank's tree)."""

    def __init__(self, rank: int, pid: int | None = None, clock=time.monotonic) -> None:
        self.rank = rank
        self.host = socket.gethostname()
        self._proc = psutil.Process(pid or os.getpid())
        self._known: dict[int, psutil.Process] = {}
        self._clock = clock
        self._listed = -TREE_REFRESH_S
        self._tree()  # prime cpu_percent on every member

    def _tree(self) -> list[psutil.Process]:
        if self._clock() - self._listed < TREE_REFRESH_S:
            return list(self._known.values())
        self._listed = self._clock()
        members = [self._proc]
        try:
            members += self._proc.children(recursive=True)
        except psutil.Error:
            pass  # the process is gone; the sample below reports what is left
        current = {}
        for p in members:
            current[p.pid] = self._known.get(p.pid, p)
            if p.pid not in self._known:
                try:
                    current[p.pid].cpu_percent(None)
                except psutil.Error:
                    current.pop(p.pid)
        self._known = current
        return list(current.values())

    def sample(self) -> ProcSample:
        cpu = rss = 0.0
        for p in self._tree():
            try:
                cpu += p.cpu_percent(None)
                rss += p.memory_info().rss
            except psutil.Error:
                continue  # exited between listing and reading
        return ProcSample(
            t_unix_s=time.time(), host=self.host, rank=self.rank, cpu_pct=cpu, rss_mb=rss / 2**20
        )
