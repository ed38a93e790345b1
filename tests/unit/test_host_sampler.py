"""psutil samplers on this real host."""

import subprocess
import sys
import time

import psutil

from pipeprof.telemetry.host import HostSampler, ProcSampler


def test_host_sample_has_every_core_and_rates(tmp_path):
    s = HostSampler()
    (tmp_path / "f").write_bytes(b"x" * 2**20)
    time.sleep(0.2)
    sample = s.sample()
    import os

    assert len(sample.cpu_per_core_pct.split(";")) == os.cpu_count()
    assert 0 <= sample.cpu_pct <= 100 and sample.mem_total_mb > sample.mem_used_mb > 0
    assert sample.disk_read_mb_per_s >= 0 and sample.net_mb_per_s >= 0


def test_process_tree_includes_busy_children():
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = psutil.Process(child.pid)
        sampler = ProcSampler(rank=0)
        t0, cpu0 = time.monotonic(), sum(busy.cpu_times()[:2])
        deadline = t0 + 60  # however slow the machine: wait until the child has had 0.3 s of CPU
        while sum(busy.cpu_times()[:2]) - cpu0 < 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
        sample = sampler.sample()
        child_pct = 100 * (sum(busy.cpu_times()[:2]) - cpu0) / (time.monotonic() - t0)
        # the spinning child counts towards this process's tree: the tree's share is at least
        # most of what the child alone was measured to use over the same stretch
        assert sample.cpu_pct >= 0.8 * child_pct > 0
        assert sample.rss_mb > 5
    finally:
        child.kill()
        child.wait()
