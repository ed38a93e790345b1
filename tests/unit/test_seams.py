"""The four axes' seams: ``compare()`` through a fake launcher whose ranks (pipeprof's own)
train a fake framework on a fake input library through a fake distribution (no TensorFlow, no
Horovod), each registered as a new point would be, a failing and a killed rank named; rank
identity under each launcher's variables; Horovod imported only where it belongs. A whole
compare of the fakes through the real local launcher: tests/unit/test_fake_stack.py."""

import re
import socket
from pathlib import Path

import pytest

from pipeprof import plugins
from pipeprof.errors import PipeprofError
from pipeprof.launch import launcher as launchers
from pipeprof.rank.identity import identity, slurm_local_size
from pipeprof.scenario import Scenario, validate
from pipeprof.workflows.compare import CompareRequest, compare
from tests.fakes.launcher import FakeLauncher

REPO = Path(__file__).resolve().parents[2]


def fake_scenario(**train) -> Scenario:
    s = Scenario.from_dict(
        {
            "name": "fake",
            "data": {
                "source": "factory",
                "factory": "tests.fakes.inputs:no_data",
                "library": "fake",
            },
            "train": {
                "engine": "files",
                "framework": "fake",
                "device": "emulated:20",
                "batch_size": 4,
                "warmup_steps": 3,
                "measure_steps": 0,
                "min_measure_s": 1.0,
                "max_measure_s": 3.0,
                **train,
            },
            "launch": {"launcher": "fake", "oversubscribe": True},
            "telemetry": {"enabled": False},
            "variants": [{"name": "real"}],
        },
        "test",
    )
    validate(s)
    return s


FAKES = {
    plugins.DISTRIBUTION: ("files", "tests.fakes.distribution:FileDistribution"),
    plugins.FRAMEWORK: ("fake", "tests.fakes.framework:FakeFramework"),
    plugins.INPUTS: ("fake", "tests.fakes.inputs:FakeInputs"),
}


def register_fakes(monkeypatch, launcher=None) -> None:
    """The fake distribution, framework and input library (and ``launcher``, as "fake"),
    registered as a new point's module would be."""
    for axis, (name, factory) in FAKES.items():
        monkeypatch.setitem(plugins.POINTS[axis], name, factory)
    if launcher is not None:
        monkeypatch.setitem(plugins.POINTS[plugins.LAUNCHER], "fake", lambda: launcher)


def test_a_failing_rank_is_named_with_its_host(monkeypatch, tmp_path):
    failing = FakeLauncher(batch_ms=10.0, fail_rank=1)
    register_fakes(monkeypatch, failing)
    result = compare(CompareRequest(fake_scenario(), [2], out=str(tmp_path / "run"), report=False))
    assert result.failure is not None and "np=2" in result.failure
    assert f"rank 1 on {socket.gethostname()}: fake input failure in variant real" in result.failure
    assert "synthetic" in set(
        result.summary["variant"]
    )  # what was measured before the failure is kept


def test_unknown_launcher_and_engine_are_one_line_errors():
    for key, value, says in (
        ("launch", {"launcher": "qsub"}, "launch.launcher"),
        ("train", {"engine": "ray"}, "train.engine"),
    ):
        with pytest.raises(PipeprofError, match=says) as exc:
            validate(Scenario.from_dict({"name": "x", key: value}, "x.toml"))
        assert "\n" not in exc.value.message and "horovod" in exc.value.message
    with pytest.raises(PipeprofError, match="unknown launcher 'qsub'; known: .*horovodrun"):
        launchers.get("qsub")


def test_a_distribute_input_an_engine_does_not_take_is_one_line_naming_both():
    cases = (
        ("horovod", "distribute_datasets_from_function", "which takes auto"),
        ("multi_worker_mirrored", "experimental_distribute_dataset", "auto or distribute_datas"),
        ("mirrored", "from_function", "must be one of auto, experimental_distribute_dataset, "),
    )
    for engine, how, says in cases:
        train = {"engine": engine, "distribute_input": how}
        with pytest.raises(PipeprofError) as exc:
            validate(Scenario.from_dict({"name": "x", "train": train}, "x.toml"))
        line = exc.value.message
        assert "\n" not in line and line.startswith("scenario: train.distribute_input "), line
        assert f"'{how}'" in line and says in line, line
    for engine in ("mirrored", "multi_worker_mirrored", "horovod"):  # auto: every engine's own way
        validate(Scenario.from_dict({"name": "x", "train": {"engine": engine}}, "x.toml"))
    validate(
        Scenario.from_dict(
            {
                "name": "x",
                "train": {
                    "engine": "mirrored",
                    "distribute_input": "distribute_datasets_from_function",
                },
            },
            "x.toml",
        )
    )


def test_an_engine_of_one_replica_a_process_refuses_a_tf_distribute_input(monkeypatch, tmp_path):
    """A registered engine is not in the scenario's table: the seam's own check speaks for it."""
    register_fakes(monkeypatch)
    engine = plugins.make(plugins.DISTRIBUTION, "files")
    engine.set_input("auto")
    assert engine.input_batch(16) == 16
    with pytest.raises(PipeprofError) as exc:
        engine.set_input("experimental_distribute_dataset")
    assert exc.value.message == (
        "train.distribute_input 'experimental_distribute_dataset': train.engine files takes only "
        "auto (its ranks read their own shards)"
    )


@pytest.mark.parametrize(
    "env,expected",
    [
        (
            {
                "HOROVOD_RANK": "3",
                "HOROVOD_SIZE": "8",
                "HOROVOD_LOCAL_RANK": "1",
                "HOROVOD_LOCAL_SIZE": "2",
                "HOROVOD_HOSTNAME": "n1",
                "OMPI_COMM_WORLD_RANK": "9",
            },
            (3, 8, 1, 2, "n1", "horovodrun"),
        ),
        (
            {
                "OMPI_COMM_WORLD_RANK": "5",
                "OMPI_COMM_WORLD_SIZE": "6",
                "OMPI_COMM_WORLD_LOCAL_RANK": "2",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "3",
                "SLURM_PROCID": "0",
            },
            (5, 6, 2, 3, None, "Open MPI"),
        ),
        (
            {"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
            (1, 4, 1, 2, None, "PMI"),
        ),
        ({"PMIX_RANK": "2", "SLURM_PROCID": "2", "SLURM_NTASKS": "4"}, (2, 3, 2, 3, None, "PMIx")),
        (
            {
                "SLURM_PROCID": "5",
                "SLURM_NTASKS": "6",
                "SLURM_LOCALID": "1",
                "SLURM_TASKS_PER_NODE": "2(x2),2",
                "SLURM_NODEID": "2",
            },
            (5, 6, 1, 2, None, "Slurm"),
        ),
        ({}, (0, 1, 0, 1, None, "")),
    ],
)
def test_rank_identity_under_each_launcher(env, expected):
    me = identity(env)
    host = expected[4] or socket.gethostname()
    assert (me.rank, me.size, me.local_rank, me.local_size, me.host, me.source) == (
        *expected[:4],
        host,
        expected[5],
    )


def test_slurm_tasks_per_node_is_read_per_node():
    assert slurm_local_size({"SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "3"}) == 1
    assert slurm_local_size({"SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "1"}) == 2
    assert slurm_local_size({"SLURM_TASKS_PER_NODE": "weird", "SLURM_NODEID": "0"}) is None


def test_horovod_is_imported_only_by_the_horovod_engine_and_launchers():
    importing = set()
    for path in (REPO / "pipeprof").rglob("*.py"):
        for line in path.read_text().splitlines():
            if re.match(r"\s*(import horovod|from horovod[\s.])", line):
                importing.add(str(path.relative_to(REPO)))
    assert importing == {
        "pipeprof/distributions/horovod.py",
        "pipeprof/launch/horovod.py",
        "pipeprof/launch/hvdrun.py",
        "pipeprof/launch/srun.py",  # serves Horovod's Gloo rendezvous to srun's tasks
    }


def test_horovod_is_an_optional_extra():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("horovod") for d in project["dependencies"])
    assert any(d.startswith("horovod") for d in project["optional-dependencies"]["horovod"])


def test_a_local_horovodrun_rank_is_not_said_to_be_on_localhost():
    env = {"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2", "HOROVOD_HOSTNAME": "localhost"}
    assert identity(env).error_line("TAG", "boom") == "TAG rank 1: boom"  # as before the seams
    env["HOROVOD_HOSTNAME"] = "node7"
    assert identity(env).error_line("TAG", "boom") == "TAG rank 1 on node7: boom"


def test_a_rank_killed_without_a_word_is_the_one_named(monkeypatch, tmp_path):
    # the rank-blame bug: rank 1 killed -9 used to leave the blame on whoever spoke first
    killing = FakeLauncher(batch_ms=10.0, kill_rank=1)
    register_fakes(monkeypatch, killing)
    result = compare(CompareRequest(fake_scenario(), [2], out=str(tmp_path / "run"), report=False))
    assert result.failure is not None
    assert result.failure.startswith("np=2: rank 1 was killed by SIGKILL (exit -9)"), result.failure
