"""The tf.data service remedy under a real np=2 Horovod launch: pipeprof starts a dispatcher and
two worker processes, the ranks train on what they send, bad files the workers meet are named
in the run directory, and no service process outlives the launch, or pipeprof itself."""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import psutil
import pytest

from tests.integration.conftest import pipeprof_cmd

pytestmark = pytest.mark.horovod


def service_processes(marker: str) -> list[psutil.Process]:
    """Live tf.data service processes whose command line names ``marker`` (a test's own folder)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if (
            "pipeprof.data.tfdata_service" in cmd
            and marker in cmd
            and proc.info["status"] != psutil.STATUS_ZOMBIE
        ):
            found.append(proc)
    return found


def test_the_service_remedy_trains_np2_from_two_workers_and_leaves_no_process(
    small_dataset, tmp_path, data_cache_dir
):
    root, _ = small_dataset
    data = tmp_path / "data"
    shutil.copytree(root, data)
    bad = sorted((data / "class_001").iterdir())[0]
    bad.write_bytes(bad.read_bytes()[:200])  # truncated: no end-of-image marker
    # the cache is already in place and nothing is augmented: of all remedies only the service applies
    (tmp_path / "s.toml").write_text(
        textwrap.dedent(f"""
        name = "service"
        [data]
        source = "folder"
        path = "{data}"
        image_size = 32
        num_classes = 3
        [pipeline.augment]
        enabled = false
        [pipeline.cache]
        enabled = true
        [train]
        batch_size = 8
        warmup_steps = 5
        measure_steps = 30
        """)
    )
    env = dict(os.environ, PIPEPROF_DATA_DIR=str(data_cache_dir))
    proc = subprocess.run(
        pipeprof_cmd()
        + [
            "compare",
            "s.toml",
            "--np",
            "1,2",
            "--remedies",
            "all",
            "--service-workers",
            "2",
            "--out",
            "run",
            "--no-report",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = " ".join(proc.stdout.split())
    assert "remedy augment-on-device skipped: the scenario's pipeline does not augment" in out
    assert "remedy cache-decoded skipped: the scenario already caches decoded images in RAM" in out
    summary = pd.read_csv(tmp_path / "run" / "summary.csv").set_index(["np", "variant"])
    for n in (1, 2):
        assert summary.loc[(n, "remedy:data-service"), "samples_per_s"] > 0
        assert summary.loc[(n, "remedy:data-service"), "measured_steps"] == 30
        logs = tmp_path / "run" / "service" / f"np{n}"
        assert sorted(p.name for p in logs.glob("*.log")) == [
            "dispatcher.log",
            "worker-0.log",
            "worker-1.log",
        ]
    # the workers met the truncated file in a rank's shard, and the run names it as the rank would
    bad_files = pd.read_csv(tmp_path / "run" / "bad_files.csv")
    for variant in ("real", "remedy:data-service"):
        named = bad_files[bad_files["variant"] == variant]
        assert (
            set(named["path"]) == {str(bad)}
            and named["reason"].str.startswith("truncated JPEG").all()
        )
    assert service_processes(str(tmp_path)) == []

    # sizing the service for 4 nodes of 8 GPUs and 64 cores, from what its workers spent
    proc = subprocess.run(
        pipeprof_cmd()
        + [
            "predict",
            "run",
            "--np",
            "8,16,32",
            "--gpus-per-node",
            "8",
            "--cores-per-node",
            "64",
            "--service-cores-per-worker",
            "8",
            "--no-report",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "tf.data service: workers to keep the devices fed (8 cores each" in " ".join(
        proc.stdout.split()
    )
    written = json.loads((tmp_path / "run" / "prediction.json").read_text())
    info = written["service"]
    assert info["measured_at_np"] == 2 and info["core_ms_per_sample"] > 0
    per_worker = 8 * 1e3 / info["core_ms_per_sample"]
    rows = {row["np"]: row for row in written["predictions"]}
    for n in (8, 16, 32):  # the autoscaler's rule on the predicted ceiling
        need = rows[n]["synthetic_samples_per_s"] / per_worker
        assert rows[n]["service_workers"] == max(1, math.ceil(need - 1e-9))
        assert rows[n]["service_cores"] == 8 * rows[n]["service_workers"]
    assert "service_workers" in pd.read_csv(tmp_path / "run" / "prediction.csv").columns


def test_service_processes_end_when_pipeprof_is_killed(tmp_path):
    """SIGKILL gives pipeprof no chance to stop its servers: they notice and end themselves."""
    started = tmp_path / "started"
    script = textwrap.dedent(f"""
        import pathlib, time
        from pipeprof.launch.service_processes import ServiceProcesses
        with ServiceProcesses(pathlib.Path({str(tmp_path / 'service')!r}), workers=1) as service:
            pathlib.Path({str(started)!r}).write_text(service.address)
            time.sleep(600)
        """)
    owner = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 180
        while not started.exists():
            assert owner.poll() is None and time.monotonic() < deadline, "the service did not start"
            time.sleep(0.2)
        assert len(service_processes(str(tmp_path))) == 2  # the dispatcher and one worker
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        deadline = time.monotonic() + 10
        while service_processes(str(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert service_processes(str(tmp_path)) == []
    finally:
        owner.kill()
        for proc in service_processes(str(tmp_path)):
            proc.kill()
