"""PyTorch DDP started by torchrun (``--launcher torchrun``), and a script with pipeprof's two
lines under torchrun itself, in the torch venv (scripts/torch.sh). A file of its own so that
xdist's two workers share the torch tests (``--dist loadfile`` gives a file to one worker)."""

import json
import re
import subprocess
import sys

import pandas as pd
import pytest

from tests.integration.conftest import REPO, run_pipeprof

pytestmark = [pytest.mark.horovod, pytest.mark.torch]

FAST = ("--set", "train.min_measure_s=2", "--set", "train.max_measure_s=8")


TWO_LINES = str(REPO / "tests" / "integration" / "scripts" / "ddp_two_lines.py")


def ranks_said(out) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_a_two_line_script_under_torchrun_and_under_compare_with_torchrun(small_dataset, tmp_path):
    """The same script, started by torchrun itself (pipeprof's lines do nothing there) and by
    ``compare --launcher torchrun``: both join a world of 2 whose ranks end with equal weights,
    and compare measures both ranks at np 2."""
    photos, _ = small_dataset
    alone = tmp_path / "alone"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1"]
    got = subprocess.run(
        [*torchrun, "--nproc-per-node=2", TWO_LINES, "--data", str(photos), "--out", str(alone)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
    said = ranks_said(alone)
    assert [r["world_size"] for r in said] == [2, 2] and said[0]["weights"] == said[1]["weights"]

    measured, out = tmp_path / "measured", tmp_path / "run"
    run_pipeprof(
        "compare", "--engine", "ddp", "--launcher", "torchrun", "--np", "2", "--out", str(out),
        "--no-report", "--no-dashboard", *FAST, "--", sys.executable, TWO_LINES,
        "--data", str(photos), "--out", str(measured), "--epochs", "10000", timeout=600,
    )  # fmt: skip
    said = ranks_said(measured)
    assert [r["world_size"] for r in said] == [2, 2] and said[0]["weights"] == said[1]["weights"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["launcher"] == "torchrun", manifest.get("launcher")
    steps = pd.concat(pd.read_csv(f) for f in (out / "steps").glob("np2-real*.csv"))
    assert set(steps["rank"]) == {0, 1}


def test_a_rank_that_fails_under_torchrun_is_named_and_not_restarted(small_dataset, tmp_path):
    photos, _ = small_dataset
    out = tmp_path / "run"
    got = run_pipeprof(
        "compare", "--engine", "ddp", "--launcher", "torchrun", "--np", "2", "--out", str(out),
        "--no-report", "--no-dashboard", *FAST, "--", sys.executable, TWO_LINES,
        "--data", str(photos), "--out", str(tmp_path / "m"), "--fail-rank", "1",
        ok=False, timeout=600,
    )  # fmt: skip
    said = got.stdout + got.stderr
    assert got.returncode != 0, said[-3000:]
    # pipeprof's one line, from torchrun's root cause; and rank 1 started once (--max-restarts=0)
    assert re.search(r"error: np=2: rank 1 exited with 3\b", said), said[-3000:]
    assert (tmp_path / "m" / "starts-rank1-np2").read_text().count("started") == 1
