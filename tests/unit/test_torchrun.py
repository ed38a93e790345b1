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


def test_an_engine_it_cannot_start_and_named_hosts_are_refused():
    launcher = TorchrunLauncher()
    horovod = plugins.kind(plugins.DISTRIBUTION, "horovod")
    with pytest.raises(PipeprofError, match="train.engine horovod does not"):
        launcher.check(2, LaunchConfig(), 0, horovod)
    ddp = plugins.kind(plugins.DISTRIBUTION, "ddp")
    with pytest.raises(PipeprofError, match="not yet on the hosts named"):
        launcher.check(2, LaunchConfig(hosts="a:1,b:1"), 0, ddp)


def test_a_launcher_line_run_together_with_another_is_no_rank_end():
    """Two processes' output on one line (a dying rank's traceback after the launcher's
    words, as in the clean-clone CI run on a8af22f) is not read as a rank's end."""
    from pipeprof.launch.local import ended

    assert ended("ssh", "pipeprof ssh launcher: rank 1 exited with -9") == (1, -9)
    assert ended("ssh", "pipeprof ssh launcher: rank 1 exited with   File run_job") is None
