"""The hosts a launch names, asked before anything runs (launch/hosts.py). With real ssh: a
host that cannot be reached is one line naming it. The cluster tests (tests/cluster) ask real
hosts with sshd, one with sshd down, and two with one hostname."""

import socket

import pytest

from pipeprof.errors import PipeprofError
from pipeprof.launch import hosts


def test_this_host_is_not_asked_over_ssh():
    assert hosts.hostname_of("localhost") == socket.gethostname()
    hosts.check(["localhost", socket.gethostname()])  # nothing to ask: no error


def test_a_host_ssh_cannot_reach_is_one_line_naming_it():
    with pytest.raises(PipeprofError) as exc:
        hosts.check(["localhost", "no-such-host.invalid"])
    line = exc.value.message
    assert line.startswith("host no-such-host.invalid: ssh no-such-host.invalid failed (")
    assert "ranks start there over ssh" in line and "\n" not in line


def test_hosts_sharing_a_hostname_are_named_together():
    assert hosts.shared_hostname({"a": "x", "b": "y"}) is None
    assert hosts.shared_hostname({"a": "box", "b": "c", "d": "box"}) == (
        "hosts a, d all have the hostname 'box': Horovod tells hosts apart by hostname; give "
        "each its own (e.g. a container's --hostname)"
    )
