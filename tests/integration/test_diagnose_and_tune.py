"""tune runs end to end; a cache that does not fit is refused.

(The verdict cases run alone: tests/integration/test_verdict_cpu_trained.py and
test_verdict_model_bound.py.)"""

import json

import pandas as pd
import pytest

from tests.integration.verdict_cases import CASES, TRAIN, merge, run

pytestmark = pytest.mark.horovod


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
