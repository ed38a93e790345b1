"""What the cluster's tests share: starting pipeprof on the first host as a user there would,
waiting for it, finding a rank's process on a host, and checking that nothing is left running
on any host once a launch ended (tests/cluster/netns.py makes the hosts, slurm.py the Slurm)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def on(cluster, host, *argv):
    return subprocess.run(
        cluster.ssh(cluster.hosts[0], host.name, *argv), capture_output=True, text=True, timeout=30
    )


def pipeprof_argv(scenario: Path, out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "pipeprof", "compare", str(scenario), "--out", str(out), *args]


def across_both(cluster, scenario: Path, out: Path, *more: str) -> list[str]:
    """A compare at np=2 only, one rank on each host, without report or dashboard."""
    h0, h1 = cluster.hosts
    hosts = f"{h0.name}:1,{h1.name}:1"
    return pipeprof_argv(
        scenario, out, "--np", "2,", "-H", hosts, "--no-report", "--no-dashboard", *more
    )


def start(cluster, tmp_path, argv: list[str], **kw) -> subprocess.Popen:
    """``argv`` started on the first host, as a user there starts pipeprof."""
    env = dict(cluster.env, PIPEPROF_DATA_DIR=str(tmp_path / "data"), COLUMNS="300")
    return subprocess.Popen(
        cluster.command(cluster.hosts[0], argv, cwd=REPO),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise
    return proc.returncode, out, err


def nothing_left(cluster, within_s: float = 10.0) -> dict[str, list[str]]:
    """What still runs on each host ``within_s`` after a launch ended (empty: nothing)."""
    deadline = time.monotonic() + within_s
    while True:
        left = {h.name: cluster.processes(h) for h in cluster.hosts}
        left = {h: p for h, p in left.items() if p}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def when_it_ended(cluster, left: dict[str, list[str]], more_s: float = 30.0) -> str:
    """For a failure's message, what ``nothing_left`` found: whether it ended within
    ``more_s`` more seconds, and after how many. The assertion's 10 s stands: this only says
    how far past them it ran (CI, 2026-11-27: a tf.distribute rank on the second host, 13.7 s;
    TensorFlow's preemption notifier had caught its SIGTERM, now followed by a SIGKILL)."""
    t0 = time.monotonic()
    still = nothing_left(cluster, within_s=more_s)
    waited = time.monotonic() - t0
    return f"{left}; " + (
        f"still running {more_s:.0f} s later: {still}" if still else f"ended {waited:.1f} s later"
    )


def rank_pid(cluster, host, rank: int, variable: str = "HOROVOD_RANK") -> int:
    """The pid of the rank's Python process on ``host`` (not the shell or ssh before it): the
    one whose environment sets ``variable`` (its launcher's name for the rank) to ``rank``."""
    for line in cluster.processes(host):
        pid = int(line.split(":", 1)[0])
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if "python" in os.path.basename(exe) and f"{variable}={rank}".encode() in env:
            return pid
    raise AssertionError(f"no rank {rank} on {host.name}: {cluster.processes(host)}")


def started_until_real(cluster, tmp_path, scenario, out, *more: str) -> subprocess.Popen:
    """A compare at np=2 across both hosts, once its synthetic variant is measured."""
    proc = start(cluster, tmp_path, across_both(cluster, scenario, out, "--steps", "200", *more))
    deadline = time.monotonic() + 180
    while not (out / "steps" / "np2-synthetic.csv").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(proc.communicate()[1][-2000:])
        time.sleep(0.1)
    time.sleep(1.0)
    return proc


def measured_before_it(out: Path) -> int:
    """The synthetic variant's measured steps in summary.csv (200: all of them)."""
    summary = pd.read_csv(out / "summary.csv")
    return int(summary.set_index("variant").loc["synthetic", "measured_steps"])


def jobs_left(cluster, slurm, within_s: float = 10.0) -> dict[str, list[str]]:
    """What runs on each host besides Slurm's own daemons, ``within_s`` after a job ended."""
    deadline = time.monotonic() + within_s
    while True:
        left = {
            h.name: [p for p in cluster.processes(h) if not slurm.is_daemon(p)]
            for h in cluster.hosts
        }
        left = {h: p for h, p in left.items() if p}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def in_allocation(slurm, tmp_path, *argv: str, timeout: float = 300):
    """``salloc -N2 -n2`` (one task on each host) running ``argv`` on the first host."""
    env = dict(slurm.env, PIPEPROF_DATA_DIR=str(tmp_path / "data"), COLUMNS="300")
    return subprocess.run(
        slurm.command("salloc", "-N2", "-n2", *argv),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def both_hosts_in_summary(out: Path, h0, h1) -> None:
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(set(summary["np"])) == [1, 2]
    assert set(summary["variant"]) == {"synthetic", "real"}
    assert dict(zip(summary["np"], summary["hosts"])) == {
        1: f"{h0.name}:1",
        2: f"{h0.name}:1,{h1.name}:1",
    }
