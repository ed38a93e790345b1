"""Two hosts on this box (tests/cluster/netns.py): each its own hostname, cores and sshd,
linked only to each other. Compares across them with -H and with --hostfile, with mpirun, and
under a Slurm on both hosts (inside salloc, docs/cluster.md's sbatch script, scancel), their
ranks named by host in every output; the faults a cluster has (a host without sshd, two hosts with
one hostname, a rank killed on the second host, a stop signal to the launcher), each ending
in one line that names the host and leaving nothing on any host; and nothing of the cluster
left once it is torn down."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from pipeprof.rundir import RunDir
from tests.cluster.drive import (
    REPO,
    across_both,
    both_hosts_in_summary,
    finish,
    in_allocation,
    jobs_left,
    measured_before_it,
    nothing_left,
    on,
    pipeprof_argv,
    rank_pid,
    start,
    started_until_real,
    when_it_ended,
)
from tests.cluster.netns import IFACE, SUBNET

SCENARIO = """name = "two-hosts"
[data]
source = "generated"
image_size = 32
[data.generate]
images = 256
size = 32
[model]
name = "small_cnn"
[train]
batch_size = 16
device = "emulated:20"
warmup_steps = 3
measure_steps = 20
[[variants]]
name = "real"
"""


def test_each_host_has_its_own_name_cores_and_link(cluster):
    for host in cluster.hosts:
        got = on(
            cluster,
            host,
            "hostname; python3 -c 'import os; print(sorted(os.sched_getaffinity(0)))'; "
            f"ip -4 -o addr show {IFACE}",
        )
        lines = got.stdout.splitlines()
        assert got.returncode == 0, got.stderr
        assert lines[0] == host.name and lines[1] == str(host.cores) and host.ip in lines[2]
    # the machine itself is on none of the cluster's links
    assert (
        f" {SUBNET}."
        not in subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    )


@pytest.fixture
def scenario(tmp_path) -> Path:
    path = tmp_path / "two-hosts.toml"
    path.write_text(SCENARIO)
    return path


@pytest.mark.horovod
def test_a_compare_from_a_hostfile_runs_its_ranks_on_both_hosts_and_every_output_says_where(
    cluster, tmp_path, scenario
):
    """Placed by a hostfile and on the network interface the ranks share (-H is the other
    tests' way: ``across_both``), at np 1 and 2, with its report."""
    out, hostfile = tmp_path / "run", tmp_path / "hosts.txt"
    h0, h1 = cluster.hosts
    hosts = f"{h0.name}:1,{h1.name}:1"
    hostfile.write_text(f"# the cluster\n{h0.name} slots=1\n{h1.name} slots=1\n")
    argv = pipeprof_argv(
        scenario, out, "--np", "2", "--hostfile", str(hostfile), "--network-interface", IFACE
    )
    code, stdout, err = finish(start(cluster, tmp_path, argv + ["--no-dashboard"]))
    assert code == 0, stdout[-2000:] + err[-2000:]
    assert "cannot reach" not in stdout + err
    assert f"--network-interface {IFACE}" in (out / "logs" / "np2.log").read_text().splitlines()[0]
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary["variant"]) == {"synthetic", "real"} and set(summary["np"]) == {1, 2}
    assert dict(zip(summary["np"], summary["hosts"])) == {1: f"{h0.name}:1", 2: hosts}
    hellos = {(int(h["rank"]), h.get("host")) for h in RunDir(out).load().hellos(np=2)}
    assert hellos == {(0, h0.name), (1, h1.name)}  # rank 1 ran on the second host
    steps = RunDir(out).steps()
    assert set(zip(steps[steps["np"] == 2]["rank"], steps[steps["np"] == 2]["host"])) == {
        (0, h0.name),
        (1, h1.name),
    }
    # every record came over the stream, none through files the launcher's host may not see
    assert not (out / "stream").exists()
    assert f"ranks ran on np=1: {h0.name}:1 · np=2: {hosts}" in (out / "report.html").read_text()
    assert f'"rank 1 ({h1.name})"' in (out / "trace.json").read_text()
    assert not nothing_left(cluster, within_s=5)


@pytest.mark.horovod
def test_a_compare_with_mpi_across_both_hosts(cluster, tmp_path, scenario):
    import horovod.tensorflow as hvd

    assert hvd.mpi_built(), "Horovod here lacks MPI: bash scripts/setup.sh test builds it with MPI"
    out = tmp_path / "run"
    h0, h1 = cluster.hosts
    argv = across_both(cluster, scenario, out, "--mpi", "--network-interface", IFACE)
    code, stdout, err = finish(start(cluster, tmp_path, argv))
    assert code == 0, stdout[-2000:] + err[-2000:]
    # Open MPI started the ranks: mpirun tags rank 0's lines [JOB,0] (Gloo's horovodrun: [0])
    assert re.search(r"^\[\d+,0\]<stdout>:", (out / "logs" / "np2.log").read_text(), re.M)
    assert list(pd.read_csv(out / "summary.csv")["hosts"]) == [f"{h0.name}:1,{h1.name}:1"] * 2
    hellos = {(int(h["rank"]), h.get("host")) for h in RunDir(out).load().hellos(np=2)}
    assert hellos == {(0, h0.name), (1, h1.name)}
    assert not nothing_left(cluster)


@pytest.mark.horovod
def test_mpirun_as_the_launcher_across_both_hosts(cluster, tmp_path, scenario):
    """--launcher mpirun: Open MPI's mpirun starts the ranks itself, no horovodrun between."""
    out = tmp_path / "run"
    h0, h1 = cluster.hosts
    argv = across_both(cluster, scenario, out, "--launcher", "mpirun", "--network-interface", IFACE)
    code, stdout, err = finish(start(cluster, tmp_path, argv))
    assert code == 0, stdout[-2000:] + err[-2000:]
    first = (out / "logs" / "np2.log").read_text().splitlines()[0]
    assert "horovodrun" not in first and re.search(r"\bmpirun\b.* -H \S+:1,\S+:1 ", first), first
    assert f"btl_tcp_if_include {IFACE}" in first, first
    assert json.loads((out / "manifest.json").read_text())["launcher"] == "mpirun"
    assert list(pd.read_csv(out / "summary.csv")["hosts"]) == [f"{h0.name}:1,{h1.name}:1"] * 2
    hellos = {(int(h["rank"]), h.get("host")) for h in RunDir(out).load().hellos(np=2)}
    assert hellos == {(0, h0.name), (1, h1.name)}
    assert not (out / "stream").exists()
    assert not nothing_left(cluster)


@pytest.mark.horovod
def test_pipeprof_rank_under_an_mpirun_of_the_users_across_both_hosts(cluster, tmp_path, scenario):
    """The external launcher: the user's own mpirun starts `pipeprof rank` at np 1, then np 2
    into the same run directory; `pipeprof report` renders the run; each rank knew itself
    from Open MPI's variables and its host from its own name."""
    out = tmp_path / "run"
    h0, h1 = cluster.hosts
    env = dict(cluster.env, PIPEPROF_DATA_DIR=str(tmp_path / "data"))
    for np in (1, 2):
        mpirun = ["mpirun", "--allow-run-as-root", "-np", str(np), "-H", f"{h0.name}:1,{h1.name}:1"]
        mpirun += ["-bind-to", "none", "-mca", "pml", "ob1", "-mca", "btl", "^openib"]
        mpirun += ["-mca", "btl_tcp_if_include", IFACE, "-mca", "oob_tcp_if_include", IFACE]
        mpirun += ["-x", "PATH", "-x", "PIPEPROF_DATA_DIR"]
        rank = [sys.executable, "-m", "pipeprof", "rank", str(scenario), "--run-dir", str(out)]
        got = subprocess.run(
            cluster.command(h0, mpirun + rank, cwd=REPO),
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
        assert f"pipeprof rank: scenario two-hosts, np={np} (Open MPI)" in got.stdout
    report = subprocess.run(
        [sys.executable, "-m", "pipeprof", "report", str(out), "--format", "html"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stderr
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(zip(summary["np"], summary["variant"])) == [
        (1, "real"),
        (1, "synthetic"),
        (2, "real"),
        (2, "synthetic"),
    ]
    assert dict(zip(summary["np"], summary["hosts"])) == {
        1: f"{h0.name}:1",
        2: f"{h0.name}:1,{h1.name}:1",
    }
    assert json.loads((out / "manifest.json").read_text())["worker_counts"] == [1, 2]
    assert (out / "report.html").exists()
    assert not nothing_left(cluster)


@pytest.mark.horovod
def test_multi_worker_mirrored_across_both_hosts(cluster, tmp_path, scenario):
    """train.engine multi_worker_mirrored: a worker of tf.distribute's cluster on each host,
    TF_CONFIG written by each rank from the launch's placement, horovodrun only starting the
    processes; the collectives go over the hosts' link."""
    out = tmp_path / "run"
    h0, h1 = cluster.hosts
    # np=2 only: one worker alone on the first host is the salloc test's np=1 (below)
    argv = pipeprof_argv(scenario, out, "--np", "2,", "-H", f"{h0.name}:1,{h1.name}:1")
    argv += ["--engine", "multi_worker_mirrored", "--no-report", "--no-dashboard"]
    code, stdout, err = finish(start(cluster, tmp_path, argv))
    assert code == 0, stdout[-3000:] + err[-3000:]
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(zip(summary["np"], summary["variant"])) == [(2, "real"), (2, "synthetic")]
    assert set(summary["hosts"]) == {f"{h0.name}:1,{h1.name}:1"}
    real = summary[summary["variant"] == "real"]
    assert real["gap_pct"].notna().all() and real["verdict"].astype(str).str.len().gt(0).all()
    steps = RunDir(out).steps()
    assert set(zip(steps[steps["np"] == 2]["rank"], steps[steps["np"] == 2]["host"])) == {
        (0, h0.name),
        (1, h1.name),
    }
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["scenario"]["train"]["engine"] == "multi_worker_mirrored"
    assert not nothing_left(cluster)


@pytest.mark.horovod
def test_a_users_own_script_across_both_hosts(cluster, tmp_path):
    """The user's Horovod Keras script (examples/chips_train.py, pipeprof.keras's two lines),
    one rank on each host, reading photos from a folder both hosts see."""
    from pipeprof.data.generate import generate
    from pipeprof.scenario import GenerateConfig

    photos = generate(GenerateConfig(images=64, size=48, classes=2, seed=11), tmp_path / "photos")
    out = tmp_path / "run"
    h0, h1 = cluster.hosts
    fast = ["--set", "train.warmup_steps=5", "--set", "train.measure_steps=40"]  # fixed: quick
    script = [sys.executable, os.path.join(REPO, "examples", "chips_train.py"), "--data"]
    argv = [sys.executable, "-m", "pipeprof", "compare", "--np", "2,", "-H"]
    argv += [f"{h0.name}:1,{h1.name}:1", "--no-dashboard", "--no-report", "--out", str(out)]
    argv += [*fast, "--", *script, str(photos), "--image-size", "32", "--batch-size", "8"]
    code, stdout, err = finish(start(cluster, tmp_path, argv + ["--epochs", "1000"]))
    assert code == 0, stdout[-2000:] + err[-2000:]
    assert "cannot reach" not in stdout + err
    summary = pd.read_csv(out / "summary.csv")
    assert list(zip(summary["np"], summary["variant"])) == [(2, "synthetic"), (2, "real")]
    assert set(summary["hosts"]) == {f"{h0.name}:1,{h1.name}:1"}
    assert summary["samples_per_s"].gt(0).all() and summary["gap_pct"].notna().iloc[1]
    steps = RunDir(out).steps()
    assert set(zip(steps["rank"], steps["host"])) == {(0, h0.name), (1, h1.name)}
    assert not (out / "stream").exists()  # every record came over the stream
    assert not nothing_left(cluster, within_s=10)


def test_two_hosts_with_one_hostname_are_refused_before_anything_runs(cluster, tmp_path, scenario):
    h0, h1 = cluster.hosts
    cluster.set_hostname(h1, h0.name)  # as two containers from one image
    try:
        argv = pipeprof_argv(scenario, tmp_path / "run", "-H", f"{h0.name}:1,{h1.name}:1")
        code, _, err = finish(start(cluster, tmp_path, argv), timeout=60)
    finally:
        cluster.set_hostname(h1, h1.name)
    assert code != 0 and err.strip().count("\n") == 0, err
    assert f"hosts {h0.name}, {h1.name} all have the hostname '{h0.name}'" in err
    assert not (tmp_path / "run").exists()  # refused before a run directory was made


def test_a_host_without_sshd_is_named_before_anything_runs_and_by_doctor(
    cluster, tmp_path, scenario
):
    h0, h1 = cluster.hosts
    hosts = f"{h0.name}:1,{h1.name}:1"
    cluster.stop_sshd(h1)
    try:
        argv = pipeprof_argv(scenario, tmp_path / "run", "-H", hosts)
        code, _, err = finish(start(cluster, tmp_path, argv), timeout=60)
        doctor = finish(
            start(
                cluster,
                tmp_path,
                [sys.executable, "-m", "pipeprof", "doctor", "--set", f"launch.hosts={hosts}"],
            ),
            timeout=300,
        )
    finally:
        cluster.start_sshd(h1)
        cluster.wait_for_ssh()  # the next test's ssh would meet "Connection refused" (seen once)
    assert code != 0 and err.strip().count("\n") == 0, err
    assert f"host {h1.name}: ssh {h1.name} failed (" in err and "Connection refused" in err
    assert not (tmp_path / "run").exists()
    assert f"host {h1.name}" in doctor[1] and f"ssh {h1.name} failed" in doctor[1], doctor[1]
    assert f"host {h0.name}" in doctor[1]


@pytest.mark.horovod
def test_kill_9_of_the_rank_on_the_second_host_names_that_rank_and_host(
    cluster, tmp_path, scenario
):
    out = tmp_path / "run"
    h0, h1 = cluster.hosts
    proc = started_until_real(cluster, tmp_path, scenario, out)
    os.kill(rank_pid(cluster, h1, 1), signal.SIGKILL)
    code, _, err = finish(proc, timeout=120)
    assert code == 1 and err.strip().count("\n") == 0, err
    # a remote rank killed by a signal ends its ssh session with 255, as a lost link does
    assert f"np=2: rank 1 on {h1.name} ended without an error line; ssh exited 255" in err, err
    assert not nothing_left(cluster)
    assert measured_before_it(out) == 200  # the synthetic variant, measured before the kill: kept


def test_a_rank_over_ssh_ends_when_its_ssh_client_is_stopped(cluster):
    """What a launcher's stop does to a rank on another host: horovodrun and mpirun stop the
    ssh client, and sshd then closes the rank's output without a signal. A rank blocked where
    Python code cannot run (a tf.distribute worker in a gRPC collective whose peer is gone)
    still ends (supervise.end_when_output_closes, started by every pipeprof rank)."""
    h0, h1 = cluster.hosts
    blocked = (
        "from pipeprof.launch import supervise; import threading; "
        "supervise.end_when_output_closes(); print('ready', flush=True); threading.Event().wait()"
    )
    client = subprocess.Popen(
        cluster.ssh(h0, h1.name, f'cd {REPO} && {sys.executable} -c "{blocked}"'),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert client.stdout.readline() == "ready\n", client.stderr.read()
        assert cluster.processes(h1), "the blocked process is not running on the second host"
        client.terminate()  # horovodrun's safe_shell_exec: SIGTERM to the ssh client
        client.wait(timeout=10)
    finally:
        if client.poll() is None:
            client.kill()
    left = nothing_left(cluster)
    assert not left, f"still running 10 s after ssh stopped: {when_it_ended(cluster, left)}"


@pytest.mark.horovod
@pytest.mark.parametrize("engine", ["horovod", "multi_worker_mirrored"])
def test_a_stop_signal_to_the_launcher_leaves_nothing_on_any_host(
    cluster, tmp_path, scenario, engine
):
    """SIGTERM, as Slurm's scancel and time limit send it. SIGINT and SIGHUP take the same
    handler (pipeprof.launch.signals.SIGNALS), each tested on one host (test_signals_np2.py,
    test_live_np2.py); what crosses hosts, the remote ranks' end, does not depend on which.
    It may depend on the engine: tf.distribute's workers hold gRPC collectives open to each
    other, Horovod's ranks Gloo's."""
    sig = signal.SIGTERM
    out = tmp_path / "run"
    proc = started_until_real(cluster, tmp_path, scenario, out, "--engine", engine)
    proc.send_signal(sig)
    code, _, err = finish(proc, timeout=30)
    assert code == 128 + sig, err[-2000:]
    assert f"interrupted by {sig.name}" in err and err.strip().count("\n") == 0, err
    left = nothing_left(cluster)
    assert not left, f"still running 10 s after {sig.name}: {when_it_ended(cluster, left)}"
    assert measured_before_it(out) == 200


@pytest.mark.horovod
def test_a_host_whose_link_goes_down_mid_run_is_named_within_the_launch_timeout(
    cluster, tmp_path, scenario
):
    out = tmp_path / "run"
    h0, h1 = cluster.hosts
    proc = started_until_real(cluster, tmp_path, scenario, out, "--timeout", "120")
    t0 = time.monotonic()
    cluster.set_link(h1, up=False)  # a pulled cable: nothing is told to anyone
    try:
        code, _, err = finish(proc, timeout=180)
        took = time.monotonic() - t0
    finally:
        cluster.set_link(h1, up=True)
    assert code == 1 and err.strip().count("\n") == 0, err
    # it ended by itself (the ranks' collectives timed out), not by launch.timeout_s
    assert "timed out after" not in err and took < 120, f"{took:.0f} s: {err}"
    assert f"np=2: rank 1 on {h1.name} went silent" in err, err
    assert not (left := nothing_left(cluster, within_s=60)), left


FOLDER_SCENARIO = """name = "bad-file-on-h1"
[data]
source = "folder"
path = "{root}"
image_size = 32
num_classes = 2
on_bad_file = "{on_bad_file}"
[train]
batch_size = 8
device = "emulated:20"
warmup_steps = 2
measure_steps = 10
[[variants]]
name = "real"
"""


@pytest.mark.horovod
def test_a_bad_file_only_the_second_host_reads_is_named_with_its_host(cluster, tmp_path):
    from PIL import Image

    root = tmp_path / "images"
    for k, name in enumerate(("a", "b")):
        (root / name).mkdir(parents=True)
        for i in range(16):
            Image.new("RGB", (32, 32), (8 * i, 100 * k, 50)).save(root / name / f"{i:03d}.jpg")
    bad = root / "a" / "001.jpg"  # the second of the sorted files: rank 1's shard
    bad.write_bytes(bad.read_bytes()[:200])  # truncated
    h0, h1 = cluster.hosts
    for on_bad_file in ("skip", "fail"):
        scenario = tmp_path / f"{on_bad_file}.toml"
        scenario.write_text(FOLDER_SCENARIO.format(root=root, on_bad_file=on_bad_file))
        out = tmp_path / on_bad_file
        # --shard-then-shuffle: each rank reads every other file of the sorted list
        argv = across_both(cluster, scenario, out, "--shard-then-shuffle")
        code, stdout, err = finish(start(cluster, tmp_path, argv))
        said = " ".join((stdout + err).split())
        if on_bad_file == "skip":
            assert code == 0, said[-2000:]
            assert f"{bad} (truncated JPEG" in said and f"read on {h1.name})" in said, said
            listed = pd.read_csv(out / "bad_files.csv")
            assert list(zip(listed["path"], listed["rank"], listed["host"])) == [
                (str(bad), 1, h1.name)
            ]
        else:
            assert code == 1 and err.strip().count("\n") == 0, err
            assert f"np=2: rank 1 on {h1.name}: variant real: bad file {bad}: " in err, err
    assert not nothing_left(cluster)


WATCHED = """
import horovod.tensorflow.keras as hvd
import tensorflow as tf
from pipeprof.keras import PipeprofCallback

hvd.init()
x = tf.random.uniform([256, 32, 32, 3])
y = tf.random.uniform([256], maxval=4, dtype=tf.int32)
ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(hvd.size(), hvd.rank()).repeat().batch(16)
model = tf.keras.Sequential([tf.keras.layers.Conv2D(8, 3, input_shape=(32, 32, 3)),
                             tf.keras.layers.GlobalAveragePooling2D(), tf.keras.layers.Dense(4)])
model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01)),
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(ds, steps_per_epoch=20, epochs=1, verbose=0,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), PipeprofCallback(warmup_steps=3)])
"""


@pytest.mark.horovod
def test_watch_of_a_users_horovodrun_across_both_hosts_streams_every_rank(cluster, tmp_path):
    (tmp_path / "train.py").write_text(WATCHED)
    out = tmp_path / "run"
    h0, h1 = cluster.hosts
    horovodrun = str(Path(sys.executable).parent / "horovodrun")
    argv = [sys.executable, "-m", "pipeprof", "watch", "--no-dashboard", "--out", str(out)]
    argv += ["--", horovodrun, "-np", "2", "-H", f"{h0.name}:1,{h1.name}:1", "--gloo"]
    argv += [sys.executable, str(tmp_path / "train.py")]
    env = dict(cluster.env, PYTHONPATH=REPO)
    proc = subprocess.run(
        cluster.command(h0, argv, cwd=tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    steps = pd.read_csv(out / "live" / "steps.csv")
    assert steps.groupby("rank").size().to_dict() == {0: 20, 1: 20}
    assert set(zip(steps["rank"], steps["host"])) == {(0, h0.name), (1, h1.name)}
    # streamed from the second host to the address that routes there, not through files
    assert not (out / "stream").exists() and "cannot reach" not in proc.stdout + proc.stderr
    assert not nothing_left(cluster)


# -- Slurm on the two hosts (the cluster's conftest.py): last in this file --------------------


@pytest.mark.horovod  # the slow tier: it starts Slurm's daemons
def test_slurm_runs_a_step_on_each_host_and_scancel_ends_a_running_job(cluster, slurm, tmp_path):
    h0, h1 = cluster.hosts
    got = slurm.run("srun", "-N2", "-n2", "sh", "-c", 'echo "$(hostname) $SLURM_PROCID"')
    assert got.returncode == 0, got.stderr
    assert sorted(got.stdout.split("\n")[:2]) == [f"{h0.name} 0", f"{h1.name} 1"], got.stdout
    marker = f"pipeprof-slurm-test-{os.getpid()}"
    job = slurm.run(
        "sbatch",
        "--parsable",
        "-N2",
        "-n2",
        "-o",
        str(tmp_path / "job.out"),
        "--wrap",
        f"srun -N2 -n2 bash -c 'exec -a {marker} sleep 300'",
    )
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 30
    while not all(any(marker in p for p in cluster.processes(h)) for h in cluster.hosts):
        out = tmp_path / "job.out"
        assert time.monotonic() < deadline, (
            {h.name: cluster.processes(h) for h in cluster.hosts},
            slurm.run("squeue").stdout,
            out.read_text() if out.exists() else "no job output",
        )
        time.sleep(0.2)
    assert slurm.run("scancel", job_id).returncode == 0
    assert not (left := jobs_left(cluster, slurm, within_s=15)), left


@pytest.mark.horovod
@pytest.mark.parametrize("engine", ["horovod", "multi_worker_mirrored"])
def test_inside_salloc_a_compare_runs_each_worker_count_as_a_job_step(
    cluster, slurm, tmp_path, scenario, engine
):
    """No launcher named, no hosts named: inside the allocation the ranks are srun's tasks on
    the allocation's nodes, and the first line says so; tf.distribute's workers too, each
    writing its TF_CONFIG from srun's placement."""
    h0, h1 = cluster.hosts
    out = tmp_path / "run"
    got = in_allocation(
        slurm,
        tmp_path,
        *pipeprof_argv(
            scenario, out, "--np", "1,2", "--engine", engine, "--no-report", "--no-dashboard"
        ),
    )
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
    first = got.stdout.splitlines()[0]
    assert "launcher srun (the default inside a Slurm allocation; Slurm allocation" in first, first
    assert f"np=2: starting 2 rank(s) with srun on {h0.name}:1,{h1.name}:1" in got.stdout
    both_hosts_in_summary(out, h0, h1)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["launcher"] == "srun"
    # each rank knew its host: rank 1's step records say the second host
    steps = pd.concat(pd.read_csv(f) for f in (out / "steps").glob("np2-*.csv"))
    assert set(zip(steps["rank"], steps["host"])) == {(0, h0.name), (1, h1.name)}
    assert not (left := jobs_left(cluster, slurm)), left


@pytest.mark.horovod
def test_inside_salloc_a_users_own_script_runs_as_srun_tasks(cluster, slurm, tmp_path):
    """examples/chips_train.py under srun: each task made a Horovod rank before the script's
    hvd.init(), with no change to the script."""
    from pipeprof.data.generate import generate
    from pipeprof.scenario import GenerateConfig

    h0, h1 = cluster.hosts
    photos = generate(GenerateConfig(images=64, size=48, classes=2, seed=11), tmp_path / "photos")
    out = tmp_path / "run"
    fast = ["--set", "train.warmup_steps=5", "--set", "train.measure_steps=40"]  # fixed: quick
    script = [sys.executable, os.path.join(REPO, "examples", "chips_train.py"), "--data"]
    argv = [sys.executable, "-m", "pipeprof", "compare", "--np", "2,", "--no-dashboard"]
    argv += ["--no-report", "--out", str(out), *fast, "--", *script, str(photos)]
    got = in_allocation(
        slurm, tmp_path, *argv, "--image-size", "32", "--batch-size", "8", "--epochs", "1000"
    )
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
    assert "launcher srun (the default inside a Slurm allocation" in got.stdout.splitlines()[0]
    summary = pd.read_csv(out / "summary.csv")
    assert list(zip(summary["np"], summary["variant"])) == [(2, "synthetic"), (2, "real")]
    assert set(summary["hosts"]) == {f"{h0.name}:1,{h1.name}:1"}
    steps = RunDir(out).steps()
    assert set(zip(steps["rank"], steps["host"])) == {(0, h0.name), (1, h1.name)}
    assert not (left := jobs_left(cluster, slurm)), left


@pytest.mark.horovod
def test_the_limits_of_an_allocation_are_one_line_each(cluster, slurm, tmp_path, scenario):
    out = tmp_path / "run"
    got = in_allocation(
        slurm, tmp_path, *pipeprof_argv(scenario, out, "--np", "4", "--no-dashboard")
    )
    assert got.returncode != 0 and not out.exists()
    errors = [line for line in (got.stdout + got.stderr).splitlines() if "error" in line]
    expected = r"pipeprof: error: np=4 needs 4 slots but Slurm allocation \d+ " + re.escape(
        "(pp-h[0-1]: 1 task(s) on each of 2 node(s)) offers 2; ask salloc/sbatch for more "
        "(-n, --ntasks-per-node, -N) or lower --np"
    )
    assert len(errors) == 1 and re.fullmatch(expected, errors[0]), errors
    outside = subprocess.run(
        cluster.command(
            cluster.hosts[0],
            pipeprof_argv(scenario, out, "--np", "1", "--launcher", "srun"),
            cwd=REPO,
        ),
        env=slurm.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert outside.returncode != 0 and not out.exists()
    assert [line for line in (outside.stdout + outside.stderr).splitlines() if line] == [
        "pipeprof: error: --launcher srun: not inside a Slurm allocation (SLURM_JOB_ID is not "
        "set); run pipeprof inside salloc or an sbatch script, or use --launcher horovodrun"
    ]


def docs_sbatch_script() -> str:
    """The sbatch script docs/cluster.md shows, as written there."""
    text = (Path(REPO) / "docs" / "cluster.md").read_text()
    found = re.search(r"<!-- sbatch-script -->\s*```bash\n(.*?)```", text, re.S)
    assert found, "docs/cluster.md has no sbatch script marked <!-- sbatch-script -->"
    return textwrap.dedent(found.group(1))  # as written, less the list item's indent


def submit(cluster, slurm, tmp_path, scenario: Path, *sbatch: str) -> subprocess.CompletedProcess:
    """docs/cluster.md's sbatch script submitted from the first host, from the environment
    pipeprof is installed in, as the docs say, with the suite's small scenario."""
    script = tmp_path / "pipeprof.sbatch"
    script.write_text(docs_sbatch_script())
    path = f"{Path(sys.executable).parent}{os.pathsep}{slurm.env['PATH']}"
    env = dict(
        slurm.env,
        PATH=path,
        PIPEPROF_SCENARIO=str(scenario),
        PIPEPROF_DATA_DIR=str(tmp_path / "data"),
    )
    argv = ["sbatch", "--parsable", f"--chdir={tmp_path}", *sbatch, str(script)]
    return subprocess.run(
        slurm.command(*argv), env=env, capture_output=True, text=True, timeout=300, cwd=REPO
    )


@pytest.mark.horovod
def test_the_sbatch_script_docs_cluster_md_shows_runs_as_written(
    cluster, slurm, tmp_path, scenario
):
    h0, h1 = cluster.hosts
    job = submit(cluster, slurm, tmp_path, scenario)
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip().split(";")[0]
    log, out = tmp_path / f"pipeprof-{job_id}.out", tmp_path / f"pipeprof-run-{job_id}"
    # sbatch --wait polls at growing intervals (20-40 s here): squeue, every 0.2 s, is quicker
    deadline = time.monotonic() + 300
    while slurm.run("squeue", "-h", "-j", job_id).stdout.strip():
        assert time.monotonic() < deadline, log.read_text()[-3000:] if log.exists() else "no output"
        time.sleep(0.2)
    assert RunDir(out).status()["state"] == "finished", log.read_text()[-3000:]
    both_hosts_in_summary(out, h0, h1)
    # the job's output is a file: the results table is there whole, every header uncut
    text = log.read_text()
    for header in ("cores/rank", "input-bound", "scaling eff.", "step p50 ms"):
        assert header in text, text[-3000:]
    assert "…" not in text
    assert not (left := jobs_left(cluster, slurm)), left


@pytest.mark.horovod
def test_scancel_of_a_compare_mid_run_leaves_nothing_and_keeps_what_was_measured(
    cluster, slurm, tmp_path
):
    longer = tmp_path / "longer.toml"
    longer.write_text(SCENARIO.replace("measure_steps = 20", "measure_steps = 150"))
    job = submit(cluster, slurm, tmp_path, longer)
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip().split(";")[0]
    log, out = tmp_path / f"pipeprof-{job_id}.out", tmp_path / f"pipeprof-run-{job_id}"
    deadline = time.monotonic() + 180
    while "np=2: ranks up" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, log.read_text() if log.exists() else "no output"
        time.sleep(0.2)
    assert slurm.run("scancel", job_id).returncode == 0
    assert not (left := jobs_left(cluster, slurm, within_s=20)), left
    assert RunDir(out).status()["state"] == "interrupted"
    summary = pd.read_csv(out / "summary.csv")  # np=1, measured before the cancel, is kept
    assert set(summary[summary["np"] == 1]["variant"]) == {"synthetic", "real"}
    assert "interrupted by SIGTERM" in log.read_text()
