"""The quickstart on Keras 3's engines, in a file of its own: its two launches are the Keras 3
tier's longest tests, and xdist (``--dist loadfile``) gives a file to one worker, so beside
test_keras3.py they share the two workers. Run in the Keras 3 venv (scripts/keras3.sh)."""

import json

import pandas as pd
import pytest

from tests.integration.conftest import real_rows_agree_with_their_table, run_pipeprof, verdict_of

pytestmark = [pytest.mark.horovod, pytest.mark.keras3]


@pytest.mark.parametrize(
    "engine, backend", [("data_parallel", "jax"), ("mirrored", "tensorflow")], ids=str
)
def test_quickstart_on_keras3_gives_rows_and_the_horovod_stacks_verdict(
    engine, backend, tmp_path, data_cache_dir
):
    out = tmp_path / "run"
    # On JAX the gaps (about 12%, below) sit between the 5% and 20% lines, so each variant
    # measures to the scenario's cap of 75 s: 410 s for this test in the clean-clone CI run on
    # d72010b. Its assertion is the verdict its own gap and interval give, which holds at any
    # length, so it measures 20 s a variant (a wider interval, the same check). 10 s a variant
    # took 206.5 s against 213.4 s at 20 s (the CI runs on a10cc62 and 526bddd): the rest of
    # its time is not measuring, so it keeps the narrower interval of 20 s
    cap = ["--set", "train.max_measure_s=20"] if backend == "jax" else []
    got = run_pipeprof(
        "compare", "quickstart", "--np", "1,2", "--engine", engine, "--out", str(out),
        "--no-report", "--no-dashboard", *cap, data=data_cache_dir, timeout=900,
    )  # fmt: skip
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(zip(summary["np"], summary["variant"])) == [
        (1, "real"), (1, "synthetic"), (2, "real"), (2, "synthetic"),
    ]  # fmt: skip
    real_rows_agree_with_their_table(summary)
    real = summary[summary["variant"] == "real"]
    if backend == "tensorflow":
        # as the Horovod stack's quickstart: highly input-bound at np 1 and 2 (README)
        assert list(real["verdict"]) == ["highly input-bound"] * 2, got.stdout[-3000:]
    else:
        # XLA's CPU step of the small CNN is about five times slower than TensorFlow's (a
        # plain Keras 3 fit of one repeated batch of 32: 163 against 855 samples/s on the
        # 2-core development machine, docs/validation.md), so here the same pipeline keeps
        # up better (gaps of about 12%): the verdict is the one its gap and interval give
        for _, row in real.iterrows():
            assert pd.notna(row["gap_pct"]) and pd.notna(row["gap_pct_ci95"]), row
            assert row["verdict"] == verdict_of(row["gap_pct"], row["gap_pct_ci95"]), row
    manifest = json.loads((out / "manifest.json").read_text())
    model = json.loads((out / "model.json").read_text())
    assert manifest["engine"] == engine and manifest["framework"] == "keras3"
    assert manifest["keras"].startswith("3.") and model["framework_version"].startswith("3.")
    assert model["launches"]["2"]["backend"] == backend
    assert model["launches"]["2"]["processes"] == 1
    assert model["launches"]["2"]["replicas_per_process"] == 2  # 2 devices of one process
    # said as such: XLA's host devices ("sharing its host's CPU"), tf.distribute's logical
    # devices ("sharing this host's CPU")
    device = model["launches"]["2"]["device"]
    assert "2 " in device and "CPU device" in device and "host's CPU" in device, device
