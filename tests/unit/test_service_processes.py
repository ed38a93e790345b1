"""tf.data service workers tell the launcher what they spent, and when, through their logs (a
worker on another host too, where psutil here cannot see it); one on another host is started
over ssh and watches the session that started it."""

import math
import shlex

from pipeprof.data.tfdata_service import CPU_LINE, cpu_between, cpu_series
from pipeprof.launch.service_processes import CPU_EVERY_S, server_argv


def test_a_local_worker_watches_this_process_and_prints_its_cpu():
    argv = server_argv("worker", host="localhost", address_file="/r/a", parent=42)
    assert argv[-2:] == ["--parent", "42"]
    assert float(argv[argv.index("--cpu-every") + 1]) == CPU_EVERY_S
    dispatcher = server_argv("dispatcher", host="localhost", address_file="/r/a", parent=42)
    assert "--cpu-every" not in dispatcher


def test_a_remote_worker_watches_its_ssh_session_and_prints_its_cpu():
    argv = server_argv("worker", host="h1", address_file="/r/a", parent=42, ssh_host="h1")
    assert argv[:4] == ["ssh", "-o", "BatchMode=yes", "h1"]
    remote = shlex.split(argv[4].split(" && exec ", 1)[1])
    assert remote[remote.index("--parent") + 1] == "-1"
    assert float(remote[remote.index("--cpu-every") + 1]) == CPU_EVERY_S


def test_the_cpu_a_worker_spent_between_two_moments_comes_from_its_log(tmp_path):
    log = tmp_path / "worker-0.log"
    assert cpu_series(log) == []  # no log yet
    log.write_text(
        "pipeprof tf.data service worker serving on h1:4000\n"
        f"{CPU_LINE}0.000 100.0\n"
        "W tensorflow/core/data/service/worker_impl.cc: something else\n"
        f"{CPU_LINE}0.500 101.0\n"
        f"{CPU_LINE}not-a-number 101.5\n"
        f"{CPU_LINE}1.500 102.0\n"
    )
    series = cpu_series(log)
    assert series == [(100.0, 0.0), (101.0, 0.5), (102.0, 1.5)]
    assert cpu_between(series, 100.0, 102.0) == 1.5
    assert cpu_between(series, 100.5, 101.5) == 0.25 + 0.5  # interpolated inside each second
    # a span the lines do not cover is not measured
    assert math.isnan(cpu_between(series, 99.0, 101.0))
    assert math.isnan(cpu_between(series, 101.0, 103.0))
    assert math.isnan(cpu_between(series[:1], 100.0, 100.0))
