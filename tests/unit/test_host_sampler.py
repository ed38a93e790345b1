"""psutil samplers on this real host."""

import subprocess
import sys
import time

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
        sampler = ProcSampler(rank=0)
        time.sleep(0.5)
        sample = sampler.sample()
        assert sample.cpu_pct > 30  # the spinning child counts towards this process's tree
        assert sample.rss_mb > 5
    finally:
        child.kill()
        child.wait()
