"""``--launcher mpirun``: the command line Open MPI gets, built from pipeprof's placement, and
the variables it exports to the other hosts."""

import os

import pytest

from pipeprof.errors import PipeprofError
from pipeprof.launch import launcher
from pipeprof.launch.mpirun import MpirunLauncher, mpirun_argv
from pipeprof.scenario import LaunchConfig


def test_the_command_places_one_rank_per_slot_of_the_hosts_and_exports_by_name():
    launch = LaunchConfig(hosts="h0:1,h1:1", network_interface="ppnet")
    argv = mpirun_argv(2, launch, ["python", "-m", "pipeprof.rank", "JOB"], ["A", "PATH"])
    assert argv[0] == "mpirun" and argv[-4:] == ["python", "-m", "pipeprof.rank", "JOB"]
    assert argv[argv.index("-np") + 1] == "2" and argv[argv.index("-H") + 1] == "h0:1,h1:1"
    assert argv[argv.index("btl_tcp_if_include") + 1] == "ppnet"
    assert argv[argv.index("oob_tcp_if_include") + 1] == "ppnet"
    exported = [argv[i + 1] for i, a in enumerate(argv) if a == "-x"]
    assert exported == ["NCCL_SOCKET_IFNAME=ppnet", "A", "PATH"]
    assert "--oversubscribe" not in argv
    assert ("--allow-run-as-root" in argv) == (os.geteuid() == 0)


def test_oversubscribe_on_one_host_is_passed_on():
    argv = mpirun_argv(4, LaunchConfig(oversubscribe=True), ["x"], [])
    assert "--oversubscribe" in argv and argv[argv.index("-H") + 1] == "localhost:4"


def test_the_ranks_environment_is_exported_but_the_shells_own_and_device_masks():
    m = MpirunLauncher()
    env = m.env({"PATH": "/bin", "OLDPWD": "/", "SHLVL": "2", "CUDA_VISIBLE_DEVICES": "0"}, "/w")
    assert env["PYTHONPATH"] == "/w"
    assert {"PATH", "PYTHONPATH", "PYTHONUNBUFFERED"} <= set(m._exported)
    assert not {"OLDPWD", "SHLVL", "CUDA_VISIBLE_DEVICES"} & set(m._exported)
    argv = mpirun_argv(1, LaunchConfig(), ["x"], m._exported)
    exported = [argv[i + 1] for i, a in enumerate(argv) if a == "-x"]
    assert exported == m._exported


def test_mpirun_is_a_launcher_by_name_and_an_unknown_one_is_one_line():
    assert launcher.get("mpirun").name == "mpirun"
    with pytest.raises(
        PipeprofError, match="known: dask, horovodrun, local, mpirun, srun, ssh, torchrun$"
    ):
        launcher.get("srunx")


def test_each_launch_line_says_the_launcher_and_the_hosts():
    import io

    from rich.console import Console

    from pipeprof.progress import Launch
    from pipeprof.tui.reporter import PlainReporter

    buf = io.StringIO()
    reporter = PlainReporter(Console(file=buf, width=200))
    reporter.progress(Launch(np=2, of_variants=3, launcher="mpirun", hosts="h0:1,h1:1"))
    assert "np=2: starting 2 rank(s) with mpirun on h0:1,h1:1, 3 variant(s)" in buf.getvalue()
