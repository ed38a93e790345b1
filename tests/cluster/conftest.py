"""The test cluster every file here runs on (tests/cluster/netns.py): started once per file,
torn down after it, and checked to leave nothing behind. Files here never run side by side:
the one that measures runs alone (tests/conftest.py) and the other holds every other test."""

import subprocess

import pytest

from tests.cluster.netns import PREFIX, Cluster, unavailable


def leftovers() -> list[str]:
    """The cluster's namespaces and sshds still there (empty once it is torn down)."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    sshd = subprocess.run(
        ["pgrep", "-f", "pipeprof-cluster/sshd_config"], capture_output=True, text=True
    )
    return [n for n in names.split("\n") if n.startswith(PREFIX)] + sshd.stdout.split()


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


# Slurm on the two hosts (tests/cluster/slurm.py): a file's tests that use it come last in it,
# so its daemons run only while they do and never show as leftovers of the others
@pytest.fixture(scope="module")
def slurm(cluster):
    from tests.cluster import slurm as slurm_harness

    if (why := slurm_harness.unavailable()) is not None:
        pytest.skip(why)
    s = slurm_harness.Slurm(cluster).start()
    try:
        yield s
    finally:
        s.stop()
        assert not slurm_harness.leftovers(s.root), slurm_harness.leftovers(s.root)
