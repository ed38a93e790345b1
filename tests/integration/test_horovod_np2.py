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
