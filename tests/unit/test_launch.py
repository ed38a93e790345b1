"""The launcher: the horovodrun command it builds, slot checks, and supervising real processes."""

import socket
import sys
import time

import pytest

from pipeprof.errors import PipeprofError
from pipeprof.launch import horovod, hosts, launcher, runner
from pipeprof.scenario import LaunchConfig
from pipeprof.workflows import plan


@pytest.mark.parametrize(
    "spec,expected",
    [
        ("32", [1, 2, 4, 8, 16, 32]),
        ("1", [1]),
        ("12", [1, 2, 4, 8, 12]),
        ("1,3,8", [1, 3, 8]),
        ("8,1,8", [1, 8]),
        ([4, 2], [2, 4]),
    ],
)
def test_worker_counts(spec, expected):
    assert launcher.worker_counts(spec) == expected


@pytest.mark.parametrize("spec", ["abc", "0", "1,-2", ""])
def test_bad_worker_counts(spec):
    with pytest.raises(PipeprofError, match="--np"):
        launcher.worker_counts(spec)


def test_argv_local_gloo():
    argv = horovod.horovodrun_argv(2, LaunchConfig(), ["python", "-m", "pipeprof.rank", "JOB"])
    assert argv == [
        "horovodrun",
        "-np",
        "2",
        "-H",
        "localhost:2",
        "--gloo",
        "python",
        "-m",
        "pipeprof.rank",
        "JOB",
    ]


def test_argv_hosts_and_mpi():
    argv = horovod.horovodrun_argv(16, LaunchConfig(hosts="a:8,b:8", controller="mpi"), ["w"])
    assert argv == ["horovodrun", "-np", "16", "-H", "a:8,b:8", "--mpi", "w"]


def test_the_network_interface_goes_to_horovodrun_and_gives_the_stream_address():
    launch = LaunchConfig(hosts="a:1,b:1", network_interface="lo")
    argv = horovod.horovodrun_argv(2, launch, ["w"])
    assert argv[-3:] == ["--network-interface", "lo", "w"]
    # np=1 of a cluster's compare stays on the first host: on this one, loopback, where
    # horovodrun refused an interface without 127.0.0.1 on it (two_hosts' hostfile test)
    here = socket.gethostname()
    for given, np, named in (
        (f"{here}:1,b:1", 1, False),
        (f"{here}:1,b:1", 2, True),
        ("localhost:2", 2, False),
        ("b:1,c:1", 1, True),  # one host, not this one: its ranks are reached over the link
    ):
        got = horovod.horovodrun_argv(np, LaunchConfig(hosts=given, network_interface="lo"), ["w"])
        assert ("--network-interface" in got) is named, (given, np, got)
    # the ranks are told the address this host has on that interface
    assert plan.stream_endpoint(True, None, interface="lo") == ("0.0.0.0", "127.0.0.1")
    with pytest.raises(
        PipeprofError, match="launch.network_interface 'nope0': this host has no IPv4"
    ):
        plan.stream_endpoint(True, None, interface="nope0")
    # an address the user gives wins; a local run stays on loopback
    assert plan.stream_endpoint(True, "10.0.0.5", interface="lo") == ("0.0.0.0", "10.0.0.5")
    assert plan.stream_endpoint(False, None) == plan.LOOPBACK


def test_without_an_interface_the_stream_address_is_the_one_that_routes_to_the_other_hosts():
    # a UDP connect sends nothing: no packet leaves this box
    assert hosts.route_address("localhost") is None  # loopback is no address for other hosts
    assert hosts.route_address("no-such-host.invalid") is None
    bind, told = plan.stream_endpoint(True, None, peers=("no-such-host.invalid",))
    assert (bind, told) == ("0.0.0.0", socket.gethostname())  # nothing resolves: the name
    # a peer that resolves: the address this host sends to it from (to one of this host's own
    # addresses, that address itself)
    import psutil

    mine = [
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    ]
    assert mine, "this test needs an interface with an address besides loopback"
    assert hosts.route_address(mine[0]) == mine[0]
    peers = ("no-such-host.invalid", mine[0])
    assert plan.stream_endpoint(True, None, peers=peers) == ("0.0.0.0", mine[0])


def test_own_ranks_run_the_same_horovodrun_arguments_without_its_build_probe():
    argv = horovod.own_ranks_argv(2, LaunchConfig(), ["python", "-m", "pipeprof.rank", "J"])
    assert argv == [
        sys.executable,
        "-m",
        "pipeprof.launch.hvdrun",
        "-np",
        "2",
        "-H",
        "localhost:2",
        "--gloo",
        "python",
        "-m",
        "pipeprof.rank",
        "J",
    ]


@pytest.mark.parametrize(
    "controller,flag", [("gloo", "HOROVOD_WITH_GLOO=1"), ("mpi", "HOROVOD_WITH_MPI=1")]
)
def test_a_rank_names_the_controller_its_horovod_lacks(controller, flag):
    from pipeprof.distributions.horovod import check_controller

    check_controller(controller, True)
    with pytest.raises(PipeprofError, match=f"built without {controller.upper()}.*{flag}"):
        check_controller(controller, False)


def test_argv_hostfile_is_read_by_pipeprof_and_passed_as_the_slots_used(tmp_path):
    # horovodrun's own hostfile reader fails on comments and host:N lines; Gloo would start a
    # rank in every slot of the file whatever -np says
    hf = tmp_path / "hosts"
    hf.write_text("# cluster\nnode1 slots=2\nnode2:4\n")
    argv = horovod.horovodrun_argv(4, LaunchConfig(hostfile=str(hf)), ["w"])
    assert argv[:5] == ["horovodrun", "-np", "4", "-H", "node1:2,node2:2"]


def test_argv_hosts_passes_only_the_slots_np_uses():
    argv = horovod.horovodrun_argv(1, LaunchConfig(hosts="a:8,b:8"), ["w"])
    assert argv[3:5] == ["-H", "a:1"]


def test_too_many_ranks_refused_unless_oversubscribed():
    with pytest.raises(PipeprofError, match="--oversubscribe"):
        launcher.check_slots(10_000, LaunchConfig(), gpu_count=0)
    launcher.check_slots(10_000, LaunchConfig(oversubscribe=True), gpu_count=0)
    with pytest.raises(PipeprofError, match="offers 2"):
        launcher.check_slots(3, LaunchConfig(), gpu_count=2)  # one rank per GPU
    with pytest.raises(PipeprofError, match="offers 16"):
        launcher.check_slots(32, LaunchConfig(hosts="a:8,b:8"), gpu_count=0)


def test_worker_env_is_built_in_one_place():
    env = horovod.worker_env({"PATH": "/bin", "PYTHONPATH": "/x"}, "/launch/dir")
    assert env["PYTHONPATH"] == "/launch/dir:/x"
    assert env["PYTHONUNBUFFERED"] == "1" and env["TF_CPP_MIN_LOG_LEVEL"] == "2"
    assert (
        env["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "30"
    )  # Horovod's default, for a rank or two per core
    # many ranks on few cores need longer to reach the rendezvous; a user's own value stands
    assert horovod.rendezvous_timeout_s(32, 2) == 128 and horovod.rendezvous_timeout_s(8, 64) == 30
    assert (
        horovod.worker_env({"HOROVOD_GLOO_TIMEOUT_SECONDS": "7"}, "/d", local_ranks=32)[
            "HOROVOD_GLOO_TIMEOUT_SECONDS"
        ]
        == "7"
    )


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_run_streams_lines_and_logs(tmp_path):
    seen = []
    res = runner.run(
        py("print('a'); print('b')"),
        env={},
        log_path=tmp_path / "l.log",
        timeout_s=30,
        on_line=seen.append,
    )
    assert res.ok and seen == ["a", "b"]
    assert "a\nb\n" in (tmp_path / "l.log").read_text()


def test_run_reports_a_rank_error_in_one_line(tmp_path):
    code = "import sys; print('PIPEPROF-ERROR rank 1: ValueError: bad shape', file=sys.stderr); sys.exit(1)"
    res = runner.run(py(code), env={}, log_path=tmp_path / "l.log", timeout_s=30)
    assert not res.ok and res.reason() == "rank 1: ValueError: bad shape"


def test_run_kills_a_hung_command_at_its_timeout(tmp_path):
    t0 = time.monotonic()
    res = runner.run(
        py("import time; print('up', flush=True); time.sleep(60)"),
        env={},
        log_path=tmp_path / "l.log",
        timeout_s=1.5,
    )
    assert res.timed_out and not res.ok and res.reason() == "timed out after 1.5 s"
    assert time.monotonic() - t0 < 15


def test_run_without_error_tag_quotes_the_last_line(tmp_path):
    res = runner.run(
        py("print('something broke'); raise SystemExit(3)"),
        env={},
        log_path=tmp_path / "l.log",
        timeout_s=30,
    )
    assert res.returncode == 3 and "something broke" in res.reason()


def test_watch_streams_to_the_address_the_watched_command_s_hosts_route_to():
    from pipeprof.workflows.watch import watch_endpoint, watched_launch

    assert watched_launch(["python", "train.py"]) is None
    assert watch_endpoint(["python", "train.py"], None) == plan.LOOPBACK
    cmd = ["horovodrun", "-np", "2", "--hosts=a:1,b:1", "--network-interface", "lo", "x.py"]
    assert watched_launch(cmd) == LaunchConfig(hosts="a:1,b:1", network_interface="lo")
    assert watch_endpoint(cmd, None) == ("0.0.0.0", "127.0.0.1")  # lo's address
    local = ["horovodrun", "-np", "2", "-H", "localhost:2", "python", "train.py"]
    assert watch_endpoint(local, None) == ("0.0.0.0", socket.gethostname())
    assert watch_endpoint(local, "10.1.2.3") == ("0.0.0.0", "10.1.2.3")
    # a hostfile pipeprof cannot read: horovodrun will say why; the stream listens anyway
    missing = ["horovodrun", "--hostfile", "/no/such/hostfile", "python", "train.py"]
    assert watch_endpoint(missing, None) == ("0.0.0.0", socket.gethostname())
