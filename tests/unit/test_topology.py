"""Topology once: ranks per host, local ranks and cores per rank come from Horovod's own host
assignment, and every consumer (RAM budget, verdict, launcher) sees the same numbers."""

import os
import re

import pytest

from pipeprof import scenario as scen
from pipeprof.analysis.memory import default_ram_budget_bytes
from pipeprof.errors import PipeprofError
from pipeprof.launch import horovod, launcher, topology
from pipeprof.scenario import LaunchConfig
from pipeprof.workflows import diagnose
from pipeprof.workflows.plan import check_memory, variant_specs


def hostfile(tmp_path, hosts: int, slots: int):
    path = tmp_path / "hosts.txt"
    path.write_text("".join(f"node{k} slots={slots}\n" for k in range(hosts)))
    return str(path)


def test_usable_cores_follow_the_cpu_affinity():
    assert topology.usable_cores() == len(os.sched_getaffinity(0))
    assert topology.cores_per_rank(8, cores=64) == 8 and topology.cores_per_rank(32, cores=2) == 1


def test_a_four_host_hostfile_puts_eight_ranks_on_each_host_at_np32(tmp_path):
    t = topology.assign(32, LaunchConfig(hostfile=hostfile(tmp_path, 4, 8)), cores=64)
    assert t.ranks_by_host == {"node0": 8, "node1": 8, "node2": 8, "node3": 8}
    assert t.ranks_per_host == 8 and t.cores_per_rank == 8 and t.ranks_here == 0
    assert [s.local_rank for s in t.slots if s.host == "node3"] == list(range(8))


def test_hosts_are_filled_in_horovods_order():
    t = topology.assign(6, LaunchConfig(hosts="a:4,b:4"), cores=8)
    assert t.ranks_by_host == {"a": 4, "b": 2} and t.ranks_per_host == 4 and t.cores_per_rank == 2
    assert [(s.host, s.rank, s.local_rank, s.local_size) for s in t.slots] == [
        ("a", 0, 0, 4),
        ("a", 1, 1, 4),
        ("a", 2, 2, 4),
        ("a", 3, 3, 4),
        ("b", 4, 0, 2),
        ("b", 5, 1, 2),
    ]
    assert t.hosts_arg == "a:4,b:2"  # what horovodrun is given: Gloo fills every slot it is handed


def test_a_local_run_is_unchanged():
    t = topology.assign(2, LaunchConfig())
    assert (
        t.ranks_by_host == {"localhost": 2} and t.ranks_here == 2 and t.hosts_arg == "localhost:2"
    )
    assert t.cores_per_rank == max(1, len(os.sched_getaffinity(0)) // 2)
    assert diagnose.cores_per_rank(scen.Scenario(), 2) == float(
        max(1, len(os.sched_getaffinity(0)) // 2)
    )
    assert horovod.horovodrun_argv(2, LaunchConfig(), ["w"])[:5] == [
        "horovodrun",
        "-np",
        "2",
        "-H",
        "localhost:2",
    ]


def test_the_verdict_counts_the_ranks_of_one_host_not_all_of_them(tmp_path):
    eight = scen.Scenario(launch=LaunchConfig(hostfile=hostfile(tmp_path, 4, 8)))
    # 8 ranks share a host's cores: a fraction of one each where they outnumber them
    assert diagnose.cores_per_rank(eight, 32) == topology.usable_cores() / 8
    # one rank per host has all of a host's cores (the old code divided them by np)
    alone = scen.Scenario(launch=LaunchConfig(hosts="n0:1,n1:1,n2:1,n3:1"))
    assert diagnose.cores_per_rank(alone, 4) == float(topology.usable_cores())
    assert diagnose.cores_per_rank(alone, 4, override=3) == 3.0


def budget_in_refusal(tmp_path, launch_lines: str, np: int) -> float:
    """The RAM budget compare.check_memory applied, read from its refusal, in bytes."""
    data = tmp_path / "images"
    for c in ("a", "b"):
        (data / c).mkdir(parents=True, exist_ok=True)
        (data / c / "x.jpg").write_bytes(b"")
    toml = tmp_path / "big.toml"
    # one image per rank whose decoded size no machine has: the check must refuse and show its budget
    toml.write_text(
        f'name = "big"\n[data]\nsource = "folder"\npath = "{data}"\nimage_size = 400000\n'
        f"num_classes = 2\n[pipeline.cache]\nenabled = true\n[launch]\n{launch_lines}"
    )
    s = scen.load(str(toml))
    with pytest.raises(PipeprofError) as exc:
        check_memory(s, variant_specs(s), str(data), [np], None)
    number, unit = re.search(r"RAM budget of ([\d,.]+) (GB|MB)", exc.value.message).groups()
    return float(number.replace(",", "")) * (2**30 if unit == "GB" else 2**20)


def test_the_ram_budget_is_shared_by_the_ranks_of_one_host(tmp_path):
    hf = hostfile(tmp_path, 4, 8)
    budget = budget_in_refusal(tmp_path, f'hostfile = "{hf}"\n', 32)
    assert budget == pytest.approx(default_ram_budget_bytes(8), rel=0.1)  # not 32 ranks on one host
    assert budget > 2 * default_ram_budget_bytes(32)
    local = budget_in_refusal(tmp_path, "", 2)
    assert local == pytest.approx(default_ram_budget_bytes(2), rel=0.1)


def test_hostfile_lines_and_their_mistakes(tmp_path):
    hf = tmp_path / "hosts"
    hf.write_text("# cluster\nnode1 slots=8  # big one\n\nnode2:4\nnode3\n")
    assert topology.parse_hostfile(str(hf)) == [("node1", 8), ("node2", 4), ("node3", 1)]
    hf.write_text("node1 slots=many\n")
    with pytest.raises(PipeprofError, match=r"hosts:1: cannot read the slot count"):
        topology.parse_hostfile(str(hf))
    hf.write_text("node1 slots=4\nnode1 slots=4\n")
    with pytest.raises(PipeprofError, match="'node1' is listed twice"):
        topology.parse_hostfile(str(hf))
    with pytest.raises(PipeprofError, match="does not exist"):
        topology.parse_hostfile(str(tmp_path / "missing"))


def test_host_list_mistakes_are_one_line_each():
    assert topology.parse_hosts("a:8, b:4,c") == [("a", 8), ("b", 4), ("c", 1)]
    for bad, says in (
        ("a:x", "slots of 'a'"),
        ("a:0", "has 0 slots"),
        ("a b:2", "not a host name"),
        (",", "no hosts given"),
        ("a:2,a:2", "listed twice"),
    ):
        with pytest.raises(PipeprofError, match=says) as exc:
            topology.parse_hosts(bad)
        assert "\n" not in exc.value.message


def test_a_host_list_cannot_be_oversubscribed():
    # horovodrun starts one rank per slot of a host list; --oversubscribe is for this host only
    with pytest.raises(PipeprofError, match="offers 8"):
        launcher.check_slots(9, LaunchConfig(hosts="a:4,b:4", oversubscribe=True), gpu_count=0)
    with pytest.raises(PipeprofError, match="offers 8"):
        topology.assign(9, LaunchConfig(hosts="a:4,b:4"))
