"""scancel, a job's time limit (SIGTERM) and a closed terminal (SIGHUP) during a real np=2 compare:
every rank ends, nothing pipeprof started outlives it, and the finished variant is summarised.
And a tf.distribute rank whose launcher has gone ends, though TensorFlow catches its SIGTERM."""

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pandas as pd
import psutil
import pytest

from tests.integration.conftest import pipeprof_cmd, small_scenario

pytestmark = pytest.mark.horovod

REPO = Path(__file__).resolve().parents[2]
TAG = "PIPEPROF_TEST_RUN"  # inherited by horovodrun, its supervisors and the ranks


def tagged(tag: str) -> list[psutil.Process]:
    """Every live process carrying this test's tag in its environment."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if (
                p.pid != os.getpid()
                and p.status() != psutil.STATUS_ZOMBIE
                and p.environ().get(TAG) == tag
            ):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def started_by(tag: str) -> list[str]:
    return [f"{p.pid}: {' '.join(p.info['cmdline'] or [])[:150]}" for p in tagged(tag)]


def rank_process(tag: str, rank: int) -> psutil.Process:
    """The rank's own process (python -m pipeprof.rank, not a shell or ssh before it)."""
    for p in tagged(tag):
        try:
            if "pipeprof.rank" in p.info["cmdline"] and p.environ().get("HOROVOD_RANK") == str(
                rank
            ):
                return p
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    raise AssertionError(f"no process of rank {rank}: {started_by(tag)}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_signal_ends_every_rank_and_keeps_the_finished_variant(
    sig, tmp_path, data_cache_dir
):
    (tmp_path / "s.toml").write_text(small_scenario("signalled", 200, "[launch]\nnp = [2]\n"))
    out, tag = tmp_path / "run", uuid.uuid4().hex
    env = dict(os.environ, PIPEPROF_DATA_DIR=str(data_cache_dir), **{TAG: tag})
    with (
        (tmp_path / "stdout.txt").open("w") as stdout,
        (tmp_path / "stderr.txt").open("w") as stderr,
    ):
        proc = subprocess.Popen(
            pipeprof_cmd() + ["compare", "s.toml", "--out", str(out)],
            cwd=tmp_path,
            stdout=stdout,
            stderr=stderr,
            env=env,
        )
    try:
        deadline = time.monotonic() + 180
        while not (out / "steps" / "np2-synthetic.csv").exists():  # the real variant is starting
            assert proc.poll() is None and time.monotonic() < deadline, (
                tmp_path / "stderr.txt"
            ).read_text()
            time.sleep(0.1)
        time.sleep(1.0)
        assert proc.poll() is None and started_by(tag), "the real variant should still be running"
        t0 = time.monotonic()
        proc.send_signal(sig)
        code = proc.wait(timeout=10)
        while (left := started_by(tag)) and time.monotonic() - t0 < 10:
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = (tmp_path / "stderr.txt").read_text()
    assert code == 128 + sig, err[-2000:]
    assert not left, f"still running 10 s after {sig.name}: {left}"
    assert f"interrupted by {sig.name}" in err and err.strip().count("\n") == 0
    summary = pd.read_csv(out / "summary.csv")
    synthetic = summary[summary["variant"] == "synthetic"]
    assert len(synthetic) == 1 and synthetic["measured_steps"].iloc[0] == 200
    assert not list(out.glob("*.tmp"))


def test_kill_9_of_rank_1_names_rank_1_not_rank_0_which_saw_the_shutdown(tmp_path, data_cache_dir):
    """The rank-blame bug, on one host: rank 0 only sees Horovod shut down and says so first;
    the line must name rank 1, which printed nothing."""
    (tmp_path / "s.toml").write_text(small_scenario("killed", 200, "[launch]\nnp = [2]\n"))
    out, tag = tmp_path / "run", uuid.uuid4().hex
    env = dict(os.environ, PIPEPROF_DATA_DIR=str(data_cache_dir), **{TAG: tag})
    proc = subprocess.Popen(
        pipeprof_cmd() + ["compare", "s.toml", "--out", str(out), "--no-report"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 180
        while not (out / "steps" / "np2-synthetic.csv").exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(1.0)
        rank_process(tag, 1).kill()
        _, err = proc.communicate(timeout=60)
        t0 = time.monotonic()
        while (left := started_by(tag)) and time.monotonic() - t0 < 10:
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and err.strip().count("\n") == 0, err[-2000:]
    assert "np=2: rank 1 was killed by SIGKILL (exit 137) and printed no error" in err, err
    assert not left, f"still running 10 s after the kill: {left}"
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary[summary["variant"] == "synthetic"]) == 1  # measured before it: kept


# A tf.distribute rank started over ssh, as the launcher's stop finds it: TensorFlow's
# preemption notifier, installed with MultiWorkerMirroredStrategy, catches SIGTERM and only
# records it, so end_when_output_closes's SIGTERM alone left such a rank running (13.7 s after
# its launcher, in a CI run of tests/cluster/test_two_hosts.py); its SIGKILL ends it
TF_DISTRIBUTE_RANK = """
import json, os, sys, threading
def caught():
    with open("/proc/self/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    return bool(mask & (1 << (15 - 1)))
before = caught()
os.environ["TF_CONFIG"] = json.dumps(
    {"cluster": {"worker": ["127.0.0.1:" + sys.argv[1]]}, "task": {"type": "worker", "index": 0}}
)
import tensorflow as tf
tf.distribute.MultiWorkerMirroredStrategy()
from pipeprof.launch import supervise
supervise.end_when_output_closes()
print("ready", before, caught(), flush=True)
threading.Event().wait()
"""


def test_a_tf_distribute_rank_whose_launcher_has_gone_ends_though_its_sigterm_is_caught():
    from pipeprof.launch.supervise import ORPHAN_GRACE_S

    with socket.socket() as s:  # a free port for the strategy's gRPC server
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", TF_DISTRIBUTE_RANK, str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(REPO)),
    )
    try:
        # SIGTERM was not caught before the strategy, and is after
        assert proc.stdout.readline() == b"ready False True\n"
        t0 = time.monotonic()
        proc.stdout.close()
        assert proc.wait(timeout=30) == -signal.SIGKILL
        assert time.monotonic() - t0 >= ORPHAN_GRACE_S
    finally:
        if proc.poll() is None:
            proc.kill()
