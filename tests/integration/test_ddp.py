"""PyTorch DDP (``--engine ddp``): plain PyTorch, torch.distributed over Gloo, DataLoader
pipelines, in a venv that holds torch and no TensorFlow (scripts/torch.sh)."""

import json
import subprocess
import sys

import pandas as pd
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
