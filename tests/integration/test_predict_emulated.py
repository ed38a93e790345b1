"""Emulated accelerators with many real Horovod ranks, and predict on a real run directory."""

import json
import os
import shutil
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
    return subprocess.run(
        pipeprof_cmd() + args,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PIPEPROF_DATA_DIR=str(data_dir)),
    )


@pytest.fixture(scope="module")
def emulated(tmp_path_factory, data_cache_dir):
    """TINY at np 1 and 8 on emulated devices: the second launch holds 8 real Horovod ranks on
    this machine's 2 cores. Its np=1 part is also predict's source below."""
    base = tmp_path_factory.mktemp("emulated")
    (base / "s.toml").write_text(TINY)
    proc = run(
        [
            "compare",
            "s.toml",
            "--np",
            "1,8",
            "--device",
            "emulated:30",
            "--oversubscribe",
            "--out",
            "run",
        ],
        base,
        data_cache_dir,
    )
    return base, proc


def test_compare_np8_with_emulated_devices_runs_8_real_ranks(emulated):
    tmp_path, proc = emulated
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "EMULATED" in proc.stdout
    steps = pd.read_csv(tmp_path / "run" / "steps" / "np8-real.csv")
    assert sorted(steps["rank"].unique()) == list(range(8))
    measured = steps[~steps["warmup"]]
    assert (measured["step_time_ms"] >= 30).all()  # each step holds the emulated device for 30 ms
    summary = pd.read_csv(tmp_path / "run" / "summary.csv")
    assert set(summary["np"]) == {1, 8} and (summary["device"] == "emulated:30ms").all()
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["device"] == "emulated:30ms"
    model = json.loads((tmp_path / "run" / "model.json").read_text())
    assert model["gradient_bytes"] == 4 * model["parameters"] > 0


def test_without_oversubscribe_8_ranks_on_2_cores_are_refused(tmp_path, data_cache_dir):
    (tmp_path / "s.toml").write_text(TINY)
    proc = run(
        ["compare", "s.toml", "--np", "8", "--device", "emulated:30"],
        tmp_path,
        data_cache_dir,
        timeout=60,
    )
    if (os.cpu_count() or 1) >= 8:
        pytest.skip("this machine has 8 cores: 8 ranks fit")
    assert proc.returncode == 2 and "--oversubscribe" in proc.stderr


def test_predict_on_the_run_directory_of_a_real_compare(emulated, tmp_path, data_cache_dir):
    source, proc = emulated  # a copy of that run: the ceiling test below predicts from the same one
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    shutil.copytree(source / "run", tmp_path / "run")
    pred = run(
        [
            "predict",
            "run",
            "--np",
            "32",
            "--gpus-per-node",
            "8",
            "--cores-per-node",
            "64",
            "--network-gbps",
            "100",
            "--storage-mbps",
            "2000",
        ],
        tmp_path,
        data_cache_dir,
    )
    assert pred.returncode == 0, pred.stdout[-3000:] + pred.stderr[-3000:]
    table = pd.read_csv(tmp_path / "run" / "prediction.csv")
    assert list(table["np"]) == [1, 2, 4, 8, 16, 32]
    assert (
        table["dominant"]
        .isin(["compute", "input", "storage", "stragglers", "allreduce", "contention"])
        .all()
    )
    assert (table["allreduce_ms"].iloc[1:] > 0).all() and table["allreduce_ms"].iloc[0] == 0
    assert (
        table["straggler_real"].diff().iloc[1:] >= -1e-9
    ).all()  # the slowest of more ranks is never faster
    assert (
        tmp_path / "run" / "stages.csv"
    ).exists()  # measured by predict, the run had no ablation
    assert "dominates" in pred.stdout


def test_predict_on_a_directory_without_a_run_is_one_line(tmp_path, data_cache_dir):
    (tmp_path / "empty").mkdir()
    proc = run(
        ["predict", "empty", "--gpus-per-node", "8", "--cores-per-node", "64"],
        tmp_path,
        data_cache_dir,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "manifest.json" in proc.stderr


def test_predict_with_a_synthetic_only_ceiling_measured_on_the_target(emulated, data_cache_dir):
    tmp_path, source = emulated  # predict's source: the np=1 part of that run
    assert source.returncode == 0, source.stdout[-3000:] + source.stderr[-3000:]
    ceiling = run(
        [
            "compare",
            "s.toml",
            "--np",
            "1,2",
            "--synthetic-only",
            "--device",
            "emulated:30",
            "--oversubscribe",
            "--out",
            "ceil",
        ],
        tmp_path,
        data_cache_dir,
    )
    assert ceiling.returncode == 0, ceiling.stdout[-3000:] + ceiling.stderr[-3000:]
    summary = pd.read_csv(tmp_path / "ceil" / "summary.csv")
    assert set(summary["variant"]) == {"synthetic"} and set(summary["np"]) == {1, 2}
    assert (
        summary["cpu_util_pct"].notna().all()
    )  # the node's CPU use, which the contention term starts from

    pred = run(
        [
            "predict",
            "run",
            "--np",
            "1,2,4",
            "--gpus-per-node",
            "4",
            "--cores-per-node",
            "2",
            "--ceiling",
            "ceil",
        ],
        tmp_path,
        data_cache_dir,
    )
    assert pred.returncode == 0, pred.stdout[-3000:] + pred.stderr[-3000:]
    table = pd.read_csv(tmp_path / "run" / "prediction.csv").set_index("np")
    assert table["sync_measured"].tolist() == [
        True,
        True,
        False,
    ]  # np=4 was not measured: the network model
    step2 = 1e3 * 8 / float(summary.set_index("np").loc[2, "samples_per_s_per_worker"])
    assert table.loc[2, "synth_step_ms"] == pytest.approx(step2, rel=1e-3)
    assert table.loc[2, "busy_synth"] == pytest.approx(
        summary.set_index("np").loc[2, "cpu_util_pct"] / 100, rel=1e-3
    )
    assert (table["busy_real"] >= table["busy_synth"]).all() and (table["contention_ms"] >= 0).all()
    assert "sync measured by the synthetic-only run" in pred.stdout

    missing = run(
        ["predict", "run", "--gpus-per-node", "4", "--cores-per-node", "2", "--ceiling", "nowhere"],
        tmp_path,
        data_cache_dir,
        timeout=60,
    )
    assert (
        missing.returncode == 2
        and missing.stderr.count("\n") == 1
        and "--ceiling nowhere" in missing.stderr
    )
    both = run(
        ["compare", "s.toml", "--synthetic-only", "--ablation"],
        tmp_path,
        data_cache_dir,
        timeout=60,
    )
    assert both.returncode == 2 and "--synthetic-only and --ablation" in both.stderr
