"""Emulated accelerators with many real Horovod ranks, and predict on a real run directory."""

import json
import os
import subprocess

import pandas as pd
import pytest

from tests.integration.conftest import pipeprof_cmd

pytestmark = pytest.mark.horovod

TINY = """
name = "tiny-emulated"
[data]
source = "generated"
image_size = 32
num_classes = 3
[data.generate]
images = 120
size = 40
classes = 3
[train]
batch_size = 8
warmup_steps = 3
measure_steps = 12
"""


def run(args, cwd, data_dir, timeout=600):
    return subprocess.run(pipeprof_cmd() + args, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PIPEPROF_DATA_DIR=str(data_dir)))


def test_compare_np8_with_emulated_devices_runs_8_real_ranks(tmp_path, data_cache_dir):
    (tmp_path / "s.toml").write_text(TINY)
    # --np 8 means 1, 2, 4, 8 workers: the last launch holds 8 real Horovod ranks
    proc = run(["compare", "s.toml", "--np", "8", "--device", "emulated:30", "--oversubscribe", "--out", "run"],
               tmp_path, data_cache_dir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "EMULATED" in proc.stdout
    steps = pd.read_csv(tmp_path / "run" / "steps" / "np8-real.csv")
    assert sorted(steps["rank"].unique()) == list(range(8))
    measured = steps[~steps["warmup"]]
    assert (measured["step_time_ms"] >= 30).all()  # each step holds the emulated device for 30 ms
    summary = pd.read_csv(tmp_path / "run" / "summary.csv")
    assert set(summary["np"]) == {1, 2, 4, 8} and (summary["device"] == "emulated:30ms").all()
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["device"] == "emulated:30ms"
    model = json.loads((tmp_path / "run" / "model.json").read_text())
    assert model["gradient_bytes"] == 4 * model["parameters"] > 0


def test_without_oversubscribe_8_ranks_on_2_cores_are_refused(tmp_path, data_cache_dir):
    (tmp_path / "s.toml").write_text(TINY)
    proc = run(["compare", "s.toml", "--np", "8", "--device", "emulated:30"], tmp_path, data_cache_dir, timeout=60)
    if (os.cpu_count() or 1) >= 8:
        pytest.skip("this machine has 8 cores: 8 ranks fit")
    assert proc.returncode == 2 and "--oversubscribe" in proc.stderr


def test_predict_on_the_run_directory_of_a_real_compare(tmp_path, data_cache_dir):
    (tmp_path / "s.toml").write_text(TINY)
    proc = run(["compare", "s.toml", "--np", "1", "--out", "run"], tmp_path, data_cache_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    pred = run(["predict", "run", "--np", "32", "--gpus-per-node", "8", "--cores-per-node", "64",
                "--network-gbps", "100", "--storage-mbps", "2000"], tmp_path, data_cache_dir)
    assert pred.returncode == 0, pred.stdout[-3000:] + pred.stderr[-3000:]
    table = pd.read_csv(tmp_path / "run" / "prediction.csv")
    assert list(table["np"]) == [1, 2, 4, 8, 16, 32]
    assert table["dominant"].isin(["compute", "input", "storage", "stragglers", "allreduce", "contention"]).all()
    assert (table["allreduce_ms"].iloc[1:] > 0).all() and table["allreduce_ms"].iloc[0] == 0
    assert (table["straggler_real"].diff().iloc[1:] >= -1e-9).all()  # the slowest of more ranks is never faster
    assert (tmp_path / "run" / "stages.csv").exists()  # measured by predict, the run had no ablation
    assert "dominates" in pred.stdout


def test_predict_on_a_directory_without_a_run_is_one_line(tmp_path, data_cache_dir):
    (tmp_path / "empty").mkdir()
    proc = run(["predict", "empty", "--gpus-per-node", "8", "--cores-per-node", "64"], tmp_path, data_cache_dir,
               timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "manifest.json" in proc.stderr
