"""PyTorch DDP across the test cluster's two hosts: pipeprof's own ranks (``--engine ddp``,
started over ssh, the TCP store on the first host), a user's script with the two lines under
``--launcher torchrun`` (a torchrun on each node, at the first node's rendezvous), and
pipeprof's ranks on a Dask cluster a user runs there (``--launcher dask --scheduler``). Each
records a world of 2 on both hostnames and equal weights; a rank that fails on the second
host is named in one line, started once, and nothing is left on either host. These run in the
torch venv (scripts/torch.sh). One file: the cluster's tests never run side by side."""

import ast
import json
import subprocess
import sys
import time

import pandas as pd
import pytest

from tests.cluster.drive import (
    REPO,
    both_hosts_in_summary,
    finish,
    nothing_left,
    pipeprof_argv,
    start,
)
from tests.integration.conftest import small_scenario

pytestmark = [pytest.mark.horovod, pytest.mark.torch]

SCENARIO = small_scenario("ddp-two-hosts", 20, 'engine = "ddp"\n')
TWO_LINES = f"{REPO}/tests/integration/scripts/ddp_two_lines.py"
FAST = ("--set", "train.min_measure_s=2", "--set", "train.max_measure_s=8")


def test_ddp_across_both_hosts_over_ssh(cluster, tmp_path):
    h0, h1 = cluster.hosts
    scenario, out = tmp_path / "ddp.toml", tmp_path / "run"
    scenario.write_text(SCENARIO)
    argv = pipeprof_argv(scenario, out, "--np", "1,2", "-H", f"{h0.name}:1,{h1.name}:1")
    code, stdout, err = finish(start(cluster, tmp_path, [*argv, "--no-report", "--no-dashboard"]))
    assert code == 0, stdout[-3000:] + err[-2000:]
    assert "launcher ssh (train.engine ddp on the hosts named" in stdout.splitlines()[0]
    both_hosts_in_summary(out, h0, h1)
    launch = json.loads((out / "model.json").read_text())["launches"]["2"]
    assert (launch["processes"], launch["hosts"]) == (2, [h0.name, h1.name]), launch
    assert len(set(launch["weights_digest"])) == 1, launch  # DDP kept the replicas in step
    steps = pd.concat(pd.read_csv(f) for f in (out / "steps").glob("np2-*.csv"))
    assert set(zip(steps["rank"], steps["host"])) == {(0, h0.name), (1, h1.name)}
    assert not nothing_left(cluster)


def two_lines_under_torchrun(cluster, tmp_path, small_dataset, measured, *more: str):
    h0, h1 = cluster.hosts
    photos, _ = small_dataset
    argv = [
        sys.executable, "-m", "pipeprof", "compare", "--engine", "ddp", "--launcher", "torchrun",
        "--np", "2", "-H", f"{h0.name}:1,{h1.name}:1", "--out", str(tmp_path / "run"),
        "--no-report", "--no-dashboard", *FAST, "--", sys.executable, TWO_LINES,
        "--data", str(photos), "--out", str(measured), *more,
    ]  # fmt: skip
    return finish(start(cluster, tmp_path, argv), timeout=400)


def test_a_two_line_script_under_torchrun_on_each_node(cluster, tmp_path, small_dataset):
    h0, h1 = cluster.hosts
    measured = tmp_path / "m"
    code, stdout, err = two_lines_under_torchrun(
        cluster, tmp_path, small_dataset, measured, "--epochs", "10000"
    )
    assert code == 0, stdout[-3000:] + err[-2000:]
    said = [json.loads((measured / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [(r["world_size"], r["host"]) for r in said] == [(2, h0.name), (2, h1.name)], said
    assert said[0]["weights"] == said[1]["weights"], said
    steps = pd.concat(pd.read_csv(f) for f in (tmp_path / "run" / "steps").glob("np2-real*.csv"))
    assert set(zip(steps["rank"], steps["host"])) == {(0, h0.name), (1, h1.name)}
    assert not nothing_left(cluster)


def test_a_rank_that_fails_on_the_second_node_is_named_once_and_nothing_is_left(
    cluster, tmp_path, small_dataset
):
    measured = tmp_path / "m"
    code, stdout, err = two_lines_under_torchrun(
        cluster, tmp_path, small_dataset, measured, "--fail-rank", "1"
    )
    assert code != 0 and err.strip().count("\n") == 0, stdout[-3000:] + err
    assert "error: np=2: rank 1" in err and "exited with 3" in err, err
    assert (measured / "starts-rank1-np2").read_text().count("started") == 1
    assert not nothing_left(cluster)


# -- Dask: a scheduler on the first host and a worker on each, as a user starts them --------

PORT = 8786  # dask scheduler's default, on the cluster's own subnet
DASK = "distributed.cli"
# the user's Dask processes on a host: its commands, and a nanny's worker (multiprocessing's)
USERS = (DASK, "multiprocessing.spawn", "multiprocessing.resource_tracker")


@pytest.fixture
def dask_cluster(cluster, tmp_path):
    """A scheduler on the first host and a worker of one thread on each, as a user starts them;
    stopped after the test (SIGTERM: each closes, the workers their nannies)."""
    h0, _ = cluster.hosts
    address = f"tcp://{h0.name}:{PORT}"
    started = []

    def launch(host, *argv: str) -> None:
        log = open(tmp_path / f"{argv[0]}-{host.name}.log", "w")  # noqa: SIM115 (kept by the Popen)
        argv_ = [sys.executable, "-m", f"{DASK}.{argv[0]}", *argv[1:]]
        started.append(
            subprocess.Popen(
                cluster.command(host, argv_, cwd=REPO),
                env=cluster.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        )

    launch(h0, "dask_scheduler", "--port", str(PORT), "--no-dashboard")
    for host in cluster.hosts:
        launch(host, "dask_worker", address, "--nthreads", "1", "--nworkers", "1",
               "--name", f"w-{host.name}", "--no-dashboard")  # fmt: skip
    try:
        workers_up(cluster, address, 2)
        yield address, started
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.terminate()
        for proc in started:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def workers_up(cluster, address: str, n: int, timeout_s: float = 60) -> list[str]:
    """The hostnames of the scheduler's workers once ``n`` are up, asked from the first host."""
    ask = (
        "import socket, sys; from distributed import Client\n"
        f"c = Client({address!r}, timeout=20); c.wait_for_workers({n}, timeout={timeout_s})\n"
        "print(sorted(c.run(socket.gethostname).values())); c.close()\n"
    )
    got = subprocess.run(
        cluster.command(cluster.hosts[0], [sys.executable, "-c", ask], cwd=REPO),
        env=cluster.env, capture_output=True, text=True, timeout=timeout_s + 30,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr[-2000:]
    return ast.literal_eval(got.stdout.strip())


def test_ddp_on_a_dask_scheduler_with_a_worker_on_each_host(cluster, dask_cluster, tmp_path):
    h0, h1 = cluster.hosts
    address, started = dask_cluster
    scenario, out = tmp_path / "ddp.toml", tmp_path / "run"
    scenario.write_text(SCENARIO)
    argv = pipeprof_argv(scenario, out, "--np", "1,2", "--launcher", "dask", "--scheduler", address)
    code, stdout, err = finish(start(cluster, tmp_path, [*argv, "--no-report", "--no-dashboard"]))
    assert code == 0, stdout[-3000:] + err[-2000:]
    launch = json.loads((out / "model.json").read_text())["launches"]["2"]
    assert (launch["processes"], launch["hosts"]) == (2, [h0.name, h1.name]), launch
    assert len(set(launch["weights_digest"])) == 1, launch  # DDP kept the replicas in step
    steps = pd.concat(pd.read_csv(f) for f in (out / "steps").glob("np2-*.csv"))
    assert set(zip(steps["rank"], steps["host"])) == {(0, h0.name), (1, h1.name)}
    # the user's cluster as it was: its scheduler and both workers still up, no rank left
    assert all(p.poll() is None for p in started)
    assert workers_up(cluster, address, 2) == [h0.name, h1.name]
    time.sleep(1)
    left = {
        h: [p for p in ps if not any(u in p for u in USERS)]
        for h, ps in nothing_left(cluster, 5).items()
    }
    assert not any(left.values()), left
