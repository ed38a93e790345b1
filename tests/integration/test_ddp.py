"""PyTorch DDP (``--engine ddp``): plain PyTorch, torch.distributed over Gloo, DataLoader
pipelines, in a venv that holds torch and no TensorFlow (scripts/torch.sh)."""

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest

from tests.integration.conftest import REPO, run_pipeprof, small_scenario

pytestmark = [pytest.mark.horovod, pytest.mark.torch]


def test_the_torch_venv_has_no_tensorflow():
    got = subprocess.run([sys.executable, "-c", "import tensorflow"], capture_output=True)
    assert got.returncode != 0, "tensorflow imports in the torch venv"


def test_ddp_compare_gives_rows_at_1_and_2_and_equal_weights(tmp_path, data_cache_dir):
    scen = tmp_path / "s.toml"
    scen.write_text(small_scenario("ddp-small", 20, "[pipeline.augment]\nenabled = true\n"))
    out = tmp_path / "run"
    got = run_pipeprof(
        "compare", str(scen), "--np", "1,2", "--engine", "ddp", "--out", str(out),
        "--no-report", "--no-dashboard", data=data_cache_dir, timeout=600,
    )  # fmt: skip
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(zip(summary["np"], summary["variant"])) == [
        (1, "real"), (1, "synthetic"), (2, "real"), (2, "synthetic"),
    ], got.stdout[-2000:]  # fmt: skip
    assert summary["verdict"].notna().all(), summary.to_dict()
    manifest = json.loads((out / "manifest.json").read_text())
    model = json.loads((out / "model.json").read_text())
    assert (manifest["engine"], manifest["framework"], manifest["inputs"]) == (
        "ddp", "torch", "dataloader",
    )  # fmt: skip
    launch = model["launches"]["2"]
    assert (launch["processes"], launch["backend"]) == (2, "torch"), launch
    # DDP kept the two ranks' replicas in step: the same weights at the end
    assert len(launch["weights_digest"]) == 2 and len(set(launch["weights_digest"])) == 1, launch
    steps = pd.concat(pd.read_csv(f) for f in (out / "steps").glob("np2-*.csv"))
    assert set(steps["rank"]) == {0, 1}


EXAMPLE = str(REPO / "examples" / "torch_train.py")
FAST = ("--set", "train.min_measure_s=2", "--set", "train.max_measure_s=8")


def test_a_torch_users_script_is_compared_at_np_1_and_2(small_dataset, tmp_path):
    """examples/torch_train.py with its two pipeprof lines, as a user runs it: its own
    init_process_group, DistributedSampler, DataLoader workers and DDP model, measured: the
    twin, then its loader in rounds against it, at np 1 and 2."""
    photos, _ = small_dataset
    out = tmp_path / "run"
    script = [sys.executable, EXAMPLE, "--data", str(photos), "--image-size", "32"]
    script += ["--batch-size", "8", "--workers", "1", "--epochs", "10000"]
    run_pipeprof(
        "compare", "--engine", "ddp", "--np", "1,2", "--out", str(out), "--no-report",
        "--no-dashboard", *FAST, "--", *script, timeout=600,
    )  # fmt: skip
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(zip(summary["np"], summary["variant"])) == [
        (1, "real"), (1, "synthetic"), (2, "real"), (2, "synthetic"),
    ]  # fmt: skip
    real = summary[summary["variant"] == "real"]
    assert real["gap_pct"].notna().all() and (real["input_wait_pct"] > 0).all(), real.to_dict()
    steps = pd.concat(pd.read_csv(f) for f in (out / "steps").glob("np2-real*.csv"))
    assert set(steps["rank"]) == {0, 1} and set(steps["batch_size"]) == {8}


def loader_workers(launcher: psutil.Process) -> list[psutil.Process]:
    """The DataLoader workers under ``launcher``: processes forked by a rank, with its command
    line (a rank is started anew, with a command line of its own)."""
    found = []
    for proc in launcher.children(recursive=True):
        try:
            parent = proc.parent()
            if parent is not None and parent.pid != launcher.pid:
                if proc.cmdline() == parent.cmdline() and "pipeprof" in " ".join(proc.cmdline()):
                    found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


def test_a_killed_loader_worker_is_named_in_one_line_and_the_ceiling_is_kept(
    tmp_path, data_cache_dir
):
    """kill -9 of a DataLoader worker while the real variant reads (slowly, from throttled
    storage): the run ends naming the worker's pid and SIGKILL in one line, and the synthetic
    ceiling measured before it is kept."""
    scen = tmp_path / "s.toml"
    scen.write_text(
        small_scenario(
            "ddp-kill",
            400,
            "[pipeline.read]\nthrottle_mb_s = 0.05\n[pipeline.loader]\nnum_workers = 1\n",
        )
    )
    out = tmp_path / "run"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "pipeprof", "compare", str(scen), "--np", "1", "--engine", "ddp",
         "--out", str(out), "--no-report", "--no-dashboard"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PIPEPROF_DATA_DIR": str(data_cache_dir)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        workers: list[psutil.Process] = []
        while not workers and time.monotonic() < deadline and launcher.poll() is None:
            time.sleep(0.5)
            workers = loader_workers(psutil.Process(launcher.pid))
        assert workers, "no loader worker appeared"
        victim = workers[0].pid
        os.kill(victim, signal.SIGKILL)
        said, _ = launcher.communicate(timeout=240)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode != 0, said[-3000:]
    lines = [line for line in said.splitlines() if f"loader worker pid {victim}" in line]
    assert len(lines) == 1 and "killed by SIGKILL" in lines[0], said[-3000:]
    assert "Traceback" not in said, said[-3000:]
    kept = pd.read_csv(out / "steps" / "np1-synthetic.csv")
    assert len(kept) > 0


def test_the_ceiling_benchmark_runs_on_ddp(data_cache_dir):
    """synthetic_overhead.py's smoke mode on ddp: pipeprof's synthetic row and
    plain_ddp_synthetic.py under torchrun, each measured and checked by the benchmark itself."""
    got = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "synthetic_overhead.py"), "--smoke",
         "--engine", "ddp"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PIPEPROF_DATA_DIR": str(data_cache_dir)},
    )  # fmt: skip
    assert got.returncode == 0, (got.stdout + got.stderr)[-3000:]
    assert "engine ddp," in got.stdout and "smoke: ok" in got.stdout


def test_the_pet_names_workload_runs_on_local_ranks_each_with_half_the_global_batch(tmp_path):
    """examples/petnames_ddp.py (its verdicts: test_petnames.py, on Dask) at np 2 on local
    ranks: its global batch of 256, 128 a rank."""
    out = tmp_path / "run"
    script = [sys.executable, str(REPO / "examples" / "petnames_ddp.py"), "--epochs", "10000"]
    run_pipeprof(
        "compare", "--engine", "ddp", "--set", "launch.np=[2]", "--out", str(out),
        "--no-report", "--no-dashboard", *FAST, "--", *script, timeout=600,
    )  # fmt: skip
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["np"]) == [2, 2], summary.to_dict()
    assert summary["verdict"].notna().all(), summary.to_dict()
    steps = pd.concat(pd.read_csv(f) for f in (out / "steps").glob("np2-*.csv"))
    assert set(steps["rank"]) == {0, 1} and set(steps["batch_size"]) == {128}
