"""The user's story: `pipeprof compare --np 2` on the quickstart scenario, for real."""

import json
import os
import subprocess
import time

import pandas as pd
import pytest

from pipeprof.analysis.stats import SUMMARY_COLUMNS
from tests.integration.conftest import REPO, pipeprof_cmd

pytestmark = pytest.mark.horovod

TINY = """
name = "tiny"
[data]
source = "generated"
image_size = 32
num_classes = 3
[data.generate]
images = 60
size = 40
classes = 3
[model]
name = "{model}"
[train]
batch_size = 8
warmup_steps = 2
measure_steps = 6
"""


def run(args, env_extra=None, cwd=REPO, timeout=600):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run(pipeprof_cmd() + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_compare_np2_on_quickstart_writes_the_run_directory(tmp_path, data_cache_dir):
    out = tmp_path / "run"
    args = ["compare", "scenarios/quickstart.toml", "--np", "2", "--set", "train.max_measure_s=8", "--out", str(out)]
    proc = run(args, {"PIPEPROF_DATA_DIR": str(data_cache_dir)})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert f"run directory: {out}" in proc.stdout.replace("\n", "")

    summary = pd.read_csv(out / "summary.csv")
    contract = ["np", "variant", "synthetic", "samples_per_s", "samples_per_s_ci95", "gap_pct",
                "scaling_efficiency_pct", "step_time_ms_p50", "verdict"]
    assert set(contract) <= set(summary.columns) and set(SUMMARY_COLUMNS) <= set(summary.columns)
    assert (summary["device"] == "real").all()
    assert list(zip(summary["np"], summary["variant"])) == [(1, "synthetic"), (1, "real"), (2, "synthetic"), (2, "real")]
    row = summary.set_index(["np", "variant"])
    for n in (1, 2):  # the contract's formulas, from the table's own figures
        # the real variant alternated with its twin: its gap is to the twin's rate over the same rounds
        twin, real = row.loc[(n, "real"), "twin_samples_per_s"], row.loc[(n, "real"), "samples_per_s"]
        assert row.loc[(n, "real"), "gap_pct"] == pytest.approx(100 * (1 - real / twin), rel=1e-3, abs=0.05)
        assert row.loc[(n, "real"), "stop_reason"] in ("target", "clear of thresholds", "max time")
        assert row.loc[(n, "real"), "verdict"] in ("not input-bound", "moderately input-bound", "highly input-bound")
        assert (summary["samples_per_s_ci95"] >= 0).all()
    eff = row.loc[(2, "real"), "scaling_efficiency_pct"]
    assert eff == pytest.approx(100 * row.loc[(2, "real"), "samples_per_s"] / (2 * row.loc[(1, "real"), "samples_per_s"]),
                                rel=1e-3)

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["horovod"] == "0.28.1" and manifest["tensorflow"] == "2.15.1"
    assert manifest["scenario"]["name"] == "quickstart" and manifest["worker_counts"] == [1, 2]
    assert manifest["command_line"][1:] == args
    assert {"python", "host", "cpu_cores", "gpus"} <= set(manifest)

    steps = pd.read_csv(out / "steps" / "np2-real.csv")
    assert sorted(steps["rank"].unique()) == [0, 1]
    per_rank = steps.groupby("rank").size().tolist()
    assert per_rank[0] == per_rank[1]  # in lock-step: every rank stopped at the same step
    measured = steps[(steps["variant"] == "real") & ~steps["warmup"] & (steps["rank"] == 0)]
    assert len(measured) == row.loc[(2, "real"), "measured_steps"] > 0
    assert (out / "logs" / "np2.log").exists()


def test_a_dying_rank_ends_the_run_within_seconds_and_keeps_earlier_results(tmp_path, data_cache_dir):
    (tmp_path / "bad_model.py").write_text(
        "import os\n"
        "from pipeprof.models import build_model\n"
        "def build(shape, classes):\n"
        "    if os.environ.get('HOROVOD_RANK') == '1':\n"
        "        raise RuntimeError('boom on rank one')\n"
        "    return build_model('small_cnn', shape, classes)\n")
    (tmp_path / "tiny.toml").write_text(TINY.format(model="bad_model:build"))
    out = tmp_path / "run"
    t0 = time.monotonic()
    proc = run(["compare", "tiny.toml", "--np", "1,2", "--out", str(out)],
               {"PIPEPROF_DATA_DIR": str(data_cache_dir)}, cwd=tmp_path, timeout=300)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "np=2" in err[0] and "rank 1" in err[0] and "boom on rank one" in err[0], proc.stderr
    assert elapsed < 120, f"took {elapsed:.0f}s"
    summary = pd.read_csv(out / "summary.csv")  # np=1 was measured before np=2 failed: kept
    assert list(zip(summary["np"], summary["variant"])) == [(1, "synthetic"), (1, "real")]


def test_missing_data_folder_is_one_line_before_any_launch(tmp_path):
    (tmp_path / "s.toml").write_text('[data]\nsource = "folder"\npath = "photos"\n')
    proc = run(["compare", "s.toml"], cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "data.path" in proc.stderr and "photos" in proc.stderr
