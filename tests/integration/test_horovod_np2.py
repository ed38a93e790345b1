"""Two real Horovod ranks over Gloo, started by horovodrun on this machine."""

import json
import os
import subprocess
import sys

import pytest

from pipeprof.data import pipeline
from tests.integration.conftest import REPO, VENV_BIN

pytestmark = pytest.mark.horovod


def horovodrun_exe() -> str:
    exe = VENV_BIN / "horovodrun"
    return str(exe) if exe.exists() else "horovodrun"


def test_ranks_see_disjoint_shards_and_keep_identical_weights(small_dataset, tmp_path):
    root, cfg = small_dataset
    out = tmp_path / "probe.json"
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [
            horovodrun_exe(),
            "-np",
            "2",
            "-H",
            "localhost:2",
            "--gloo",
            sys.executable,
            str(REPO / "tests" / "integration" / "shard_probe.py"),
            str(out),
            str(root),
            str(cfg.classes),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = sorted(json.loads(out.read_text()), key=lambda r: r["rank"])
    a, b = set(ranks[0]["ids"]), set(ranks[1]["ids"])
    assert a and b and not (a & b), "the two ranks read overlapping files"
    assert a | b == set(pipeline.list_image_folder(root)[0]), "the shards do not cover the data set"
    assert len(ranks[0]["ids"]) == len(a) and len(ranks[1]["ids"]) == len(b)
    # different data on each rank, yet the same weights: the gradients were allreduced
    assert ranks[0]["checksum"] == pytest.approx(ranks[1]["checksum"], rel=1e-9)


def test_batch_and_learning_rate_scale_with_the_workers_and_the_rate_ramps(
    tmp_path, data_cache_dir
):
    """A global batch of 16 with square-root scaling and a 10-step warm-up ramp, at np 1 and 2:
    each worker trains on 16 / np, the rate is 0.01 × √np, and at np=2 each step's rate, read
    from the optimizer, climbs from 0.01 to 0.01 × √2 over the launch's first 10 steps (the
    figures below are worked by hand: 0.01 + 0.00414214 × k / 10)."""
    import pandas as pd

    from tests.integration.conftest import run_pipeprof, small_scenario

    extra = (
        'batch_mode = "global"\nlr_scaling = "sqrt"\nlearning_rate = 0.01\nlr_warmup_steps = 10\n'
        'device = "emulated:2"'
    )
    (tmp_path / "s.toml").write_text(
        small_scenario("scaled", 12, extra).replace("batch_size = 8", "batch_size = 16")
    )
    out = tmp_path / "run"
    run_pipeprof(
        "compare", str(tmp_path / "s.toml"), "--np", "1,2", "--out", str(out), "--no-report",
        "--no-dashboard", data=data_cache_dir,
    )  # fmt: skip
    variants = [json.loads(line) for line in (out / "variants.jsonl").read_text().splitlines()]
    got = {(v["np"], v["variant"]): v for v in variants}
    for n, per_worker, lr in ((1, 16, 0.01), (2, 8, 0.0141421)):
        for variant in ("synthetic", "real"):
            v = got[(n, variant)]
            assert (v["per_worker_batch"], v["global_batch"]) == (per_worker, 16), v
            assert v["learning_rate"] == pytest.approx(lr, rel=1e-4), v
        steps = pd.read_csv(out / "steps" / f"np{n}-real.csv")
        assert set(steps["batch_size"]) == {per_worker}
    first = pd.read_csv(out / "steps" / "np2-synthetic.csv")  # the launch's first variant
    rates = first[first["rank"] == 0].sort_values("step")["learning_rate"].tolist()
    assert rates[0] == pytest.approx(0.01)
    assert rates[1] == pytest.approx(0.01041421, rel=1e-5)
    assert rates[5] == pytest.approx(0.01207107, rel=1e-5)
    assert rates[10:] == pytest.approx([0.01414214] * len(rates[10:]), rel=1e-5)
    real = pd.read_csv(out / "steps" / "np2-real.csv")
    assert real["learning_rate"].to_numpy() == pytest.approx(0.01414214, rel=1e-5)
    one = pd.read_csv(out / "steps" / "np1-synthetic.csv")
    assert one["learning_rate"].to_numpy() == pytest.approx(0.01, rel=1e-5)  # √1: no ramp
