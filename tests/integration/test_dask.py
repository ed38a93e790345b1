"""PyTorch DDP with Dask as the launcher (``--launcher dask``): each rank a task on a worker of a
LocalCluster that pipeprof starts and closes for each launch, or of a user's cluster (a
``Client`` handed to ``pipeprof.dask.compare``). In the torch venv, which holds dask
(scripts/torch.sh)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest

from tests.integration.conftest import REPO, run_pipeprof, small_scenario

pytestmark = [pytest.mark.horovod, pytest.mark.torch]


MARK = "PIPEPROF_TEST_LAUNCH"  # set for a compare here: every process it starts inherits it


def started_by(mark: str) -> list[str]:
    """The processes still running that a compare run with ``MARK=mark`` started (its Dask
    supervisor, workers and ranks all inherit the variable), as "pid: command"."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.environ().get(MARK) == mark and p.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{p.pid}: {' '.join(p.info['cmdline'] or [])[:160]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_ddp_on_a_local_dask_cluster_gives_rows_and_leaves_no_dask_process(
    tmp_path, data_cache_dir
):
    scen = tmp_path / "s.toml"
    scen.write_text(small_scenario("ddp-dask", 20))
    out = tmp_path / "run"
    mark = {MARK: tmp_path.name}
    got = run_pipeprof(
        "compare", str(scen), "--np", "1,2", "--engine", "ddp", "--launcher", "dask",
        "--out", str(out), "--no-report", "--no-dashboard", data=data_cache_dir, timeout=600,
        **mark,
    )  # fmt: skip
    assert "launcher dask (as asked)" in got.stdout.splitlines()[0], got.stdout[:500]
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(zip(summary["np"], summary["variant"])) == [
        (1, "real"), (1, "synthetic"), (2, "real"), (2, "synthetic"),
    ], got.stdout[-2000:]  # fmt: skip
    assert summary["verdict"].notna().all(), summary.to_dict()
    launch = json.loads((out / "model.json").read_text())["launches"]["2"]
    assert (launch["processes"], launch["hosts"]) == (2, [socket.gethostname()] * 2), launch
    assert len(set(launch["weights_digest"])) == 1, launch  # DDP kept the replicas in step
    steps = pd.concat(pd.read_csv(f) for f in (out / "steps").glob("np2-*.csv"))
    assert set(steps["rank"]) == {0, 1}
    assert started_by(tmp_path.name) == [], "a process of the launch outlived it"


def rank_process(launcher: psutil.Process, rank: int) -> psutil.Process | None:
    """The process of pipeprof's rank ``rank`` under ``launcher`` (told RANK by its task)."""
    for p in launcher.children(recursive=True):
        try:
            parent = p.parent()
            if (
                p.environ().get("RANK") == str(rank)
                and "pipeprof.rank" in p.cmdline()
                and parent is not None
                and "multiprocessing.spawn" in " ".join(parent.cmdline())  # not a loader worker
            ):
                return p
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return None


def test_a_dask_worker_killed_mid_run_is_named_with_its_host_in_one_line(tmp_path, data_cache_dir):
    """kill -9 of the Dask worker that runs rank 1, while the np=2 launch trains: one line
    names rank 1, its host, its worker and SIGKILL; the np=1 rows measured before are kept and
    no Dask process is left."""
    scen = tmp_path / "s.toml"
    scen.write_text(small_scenario("ddp-dask-kill", 400, "[pipeline.read]\nthrottle_mb_s = 0.05\n"))
    out = tmp_path / "run"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "pipeprof", "compare", str(scen), "--np", "1,2", "--engine", "ddp",
         "--launcher", "dask", "--out", str(out), "--no-report", "--no-dashboard",
         "--set", "train.measure_steps=20"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PIPEPROF_DATA_DIR": str(data_cache_dir), MARK: tmp_path.name},
    )  # fmt: skip
    try:
        deadline, rank = time.monotonic() + 300, None
        while rank is None and time.monotonic() < deadline and launcher.poll() is None:
            time.sleep(0.5)
            rank = rank_process(psutil.Process(launcher.pid), 1)
        assert rank is not None, "rank 1 never started under a Dask worker"
        worker = rank.parent()
        assert worker is not None and "multiprocessing.spawn" in " ".join(worker.cmdline())
        time.sleep(3)  # into its training
        worker.send_signal(signal.SIGKILL)
        stdout, stderr = launcher.communicate(timeout=240)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode != 0, stdout[-3000:]
    assert stderr.strip().count("\n") == 0, stderr
    host = socket.gethostname()
    assert f"rank 1 on {host}: its Dask worker tcp://" in stderr, stderr
    assert "was lost mid-run (killed by SIGKILL)" in stderr, stderr
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary["np"]) == {1}, summary.to_dict()  # what np=1 measured is kept
    deadline = time.monotonic() + 10  # the other rank's stop, within its grace
    while started_by(tmp_path.name) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert started_by(tmp_path.name) == [], "a process of the launch outlived it"


def test_compare_on_a_users_own_client_leaves_its_cluster_as_it_was(
    tmp_path, data_cache_dir, monkeypatch
):
    """pipeprof.dask.compare with a Client the user made (dispatch.run's role): ranks on that
    cluster's two workers, a world of 2, and the cluster still there with its workers after."""
    from distributed import Client, LocalCluster

    import pipeprof.dask
    from pipeprof.errors import PipeprofError

    scen = tmp_path / "s.toml"
    scen.write_text(small_scenario("ddp-dask-client", 20))
    monkeypatch.setenv("PIPEPROF_DATA_DIR", str(data_cache_dir))
    saved = dict(os.environ)  # a LocalCluster's nannies set their variables here: put back after
    try:
        with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster:
            with Client(cluster) as client:
                workers = set(client.scheduler_info()["workers"])
                summary = pipeprof.dask.compare(
                    client, str(scen), "--np", "2,", "--no-report", out=tmp_path / "run"
                )
                assert sorted(summary["variant"]) == ["real", "synthetic"], summary.to_dict()
                model = json.loads((tmp_path / "run" / "model.json").read_text())
                launch = model["launches"]["2"]
                assert launch["processes"] == 2, launch
                assert len(set(launch["weights_digest"])) == 1, launch
                assert set(client.scheduler_info()["workers"]) == workers  # the same two, up
                with pytest.raises(PipeprofError, match="--launcher is set by compare itself"):
                    pipeprof.dask.compare(client, str(scen), "--launcher", "local")
    finally:
        os.environ.clear()
        os.environ.update(saved)
