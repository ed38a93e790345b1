"""torchrun as a launcher: the command it is given, what it refuses, and the failure it names
from its own report. No torch needed."""

import sys

import pytest

from pipeprof import plugins
from pipeprof.errors import PipeprofError
from pipeprof.launch.torchrun import TorchrunLauncher
from pipeprof.scenario import LaunchConfig

# torchrun's report (PyTorch 2.13) when rank 1 exited with 3 and it then ended rank 0
REPORT = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-28_19:41:31
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 6495)  (SIGTERM)
  error_file: <N/A>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-28_19:41:31
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 3 (pid: 6496)
  error_file: <N/A>
============================================================"""


def test_the_first_failure_is_the_root_cause_not_the_ranks_ended_after_it():
    launcher = TorchrunLauncher()
    exits = [e for line in REPORT.splitlines() if (e := launcher.rank_exit(line))]
    assert exits == [(1, 3)]


def test_it_runs_the_command_as_given_once_on_this_host():
    argv = TorchrunLauncher().script_argv(2, LaunchConfig(), ["python", "train.py", "--x"])
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--nproc-per-node=2" in argv and "--max-restarts=0" in argv
    assert argv[-4:] == ["--no-python", "python", "train.py", "--x"]


def test_across_nodes_only_the_supervisor_s_lines_name_a_failed_rank():
    """Each node's torchrun reports its own first failure; the supervisor passes that output on
    with the node's host first (not read as the launch's) and says the failed ranks itself,
    the node that failed first first."""
    launcher = TorchrunLauncher()
    relayed = [f"[node-a] {line}" for line in REPORT.splitlines()]
    assert [e for line in relayed if (e := launcher.rank_exit(line))] == []
    assert launcher.rank_exit("pipeprof torchrun launcher: rank 1 exited with 3") == (1, 3)
    assert launcher.rank_exit("pipeprof torchrun launcher: node 1 exited with 1") is None


def test_an_engine_it_cannot_start_is_refused():
    launcher = TorchrunLauncher()
    horovod = plugins.kind(plugins.DISTRIBUTION, "horovod")
    with pytest.raises(PipeprofError, match="train.engine horovod does not"):
        launcher.check(2, LaunchConfig(), 0, horovod)


def test_across_hosts_each_node_gets_a_torchrun_of_its_own_at_the_first_s_rendezvous():
    """Two other hosts, one rank and two: a supervisor starts a torchrun on each node, with
    its node rank, its processes and the first node's address (a port a worker count)."""
    import json

    from pipeprof.launch.torchrun import RENDEZVOUS_PORT, node_argv

    launch = LaunchConfig(hosts="node-a:1,node-b:2")
    argv = TorchrunLauncher().script_argv(3, launch, ["python", "train.py"])
    assert argv[:3] == [sys.executable, "-m", "pipeprof.launch.torchrun"]
    assert argv[-3:] == ["--", "python", "train.py"]
    plan = json.loads(argv[3])
    assert plan["nodes"] == [["node-a", 1], ["node-b", 2]]
    assert plan["master"] == ["node-a", RENDEZVOUS_PORT + 3]
    second = node_argv(plan, 1, ["python", "train.py"])
    for said in ("--nnodes=2", "--node-rank=1", "--nproc-per-node=2", "--master-addr=node-a"):
        assert said in second, second
    assert "--max-restarts=0" in second and "--standalone" not in second
    assert second[-3:] == ["--no-python", "python", "train.py"]


def test_the_store_of_ddp_is_on_the_first_host():
    from pipeprof.distributions.ddp import DDP, STORE_PORT

    here = DDP.rendezvous(2, LaunchConfig(), "")
    assert here["addr"] == "127.0.0.1" and here["port"] > 0
    there = DDP.rendezvous(2, LaunchConfig(hosts="node-a:1,node-b:1"), "")
    assert there == {"addr": "node-a", "port": STORE_PORT + 2}


def test_a_launcher_line_run_together_with_another_is_no_rank_end():
    """Two processes' output on one line (a dying rank's traceback after the launcher's
    words, as in the clean-clone CI run on a8af22f) is not read as a rank's end."""
    from pipeprof.launch.local import ended

    assert ended("ssh", "pipeprof ssh launcher: rank 1 exited with -9") == (1, -9)
    assert ended("ssh", "pipeprof ssh launcher: rank 1 exited with   File run_job") is None
