"""Grain pipelines (``data.library = "grain"``) for Keras 3 on JAX (``--engine data_parallel``),
in the torch venv, which holds JAX, Keras and Grain and no TensorFlow (scripts/torch.sh): the
stack a GPU host without TensorFlow runs, and the GPU check's smoke mode on it."""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from tests.integration.conftest import REPO, run_pipeprof, small_scenario

pytestmark = [pytest.mark.horovod, pytest.mark.torch]

GRAIN = ("--engine", "data_parallel", "--set", "data.library=grain")


def test_the_venv_has_grain_and_jax_and_no_tensorflow():
    got = subprocess.run(
        [sys.executable, "-c", "import grain, jax, keras; import tensorflow"],
        capture_output=True,
        env={**os.environ, "KERAS_BACKEND": "jax"},
    )
    assert b"No module named 'tensorflow'" in got.stderr, got.stderr[-500:]


def test_a_grain_pipeline_under_data_parallel_gives_rows_and_verdicts_at_np_1_and_2(
    tmp_path, data_cache_dir
):
    scen = tmp_path / "s.toml"
    scen.write_text(small_scenario("grain-small", 20, "[pipeline.grain]\nworker_count = 1\n"))
    out = tmp_path / "run"
    got = run_pipeprof(
        "compare", str(scen), "--np", "1,2", *GRAIN, "--out", str(out), "--no-report",
        "--no-dashboard", data=data_cache_dir, timeout=600,
    )  # fmt: skip
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(zip(summary["np"], summary["variant"])) == [
        (1, "real"), (1, "synthetic"), (2, "real"), (2, "synthetic"),
    ], got.stdout[-2000:]  # fmt: skip
    assert summary["verdict"].notna().all(), summary.to_dict()
    real = summary[summary["variant"] == "real"]
    assert real["gap_pct"].notna().all() and (real["samples_per_s"] > 0).all()
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["engine"], manifest["inputs"]) == ("data_parallel", "grain"), manifest
    launch = json.loads((out / "model.json").read_text())["launches"]["2"]
    assert (launch["backend"], launch["replicas_per_process"]) == ("jax", 2), launch
    steps = pd.concat(pd.read_csv(f) for f in (out / "steps").glob("np2-real*.csv"))
    assert set(steps["batch_size"]) == {16}  # 8 a replica, 2 replicas in the one process


def test_grain_knobs_are_refused_for_another_library_and_grain_for_torch(tmp_path):
    scen = tmp_path / "s.toml"
    scen.write_text(small_scenario("knobs", 5, "[pipeline.grain]\nworker_count = 2\n"))
    got = run_pipeprof(
        "compare", str(scen), "--engine", "ddp", "--out", str(tmp_path / "a"), ok=False
    )
    said = got.stdout + got.stderr
    assert got.returncode == 2 and "pipeline.grain.worker_count: a Grain knob" in said, said[-800:]
    got = run_pipeprof(
        "compare", "quickstart", "--engine", "ddp", "--set", "data.library=grain",
        "--out", str(tmp_path / "b"), ok=False,
    )  # fmt: skip
    said = got.stdout + got.stderr
    assert got.returncode == 2 and "data.library 'grain'" in said, said[-800:]


def test_the_gpu_checks_smoke_mode_runs_its_four_compares_on_the_cpu(tmp_path, data_cache_dir):
    """benchmarks/gpu_check.py --smoke: ddp with a DataLoader and data_parallel with Grain, an
    augment case and a control each, on an emulated device; each prints its row, and the GPU
    column says NVML found no GPU here."""
    got = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--smoke",
         "--out", str(tmp_path / "check")],
        cwd=REPO, capture_output=True, text=True, timeout=900,
        env={**os.environ, "PIPEPROF_DATA_DIR": str(data_cache_dir)},
    )  # fmt: skip
    assert got.returncode == 0, (got.stdout + got.stderr)[-3000:]
    rows = [line for line in got.stdout.splitlines() if line.startswith(("ddp-", "data_parallel-"))]
    assert len(rows) == 4, got.stdout
    # the GPU column: NVML's figure, or why there is none (a host without a GPU: this one)
    assert all(r.endswith("%") or r.endswith("(NVML found no GPU)") for r in rows), got.stdout
    assert "smoke: ok" in got.stdout
