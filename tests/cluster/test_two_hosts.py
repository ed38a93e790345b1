"""Two hosts on this box (tests/cluster/netns.py): each its own hostname, cores and sshd,
linked only to each other; a compare across them with -H, its ranks named by host; and
nothing of the cluster left once it is torn down."""

import os
import subprocess
import sys

import pandas as pd
import pytest

from pipeprof.rundir import RunDir
from tests.cluster.netns import IFACE, PREFIX, SUBNET, Cluster, unavailable

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIO = """name = "two-hosts"
[data]
source = "generated"
image_size = 32
[data.generate]
images = 256
size = 32
[model]
name = "small_cnn"
[train]
batch_size = 16
device = "emulated:20"
warmup_steps = 3
measure_steps = 20
[[variants]]
name = "real"
"""


def leftovers() -> list[str]:
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split(
        "\n"
    )
    sshd = subprocess.run(
        ["pgrep", "-f", "pipeprof-cluster/sshd_config"], capture_output=True, text=True
    )
    return [n for n in names if n.startswith(PREFIX)] + sshd.stdout.split()


@pytest.fixture(scope="module")
def cluster():
    if (why := unavailable()) is not None:
        pytest.skip(why)
    c = Cluster(2).start()
    try:
        yield c
    finally:
        c.stop()
        assert not leftovers(), f"the cluster left {leftovers()}"


def on(cluster, host, *argv):
    return subprocess.run(
        cluster.ssh(cluster.hosts[0], host.name, *argv), capture_output=True, text=True, timeout=30
    )


def test_each_host_has_its_own_name_cores_and_link(cluster):
    for host in cluster.hosts:
        got = on(
            cluster,
            host,
            "hostname; python3 -c 'import os; print(sorted(os.sched_getaffinity(0)))'; "
            f"ip -4 -o addr show {IFACE}",
        )
        lines = got.stdout.splitlines()
        assert got.returncode == 0, got.stderr
        assert lines[0] == host.name and lines[1] == str(host.cores) and host.ip in lines[2]
    # the machine itself is on none of the cluster's links
    assert (
        f" {SUBNET}."
        not in subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    )


@pytest.mark.horovod
def test_a_compare_runs_its_ranks_on_both_hosts(cluster, tmp_path):
    scenario = tmp_path / "two-hosts.toml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "run"
    h0, h1 = cluster.hosts
    argv = [
        sys.executable,
        "-m",
        "pipeprof",
        "compare",
        str(scenario),
        "--np",
        "2",
        "-H",
        f"{h0.name}:1,{h1.name}:1",
        "--out",
        str(out),
        "--no-report",
        "--no-dashboard",
    ]
    env = dict(cluster.env, PIPEPROF_DATA_DIR=str(tmp_path / "data"))
    proc = subprocess.run(
        cluster.command(h0, argv, cwd=REPO), capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary["variant"]) == {"synthetic", "real"} and set(summary["np"]) == {
        1,
        2,
    }  # --np 2: 1 and 2
    hosts = {(int(h["rank"]), h.get("host")) for h in RunDir(out).load().hellos(np=2)}
    assert hosts == {
        (0, h0.name),
        (1, h1.name),
    }  # rank 1 ran on the second host and streamed from it
