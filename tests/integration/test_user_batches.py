"""A user's Horovod Keras script whose input is a Keras Sequence (ImageDataGenerator's
flow_from_directory, as Horovod's Keras ImageNet example reads) or a Python generator of
batches, under `compare -- python train.py`: measured as a tf.data pipeline is, the twin made
from its first batch, the Sequence read by fit as it would be without pipeprof; --ablation,
which needs tf.data's stages, refused in one line."""

import sys

import pandas as pd
import pytest

from tests.integration.conftest import REPO, run_pipeprof

pytestmark = pytest.mark.horovod  # it trains

SCRIPT = str(REPO / "tests" / "integration" / "scripts" / "batches_train.py")


@pytest.mark.parametrize("kind,nps", [("sequence", "1,2"), ("generator", "1")])
def test_a_sequence_or_a_generator_is_measured(kind, nps, small_dataset, tmp_path):
    """The Sequence at np 1 and 2 (each rank its own), the generator at np=1."""
    photos, _ = small_dataset
    out = tmp_path / "run"
    got = run_pipeprof(
        "compare", "--np", nps, "--out", str(out), "--no-report", "--no-dashboard",
        "--set", "train.warmup_steps=3", "--set", "train.measure_steps=20",
        "--", sys.executable, SCRIPT, "--data", str(photos), "--input", kind,
    )  # fmt: skip
    log = (out / "logs" / "np1.log").read_text()  # the script's own output
    assert f"trained on a {kind} of 12 batches an epoch" in log, got.stdout[-2000:]
    summary = pd.read_csv(out / "summary.csv")
    counts = [int(n) for n in nps.split(",")]
    assert sorted(zip(summary["np"], summary["variant"])) == sorted(
        (n, v) for n in counts for v in ("real", "synthetic")
    )
    real = summary[summary["variant"] == "real"]
    assert summary["samples_per_s"].gt(0).all() and real["gap_pct"].notna().all(), real
    n = max(counts)
    steps = pd.read_csv(out / "steps" / f"np{n}-real.csv")
    # 90 photos in batches of 8: each epoch's last batch holds 2, and the records say so
    assert set(steps["batch_size"]) <= {8, 2} and set(steps["rank"]) == set(range(n))
    assert (steps["batch_size"] == 8).mean() > 0.8
    if kind == "sequence":
        refused = run_pipeprof(
            "compare", "--np", "1", "--ablation", "--out", str(tmp_path / "abl"), "--",
            sys.executable, SCRIPT, "--data", str(photos), "--input", kind, ok=False,
        )  # fmt: skip
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert "--ablation splits a tf.data pipeline into its stages; a DirectoryIterator" in (
            refused.stderr
        )


def test_a_batch_is_made_what_keras_makes_of_it():
    """The twin's batch and type as Keras 2's generator adapter makes them (a list becomes a
    tuple, a None entry goes, float64 becomes float32, every dimension open), so the train
    function traced for the real batches serves the twin's."""
    import numpy as np
    import tensorflow as tf

    from pipeprof.frameworks.keras2_compat import adapter_batch as keras_batch

    batch, spec = keras_batch([np.zeros((4, 5, 5, 3)), np.arange(4), None])
    assert isinstance(batch, tuple) and len(batch) == 2
    assert [t.dtype for t in batch] == [tf.float32, tf.int64]
    assert spec == (
        tf.TensorSpec([None, None, None, None], tf.float32),
        tf.TensorSpec([None], tf.int64),
    )
