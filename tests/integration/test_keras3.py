"""Keras 3, where distributed Keras runs now: TensorFlow 2.21 (``--engine mirrored``) and JAX
(``--engine data_parallel``), installed with pip. These run in the Keras 3 stack's own venv
(scripts/keras3.sh, which CI runs); in the legacy venv (TensorFlow 2.15, Keras 2) they are
skipped, since no Keras 3 is there to run them."""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from tests.integration.conftest import (
    REPO,
    real_rows_agree_with_their_table,
    run_pipeprof,
    small_scenario,
)

pytestmark = [pytest.mark.horovod, pytest.mark.keras3]


def test_a_slowed_pipeline_shows_its_input_wait_under_jit_compile(tmp_path, data_cache_dir):
    """Keras 3 on JAX compiles its step with XLA: the wait for the next batch is timed apart
    from it, in pipeprof's loop, and a pipeline read from slow storage shows it."""
    scenario = tmp_path / "slow.toml"
    scenario.write_text(small_scenario("slow", 20, "[pipeline.read]\nthrottle_mb_s = 0.2\n"))
    out = tmp_path / "run"
    run_pipeprof(
        "compare", str(scenario), "--np", "1", "--engine", "data_parallel", "--out", str(out),
        "--no-report", "--no-dashboard", data=data_cache_dir,
    )  # fmt: skip
    summary = pd.read_csv(out / "summary.csv").set_index("variant")
    assert summary.loc["synthetic", "input_wait_pct"] < 5
    assert summary.loc["real", "input_wait_pct"] > 20, summary.to_dict()


@pytest.mark.parametrize("engine", ["data_parallel", "mirrored"])
def test_the_ceiling_benchmark_runs_on_the_keras3_engines(engine, tmp_path, data_cache_dir):
    """synthetic_overhead.py's smoke mode on a Keras 3 engine: pipeprof's synthetic row and
    plain_keras3_synthetic.py's fit, each measured and checked by the benchmark itself."""
    got = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "synthetic_overhead.py"), "--smoke",
         "--engine", engine],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PIPEPROF_DATA_DIR": str(data_cache_dir)},
    )  # fmt: skip
    assert got.returncode == 0, (got.stdout + got.stderr)[-3000:]
    assert f"engine {engine}," in got.stdout and "smoke: ok" in got.stdout


def test_multi_worker_mirrored_on_keras3_is_one_line_naming_the_keras_issue(tmp_path):
    got = run_pipeprof(
        "compare", "quickstart", "--np", "1", "--engine", "multi_worker_mirrored",
        "--out", str(tmp_path / "run"), "--no-dashboard", ok=False,
    )  # fmt: skip
    assert got.returncode == 2, got.stdout + got.stderr
    line = got.stderr.strip()
    assert "\n" not in line and "keras-team/keras#20585" in line and "data_parallel" in line
    assert not (tmp_path / "run").exists()


def test_predict_from_a_keras3_run_says_it_is_not_calibrated_for_its_engine(
    tmp_path, data_cache_dir
):
    scenario = tmp_path / "s.toml"
    scenario.write_text(small_scenario("p", 20))
    out = tmp_path / "run"
    run_pipeprof(
        "compare", str(scenario), "--np", "1", "--engine", "data_parallel", "--ablation",
        "--out", str(out), "--no-report", "--no-dashboard", data=data_cache_dir,
    )  # fmt: skip
    got = run_pipeprof(
        "predict", str(out), "--np", "2", "--gpus-per-node", "2", "--cores-per-node", "2",
        "--no-report",
    )  # fmt: skip
    assert "not calibrated for this engine" in got.stdout + got.stderr
    notes = json.loads((out / "prediction.json").read_text())["notes"]
    assert any(n.startswith("not calibrated for this engine") for n in notes)


EXAMPLE = str(REPO / "examples" / "keras3_train.py")
FAST = (
    "--set", "train.warmup_steps=3", "--set", "train.min_measure_s=2",
    "--set", "train.max_measure_s=6",
)  # fmt: skip


@pytest.mark.parametrize(
    "engine, backend, loop",
    [
        ("data_parallel", "jax", False),
        ("data_parallel", "jax", True),
        ("mirrored", "tensorflow", False),
        ("mirrored", "tensorflow", True),
    ],
    ids=["jax-fit", "jax-loop", "tensorflow-fit", "tensorflow-loop"],
)
def test_a_keras3_users_script_is_compared_at_np_1_and_2(
    engine, backend, loop, small_dataset, tmp_path
):
    """examples/keras3_train.py with its pipeprof lines, as a user runs it: fit, or its own
    loop (the JAX one stateless and jitted, the TensorFlow one under strategy.run), under
    the distribution the script sets itself (DataParallel, MirroredStrategy), measured
    with it: the twin, then the script's pipeline in rounds against it, at np 1 and 2."""
    photos, _ = small_dataset
    out = tmp_path / "run"
    script = [sys.executable, EXAMPLE, "--data", str(photos), "--backend", backend]
    script += ["--image-size", "32", "--batch-size", "8", "--epochs", "10000"]
    run_pipeprof(
        "compare", "--engine", engine, "--np", "1,2", "--out", str(out), "--no-report",
        "--no-dashboard", *FAST, "--", *script, *(["--loop"] if loop else []), timeout=600,
    )  # fmt: skip
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(zip(summary["np"], summary["variant"])) == [
        (1, "real"), (1, "synthetic"), (2, "real"), (2, "synthetic"),
    ]  # fmt: skip
    real_rows_agree_with_their_table(summary)
    real = summary[summary["variant"] == "real"]
    assert real["gap_pct"].notna().all() and (real["input_wait_pct"] > 0).all(), real.to_dict()
    # each record is one process's step: at np=2 both replicas' samples, 8 each
    steps = pd.read_csv(out / "steps" / "np2-real.csv")
    assert set(steps["batch_size"]) == {16} and set(steps["rank"]) == {0}


def test_a_script_whose_training_ends_during_the_twin_gets_its_gap_said_as_such(
    small_dataset, tmp_path
):
    """steps_per_execution=8 and three short epochs: the script's fit ends during the
    synthetic run, so its real variant runs in a launch of its own, with no twin beside it.
    Its row is not left blank: its gap is against the synthetic row, and a note says so."""
    photos, _ = small_dataset
    out = tmp_path / "run"
    script = [sys.executable, EXAMPLE, "--data", str(photos), "--backend", "tensorflow"]
    script += ["--image-size", "32", "--batch-size", "8", "--epochs", "3"]
    got = run_pipeprof(
        "compare", "--engine", "mirrored", "--np", "1", "--out", str(out), "--no-report",
        "--no-dashboard", *FAST, "--", *script, "--steps-per-execution", "8",
    )  # fmt: skip
    row = pd.read_csv(out / "summary.csv").set_index("variant").loc["real"]
    assert row["stop_reason"] == "fit ended" and pd.notna(row["gap_pct"]), row.to_dict()
    assert row["twin_samples_per_s"] > 0 and isinstance(row["verdict"], str), row.to_dict()
    assert row["verdict"].endswith(("input-bound", "line")), row.to_dict()
    assert row["ceiling_note"].startswith("no twin ran beside real (the script's training ended")
    assert "note np=1 real: no twin ran beside real" in " ".join(got.stdout.split())
