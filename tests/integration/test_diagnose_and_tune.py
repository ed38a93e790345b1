"""The verdict on an emulated device, where the model's step bounds it; tune runs end to end.

(The CPU-trained verdict cases run alone: tests/integration/test_verdict_cpu_trained.py.)"""

import json

import pandas as pd
import pytest

from tests.integration.verdict_cases import CASES, TRAIN, check_verdict, merge, run

pytestmark = pytest.mark.horovod


def test_ablation_verdict_says_the_pipeline_is_not_the_bottleneck_of_a_model_bound_step(
    tmp_path, data_cache_dir
):
    check_verdict("none", tmp_path, data_cache_dir)


def test_tune_writes_a_fragment_that_compare_accepts(tmp_path, data_cache_dir):
    (tmp_path / "s.toml").write_text(
        CASES["augment"].replace("image_size = 160", "image_size = 64") + TRAIN
    )
    # bounded by trials, not by seconds: how many trials 12 s held depended on the machine's speed
    proc = run(
        [
            "tune",
            "s.toml",
            "--budget",
            "10m",
            "--max-trials",
            "5",
            "--trial-seconds",
            "0.5",
            "--cores-per-rank",
            "1",
            "--confirm-steps",
            "0",
            "--out",
            "tuned",
        ],
        tmp_path,
        data_cache_dir,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    fragment = tmp_path / "tuned" / "winner.toml"
    assert fragment.exists() and "[pipeline]" in fragment.read_text()
    report = json.loads((tmp_path / "tuned" / "tune.json").read_text())
    trials = pd.read_csv(tmp_path / "tuned" / "trials.csv")
    assert (trials["phase"] != "run-off").sum() == 5 and report["stopped_by_budget"]
    assert report["trials"] == len(trials) and report["winner_samples_per_s"] > 0
    assert (
        report["autotune"]["samples_per_s"] > 0 and report["scenario_default"]["samples_per_s"] > 0
    )
    assert "num_parallel_calls=" in (tmp_path / "tuned" / "tfdata.py.txt").read_text()
    again = run(
        [
            "compare",
            "s.toml",
            "--overlay",
            str(fragment),
            "--np",
            "1",
            "--steps",
            "6",
            "--warmup",
            "2",
            "--out",
            "with-winner",
        ],
        tmp_path,
        data_cache_dir,
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    manifest = json.loads((tmp_path / "with-winner" / "manifest.json").read_text())
    winner_cache = "cache=before_augment" in " ".join(
        f"{k}={v}" for k, v in report["winner"].items()
    )
    assert manifest["scenario"]["pipeline"]["cache"]["enabled"] == winner_cache


def test_a_cache_that_does_not_fit_the_ram_budget_is_refused_before_running(
    tmp_path, data_cache_dir
):
    (tmp_path / "s.toml").write_text(merge(CASES["none"], TRAIN))
    proc = run(
        ["compare", "s.toml", "--np", "1", "--cache", "memory", "--ram-budget", "1M"],
        tmp_path,
        data_cache_dir,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert (
        "memory cache 150 images × 110,596 B" in proc.stderr
        and "RAM budget of 1.00 MB" in proc.stderr
    )
    assert not (tmp_path / "runs").exists()


DECODE_BOUND = """
name = "large-jpegs"
[data]
source = "generated"
image_size = 48
num_classes = 2
[data.generate]
images = 48
size = 640
classes = 2
[pipeline.augment]
enabled = false
[pipeline.shuffle]
buffer_size = 48
[train]
batch_size = 8
device = "emulated:4"
warmup_steps = 3
min_measure_s = 2
max_measure_s = 10
"""


def test_the_decode_less_remedy_runs_as_a_variant_and_closes_a_decode_bound_gap(
    tmp_path, data_cache_dir
):
    """Stored photos 13× the model's side, nothing but read and decode in the pipeline: the
    stage measured alone is read, so --remedies runs read's fixes as variants beside the real
    one; decoding at 1/8 scale (what libjpeg's DCT scaling allows for 640 → 48 px) does less
    of the work, so its row runs faster and closes part of the gap."""
    (tmp_path / "s.toml").write_text(DECODE_BOUND)
    proc = run(
        ["compare", "s.toml", "--np", "1", "--remedies", "--out", "run", "--no-report",
         "--no-dashboard"],
        tmp_path,
        data_cache_dir,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = pd.read_csv(tmp_path / "run" / "summary.csv").set_index("variant")
    assert {"remedy:decode-less", "remedy:cache-decoded"} <= set(summary.index), summary.index
    real, less = summary.loc["real"], summary.loc["remedy:decode-less"]
    assert real["gap_pct"] - real["gap_pct_ci95"] > 20, real.to_dict()  # decode-bound
    # faster, and part of the gap closed. Runs here: 926 against 679 samples/s (64% closed)
    # and 862 against 628 (54%) alone, 598 ±62 against 471 ±80 (30%) beside another test
    # file in the suite. A JPEG's entropy decoding costs the same at any scale, and these
    # are generated images: no 8x gain, about 1.3x
    assert less["samples_per_s"] > 1.1 * real["samples_per_s"], summary["samples_per_s"]
    assert less["gap_closed_pct"] > 10, summary["gap_closed_pct"]
