"""scancel, a job's time limit (SIGTERM) and a closed terminal (SIGHUP) during a real np=2 compare:
every rank ends, nothing pipeprof started outlives it, and the finished variant is summarised."""

import os
import signal
import subprocess
import time
import uuid

import pandas as pd
import psutil
import pytest

from tests.integration.conftest import pipeprof_cmd, small_scenario

pytestmark = pytest.mark.horovod

TAG = "PIPEPROF_TEST_RUN"  # inherited by horovodrun, its supervisors and the ranks


def started_by(tag: str) -> list[str]:
    """Every live process carrying this test's tag in its environment."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if (
                p.pid != os.getpid()
                and p.status() != psutil.STATUS_ZOMBIE
                and p.environ().get(TAG) == tag
            ):
                found.append(f"{p.pid}: {' '.join(p.info['cmdline'] or [])[:150]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


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
