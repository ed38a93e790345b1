"""Keras 3 on JAX across the test cluster's two hosts (``--engine data_parallel``): one process
a host, joined at JAX's coordinator through Keras's own variables, started over ssh by
pipeprof's own launcher and, inside a Slurm allocation, by srun. Each launch's hosts, its
process count and every process's final weights are recorded (equal weights: the replicas
stayed in step); a JAX process killed on the second host is named in one line, and nothing is
left on any host. These run in the Keras 3 stack's venv (scripts/keras3.sh)."""

import json
import os
import signal

import pandas as pd
import pytest

from tests.cluster.drive import (
    both_hosts_in_summary,
    finish,
    in_allocation,
    jobs_left,
    measured_before_it,
    nothing_left,
    pipeprof_argv,
    rank_pid,
    start,
    started_until_real,
)

pytestmark = [pytest.mark.horovod, pytest.mark.keras3]

# the model trains on each host's CPU (no emulated device): its weights move every step
SCENARIO = """name = "jax-two-hosts"
[data]
source = "generated"
image_size = 32
num_classes = 3
[data.generate]
images = 192
size = 32
classes = 3
[model]
name = "small_cnn"
[train]
engine = "data_parallel"
batch_size = 16
warmup_steps = 3
measure_steps = 20
[[variants]]
name = "real"
"""


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "jax-two-hosts.toml"
    path.write_text(SCENARIO)
    return path


def one_process_a_host(out, h0, h1) -> None:
    """np=2's launch ran one JAX process on each host, and both ended with the same weights."""
    launch = json.loads((out / "model.json").read_text())["launches"]["2"]
    assert launch["processes"] == 2 and launch["replicas_per_process"] == 1, launch
    assert launch["hosts"] == [h0.name, h1.name], launch
    assert len(set(launch["weights_digest"])) == 1, launch
    assert "in each of 2 processes (one a host)" in launch["device"], launch
    steps = pd.concat(pd.read_csv(f) for f in (out / "steps").glob("np2-*.csv"))
    assert set(zip(steps["rank"], steps["host"])) == {(0, h0.name), (1, h1.name)}


def test_data_parallel_across_both_hosts_over_ssh(cluster, tmp_path, scenario):
    h0, h1 = cluster.hosts
    out = tmp_path / "run"
    argv = pipeprof_argv(scenario, out, "--np", "1,2", "-H", f"{h0.name}:1,{h1.name}:1")
    code, stdout, err = finish(start(cluster, tmp_path, [*argv, "--no-report", "--no-dashboard"]))
    assert code == 0, stdout[-3000:] + err[-2000:]
    first = stdout.splitlines()[0]
    assert "launcher ssh (train.engine data_parallel on the hosts named" in first, first
    both_hosts_in_summary(out, h0, h1)
    one_process_a_host(out, h0, h1)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["launcher"] == "ssh" and manifest["keras"].startswith("3.")
    assert not nothing_left(cluster)


def test_kill_9_of_the_jax_process_on_the_second_host_is_named_and_nothing_is_left(
    cluster, tmp_path, scenario
):
    h0, h1 = cluster.hosts
    out = tmp_path / "run"
    proc = started_until_real(cluster, tmp_path, scenario, out)
    os.kill(rank_pid(cluster, h1, 1, variable="RANK"), signal.SIGKILL)
    code, _, err = finish(proc, timeout=120)
    assert code == 1 and err.strip().count("\n") == 0, err
    assert f"np=2: rank 1 on {h1.name} ended without an error line; ssh exited 255" in err, err
    assert not nothing_left(cluster)
    assert measured_before_it(out) == 200  # the synthetic variant, measured before the kill


# -- Slurm on the two hosts (the cluster's conftest.py): last in this file --------------------


def test_data_parallel_inside_salloc_runs_as_srun_tasks(cluster, slurm, tmp_path, scenario):
    """No launcher and no hosts named: inside the allocation the processes are srun's tasks,
    one on each node, with no Horovod in this venv to serve a rendezvous (JAX's own joins
    them)."""
    h0, h1 = cluster.hosts
    out = tmp_path / "run"
    argv = pipeprof_argv(scenario, out, "--np", "1,2", "--no-report", "--no-dashboard")
    got = in_allocation(slurm, tmp_path, *argv)
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-2000:]
    assert "launcher srun (the default inside a Slurm allocation" in got.stdout.splitlines()[0]
    assert f"np=2: starting 2 rank(s) with srun on {h0.name}:1,{h1.name}:1" in got.stdout
    both_hosts_in_summary(out, h0, h1)
    one_process_a_host(out, h0, h1)
    assert json.loads((out / "manifest.json").read_text())["launcher"] == "srun"
    assert not (left := jobs_left(cluster, slurm)), left
