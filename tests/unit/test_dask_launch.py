"""Dask as a launcher: what it refuses before anything starts, the command it is given, the rank
ends it reports, and what it reads from a nanny's log. No dask needed (the torch tier's
tests/integration/test_dask.py runs it on real clusters)."""

import json
import logging
import sys

import pytest

from pipeprof import plugins
from pipeprof.errors import PipeprofError
from pipeprof.launch.dask import DaskLauncher, NannyLog
from pipeprof.scenario import LaunchConfig, Scenario, validate

DDP = plugins.kind(plugins.DISTRIBUTION, "ddp")
HOROVOD = plugins.kind(plugins.DISTRIBUTION, "horovod")


def refused(launch: LaunchConfig, distribution=DDP, np: int = 2) -> str:
    launcher = DaskLauncher()
    launcher.available = lambda: True  # type: ignore[method-assign]  # the check's other lines
    with pytest.raises(PipeprofError) as got:
        launcher.check(np, launch, 0, distribution)
    return str(got.value)


def test_what_dask_cannot_start_is_refused_in_one_line_before_anything_runs():
    said = refused(LaunchConfig(launcher="dask"), HOROVOD)
    assert said == (
        "--launcher dask starts processes that join by torch.distributed; train.engine horovod "
        "does not (use --engine ddp)"
    )
    said = refused(LaunchConfig(launcher="dask", hosts="a:1,b:1"))
    assert said.startswith("--launcher dask runs its ranks on a Dask cluster's workers: drop -H")
    # a LocalCluster on this host: a worker a rank, within its slots
    said = refused(LaunchConfig(launcher="dask"), np=10_000)
    assert said.startswith("np=10000 needs 10000 slots but localhost")
    # on a running cluster its workers are counted once they are reached, not here
    launcher = DaskLauncher()
    launcher.available = lambda: True  # type: ignore[method-assign]
    launcher.check(10_000, LaunchConfig(launcher="dask", scheduler="tcp://h:8786"), 0, DDP)


def test_a_scheduler_without_the_dask_launcher_is_a_scenario_error():
    scenario = Scenario(launch=LaunchConfig(launcher="torchrun", scheduler="tcp://h:8786"))
    with pytest.raises(PipeprofError, match="launch.scheduler .* is where --launcher dask runs"):
        validate(scenario)


def test_the_supervisor_is_given_the_plan_and_the_command():
    launcher = DaskLauncher()
    launcher.env({"PATH": "/bin", "PIPEPROF_JOB": "j"}, "/work")
    argv = launcher.script_argv(2, LaunchConfig(scheduler="tcp://h:8786"), ["python", "t.py"])
    assert argv[:3] == [sys.executable, "-m", "pipeprof.launch.dask"]
    assert argv[4:] == ["--", "python", "t.py"]
    plan = json.loads(argv[3])
    assert (plan["np"], plan["scheduler"], plan["gpus"]) == (2, "tcp://h:8786", 0)
    assert {"PIPEPROF_JOB", "PYTHONPATH"} <= set(plan["exported"])  # as ssh exports them


def test_a_ranks_end_is_read_from_the_supervisors_line():
    launcher = DaskLauncher()
    assert launcher.rank_exit("pipeprof dask launcher: rank 1 exited with 3") == (1, 3)
    assert launcher.rank_exit("[node2] pipeprof dask launcher: rank 1 exited with 3") is None
    assert launcher.rank_exit("pipeprof torchrun launcher: rank 1 exited with 3") is None


def test_the_nanny_log_says_how_each_worker_process_ended():
    log = NannyLog()
    nanny = logging.getLogger("test-dask-nanny")
    nanny.addHandler(log)
    nanny.setLevel(logging.INFO)
    nanny.propagate = False
    try:  # distributed's words (nanny.py, 2026.8.0)
        nanny.info("Worker process 4242 was killed by signal 9")
        nanny.info("Worker process 4343 exited with status 3")
        nanny.info("Worker process 4444 was killed by unknown signal")
        nanny.info("Restarting worker")
    finally:
        nanny.removeHandler(log)
    assert log.ends == {
        4242: "killed by SIGKILL",
        4343: "its process exited with 3",
        4444: "killed by a signal its nanny could not tell",
    }
