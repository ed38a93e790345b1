"""The srun launcher's pure parts: the allocation read from Slurm's variables, the job step's
command line, the task → Horovod rank mapping, srun's lines for a task's end, and the default
launcher chosen from the environment. The launch itself runs in tests/cluster (a real Slurm)."""

import shutil
import sys

import pytest

from pipeprof.distributions.horovod import Horovod
from pipeprof.errors import PipeprofError
from pipeprof.launch import srun, srun_rank
from pipeprof.launch.choose import choose
from pipeprof.launch.horovod import HorovodLauncher
from pipeprof.scenario import LaunchConfig

# what salloc -N2 -n2 and sbatch -N2 -n2 put in the environment under the suite's Slurm 22.05
# (the variables that matter, copied from a real allocation)
SALLOC = {
    "SLURM_JOB_ID": "4",
    "SLURM_JOB_NODELIST": "pp-h[0-1]",
    "SLURM_JOB_CPUS_PER_NODE": "1(x2)",
    "SLURM_TASKS_PER_NODE": "1(x2)",
    "SLURM_NTASKS": "2",
    "SLURM_NNODES": "2",
}


@pytest.mark.parametrize(
    "spec, names",
    [  # as `scontrol show hostnames` expanded them here (Slurm 22.05)
        ("pp-h[0-1]", ["pp-h0", "pp-h1"]),
        ("n[01-03,7],gpu[1-2]", ["n01", "n02", "n03", "n7", "gpu1", "gpu2"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
        ("login", ["login"]),
    ],
)
def test_a_nodelist_expands_as_scontrol_expands_it(spec, names):
    assert srun.expand_nodelist(spec) == names


@pytest.mark.parametrize("spec", ["n[3-1]", "n[a-b]", "n[1-2", ""])
def test_a_nodelist_slurm_could_not_have_written_is_one_line(spec):
    with pytest.raises(PipeprofError, match="SLURM_JOB_NODELIST"):
        srun.expand_nodelist(spec)


def test_the_allocation_is_its_nodes_with_the_tasks_asked_for_else_the_cpus_granted():
    alloc = srun.allocation(SALLOC)
    assert alloc is not None
    assert (alloc.nodes, alloc.slots, alloc.hosts_arg) == (
        ("pp-h0", "pp-h1"),
        (1, 1),
        "pp-h0:1,pp-h1:1",
    )
    assert alloc.describe() == "Slurm allocation 4 (pp-h[0-1]: 1 task(s) on each of 2 node(s))"
    # salloc -N3 --ntasks-per-node=8 on nodes of 64 CPUs: eight slots a node
    big = srun.allocation(
        {
            "SLURM_JOB_ID": "9",
            "SLURM_JOB_NODELIST": "gpu[01-03]",
            "SLURM_JOB_CPUS_PER_NODE": "64(x3)",
            "SLURM_TASKS_PER_NODE": "8(x3)",
            "SLURM_NTASKS_PER_NODE": "8",
        }
    )
    assert big is not None and big.hosts_arg == "gpu01:8,gpu02:8,gpu03:8"
    # salloc -N2 alone: no tasks asked for, so a slot is a CPU granted
    cpus = srun.allocation(
        {
            "SLURM_JOB_ID": "10",
            "SLURM_JOB_NODELIST": "n[1-2]",
            "SLURM_JOB_CPUS_PER_NODE": "16,8",
            "SLURM_TASKS_PER_NODE": "1(x2)",
        }
    )
    assert cpus is not None and cpus.hosts_arg == "n1:16,n2:8"
    assert "CPUs: 16 on n1, 8 on n2" in cpus.describe()
    assert srun.allocation({}) is None


def test_counts_that_do_not_cover_the_nodes_are_one_line_naming_the_short_one():
    with pytest.raises(PipeprofError) as err:
        srun.allocation(dict(SALLOC, SLURM_JOB_NODELIST="pp-h[0-2]"))
    assert str(err.value) == (
        "SLURM_JOB_NODELIST=pp-h[0-2] names 3 node(s) but SLURM_JOB_CPUS_PER_NODE=1(x2) covers 2"
    )


def test_inside_a_job_step_the_job_is_read_not_the_step_and_srun_shares_its_cpus(monkeypatch):
    # `srun -N1 -n1 --pty bash` in a 2-node job: the step's tasks are 1 on 1 node
    step = dict(SALLOC, SLURM_STEP_ID="0", SLURM_TASKS_PER_NODE="1", SLURM_NTASKS="1")
    step["SLURM_NODELIST"] = "pp-h0"  # the step's; the job's is SLURM_JOB_NODELIST
    alloc = srun.allocation(step)
    assert alloc is not None
    assert (alloc.hosts_arg, alloc.slots_are) == ("pp-h0:1,pp-h1:1", "CPU")
    monkeypatch.setattr(srun, "find_srun", lambda: "srun")
    argv = srun.srun_argv(2, LaunchConfig(hosts=alloc.hosts_arg), alloc, ["x"], overlap=True)
    assert "--overlap" in argv and argv[-1] == "x"
    # and a launcher that is not srun never reads Slurm's variables, broken or not
    broken = dict(SALLOC, SLURM_JOB_CPUS_PER_NODE="garbage")
    assert choose(LaunchConfig(launcher="horovodrun", hosts="a:1"), env=broken)[0].hosts == "a:1"


def test_outside_an_allocation_srun_is_refused_in_one_line_and_auto_is_horovodrun():
    with pytest.raises(PipeprofError, match="not inside a Slurm allocation .SLURM_JOB_ID"):
        choose(LaunchConfig(launcher="srun"), env={})
    chosen, line = choose(LaunchConfig(), env={})
    assert chosen.launcher == "horovodrun"
    assert line == "launcher horovodrun (the default outside a Slurm allocation)"


def test_without_horovod_auto_starts_tf_distributes_workers_with_mpirun(monkeypatch):
    """No horovodrun (pipeprof installed without Horovod): multi_worker_mirrored needs none, so
    auto takes mpirun where it is on PATH (scripts/without_horovod.sh runs it so); Horovod's
    own engine still gets horovodrun, whose absence is its one line."""
    monkeypatch.setattr(HorovodLauncher, "available", staticmethod(lambda: False))
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    chosen, line = choose(LaunchConfig(), env={}, engine="multi_worker_mirrored")
    assert chosen.launcher == "mpirun"
    assert line == (
        "launcher mpirun (train.engine multi_worker_mirrored with no Horovod installed: "
        "mpirun starts its workers)"
    )
    assert choose(LaunchConfig(), env={}, engine="horovod")[0].launcher == "horovodrun"
    monkeypatch.setattr(shutil, "which", lambda name: None)  # no mpirun either
    assert choose(LaunchConfig(), env={}, engine="multi_worker_mirrored")[0].launcher == (
        "horovodrun"
    )
    monkeypatch.setattr(HorovodLauncher, "available", staticmethod(lambda: True))  # as before
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    assert choose(LaunchConfig(), env={}, engine="multi_worker_mirrored")[0].launcher == (
        "horovodrun"
    )


def test_inside_an_allocation_auto_is_srun_over_its_nodes_unless_hosts_are_named(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    chosen, line = choose(LaunchConfig(), env=SALLOC)
    assert (chosen.launcher, chosen.hosts) == ("srun", "pp-h0:1,pp-h1:1")
    assert line == (
        "launcher srun (the default inside a Slurm allocation; Slurm allocation 4 (pp-h[0-1]: 1 "
        "task(s) on each of 2 node(s)))"
    )
    assert choose(chosen, env=SALLOC)[0] == chosen  # choosing again changes nothing
    named, line = choose(LaunchConfig(hostfile="hosts.txt"), env=SALLOC)
    assert named.launcher == "horovodrun" and "-H/--hostfile (launch.hosts" in line
    # a container inside the job that has Slurm's variables but no srun: horovodrun, said why
    monkeypatch.setattr(shutil, "which", lambda name: None)
    chosen, line = choose(LaunchConfig(), env=SALLOC)
    assert chosen.launcher == "horovodrun"
    assert line == "launcher horovodrun (inside Slurm allocation 4, but srun is not on PATH)"
    with pytest.raises(PipeprofError, match="drop -H/--hostfile"):
        choose(LaunchConfig(launcher="srun", hosts="a:1"), env=SALLOC)
    asked, line = choose(LaunchConfig(launcher="mpirun"), env=SALLOC)
    assert asked.launcher == "mpirun" and line == "launcher mpirun (as asked)"


def test_a_worker_count_beyond_the_allocation_is_one_line_with_the_numbers(monkeypatch):
    monkeypatch.setattr(srun, "find_srun", lambda: "srun")
    chosen, _ = choose(LaunchConfig(), env=SALLOC)
    with pytest.raises(PipeprofError) as err:
        srun.SrunLauncher(env=SALLOC).check(4, chosen, 0, Horovod)
    assert str(err.value) == (
        "np=4 needs 4 slots but Slurm allocation 4 (pp-h[0-1]: 1 task(s) on each of 2 node(s)) "
        "offers 2; ask salloc/sbatch for more (-n, --ntasks-per-node, -N) or lower --np"
    )
    with pytest.raises(PipeprofError, match="Gloo controller; for MPI"):
        srun.SrunLauncher(env=SALLOC).check(2, LaunchConfig(controller="mpi"), 0, Horovod)
    # no tasks asked for on GPU nodes: slots are CPUs, and the first node would take them all
    cpus = {k: v for k, v in SALLOC.items() if k != "SLURM_NTASKS"}
    cpus["SLURM_JOB_CPUS_PER_NODE"] = "64(x2)"
    with pytest.raises(
        PipeprofError, match=r"np=16: .* past its 8 GPU\(s\); .*--ntasks-per-node=8"
    ):
        srun.SrunLauncher(env=cpus).check(16, LaunchConfig(), 8, Horovod)


def test_the_job_step_names_a_node_per_task_and_gives_each_its_share_of_the_cpus(monkeypatch):
    monkeypatch.setattr(srun, "find_srun", lambda: "srun")
    env = dict(SALLOC, SLURM_JOB_CPUS_PER_NODE="16(x2)", SLURM_TASKS_PER_NODE="4(x2)")
    alloc = srun.allocation(env)
    assert alloc is not None
    launch = LaunchConfig(hosts=alloc.hosts_arg)
    argv = srun.srun_argv(6, launch, alloc, ["python", "x.py"])
    assert argv == [
        "srun",
        "--ntasks=6",
        "--nodes=2",
        "--distribution=arbitrary",
        "--nodelist=pp-h0,pp-h0,pp-h0,pp-h0,pp-h1,pp-h1",
        "--cpus-per-task=4",  # 16 CPUs, 4 ranks on the busiest node
        "--kill-on-bad-exit=1",
        "python",
        "x.py",
    ]


def test_a_task_of_an_uneven_placement_gets_its_slot_worked_by_hand():
    # a:3, b:1, c:2; ranks 0-2 on a, 3 on b, 4-5 on c; local rank 1 exists on a and c only
    env = srun_rank.slot_env("a:3,b:1,c:2", 5)
    assert (env["HOROVOD_HOSTNAME"], env["HOROVOD_LOCAL_RANK"], env["HOROVOD_LOCAL_SIZE"]) == (
        "c",
        "1",
        "2",
    )
    assert (env["HOROVOD_CROSS_RANK"], env["HOROVOD_CROSS_SIZE"]) == ("1", "2")
    env = srun_rank.slot_env("a:3,b:1,c:2", 3)
    assert (env["HOROVOD_HOSTNAME"], env["HOROVOD_CROSS_RANK"], env["HOROVOD_CROSS_SIZE"]) == (
        "b",
        "1",
        "3",
    )
    with pytest.raises(ValueError, match="SLURM_PROCID=6 is outside the step's 6 rank"):
        srun_rank.slot_env("a:3,b:1,c:2", 6)


def test_each_task_gets_the_slot_horovodrun_would_have_given_it():
    hosts_mod = pytest.importorskip("horovod.runner.common.util.hosts")
    placement = "a:3,b:1,c:2"
    plan = hosts_mod.get_host_assignments(hosts_mod.parse_hosts(placement), 6)
    for slot in plan:
        env = srun_rank.slot_env(placement, slot.rank)
        assert env == {
            "HOROVOD_HOSTNAME": slot.hostname,
            "HOROVOD_RANK": str(slot.rank),
            "HOROVOD_SIZE": str(slot.size),
            "HOROVOD_LOCAL_RANK": str(slot.local_rank),
            "HOROVOD_LOCAL_SIZE": str(slot.local_size),
            "HOROVOD_CROSS_RANK": str(slot.cross_rank),
            "HOROVOD_CROSS_SIZE": str(slot.cross_size),
        }


def test_a_task_reaches_the_rendezvous_over_the_interface_that_routes_there():
    env = srun_rank.rank_env({"SLURM_PROCID": "0", "X": "1"}, "pp-h0:1", "127.0.0.1:4321", "")
    assert env["HOROVOD_GLOO_IFACE"] == "lo" and env["X"] == "1"
    assert (env["HOROVOD_GLOO_RENDEZVOUS_ADDR"], env["HOROVOD_GLOO_RENDEZVOUS_PORT"]) == (
        "127.0.0.1",
        "4321",
    )
    named = srun_rank.rank_env({"SLURM_PROCID": "0"}, "pp-h0:1", "10.0.0.1:1", "ib0")
    assert named["HOROVOD_GLOO_IFACE"] == "ib0" and named["NCCL_SOCKET_IFNAME"] == "ib0"
    with pytest.raises(ValueError, match="SLURM_PROCID is not set"):
        srun_rank.rank_env({}, "pp-h0:1", "127.0.0.1:1", "")


@pytest.mark.parametrize(
    "line, ended",
    [  # srun's own lines, as Slurm 22.05 printed them here
        ("srun: error: pp-h1: task 1: Exited with exit code 1", (1, 1)),
        ("srun: error: pp-h0: task 0: Killed", (0, 137)),
        ("srun: error: pp-h0: tasks 2-3: Terminated", (2, 143)),
        ("srun: error: gpu07: task 5: Out Of Memory", (5, 137)),
        ("srun: Force Terminated StepId=1.2", None),
        ("rank 1 says hello", None),
    ],
)
def test_srun_lines_for_a_tasks_end_name_the_rank_and_its_code(line, ended):
    assert srun.srun_exit(line) == ended


def test_the_external_launcher_is_refused_by_compare_with_the_way_to_use_it():
    with pytest.raises(PipeprofError, match=r"start `pipeprof rank SCENARIO --run-dir DIR` with"):
        choose(LaunchConfig(launcher="external"), env={})


class FakeRendezvous:
    """Horovod's RendezvousServer, as far as the launcher uses it: a port, and a plan per launch."""

    def __init__(self) -> None:
        self.plans: list[list[tuple[str, int]]] = []

    def start(self) -> int:
        return 4242

    def init(self, plan) -> None:
        self.plans.append([(s.hostname, s.rank) for s in plan])


@pytest.mark.parametrize("here", ["pp-h0", "login1"])
def test_the_step_wraps_each_task_and_the_rendezvous_knows_the_placement(monkeypatch, here):
    pytest.importorskip("horovod.runner.common.util.hosts")
    import socket

    from pipeprof.launch import hosts

    monkeypatch.setattr(srun, "find_srun", lambda: "srun")
    monkeypatch.setattr(socket, "gethostname", lambda: here)
    monkeypatch.setattr(hosts, "route_address", lambda peer: f"10.0.0.9-to-{peer}")
    monkeypatch.setattr(hosts, "interface_address", lambda iface: f"addr-of-{iface}")
    fake = FakeRendezvous()
    launch, _ = choose(LaunchConfig(launcher="srun", network_interface="ib0"), env=SALLOC)
    runner = srun.SrunLauncher(env=SALLOC)
    runner._rendezvous, runner._port = fake, fake.start()
    argv = runner.ranks_argv(2, launch, ["python", "-m", "pipeprof.rank", "JOB"])
    wrapper = argv[argv.index("--kill-on-bad-exit=1") + 1 :]
    # pipeprof on a node of the ranks: its address on their interface; on a login node
    # outside the allocation: the one that routes to them (it may have no ib0)
    address = "addr-of-ib0" if here == "pp-h0" else "10.0.0.9-to-pp-h0"
    assert wrapper == [
        sys.executable,
        "-m",
        "pipeprof.launch.srun_rank",
        "pp-h0:1,pp-h1:1",
        f"{address}:4242",
        "ib0",
        "--",
        "python",
        "-m",
        "pipeprof.rank",
        "JOB",
    ]
    assert fake.plans == [[("pp-h0", 0), ("pp-h1", 1)]]
    one = runner.script_argv(1, launch, ["python", "train.py"])
    assert fake.plans[-1] == [("pp-h0", 0)]
    expected = "127.0.0.1:4242" if here == "pp-h0" else "10.0.0.9-to-pp-h0:4242"
    assert one[one.index("pipeprof.launch.srun_rank") + 2] == expected
