"""Keras 3's ``fit`` on the torch backend (``KERAS_BACKEND=torch``) with pipeprof's lines, in
the torch venv (scripts/torch.sh installs keras there, and no TensorFlow): measured in one
process under ``--engine ddp``; at np 2 refused in one line, since Keras's torch trainer has
no DDP."""

import json
import re
import sys

import pandas as pd
import pytest

from tests.integration.conftest import REPO, real_rows_agree_with_their_table, run_pipeprof

# alone: its gap is against a twin of a few ms a step, which beside another file's launches
# read 25.1% ±12.6 where alone it reads about 90% (scripts/torch.sh, 2026-11-28)
pytestmark = [pytest.mark.horovod, pytest.mark.torch, pytest.mark.alone]

FIT = str(REPO / "tests" / "integration" / "scripts" / "keras_torch_fit.py")


def test_keras_fit_on_torch_is_measured_in_one_process_and_np2_is_refused_in_one_line(tmp_path):
    """Each item of the script's DataLoader costs 2 ms of CPU in the step's own process
    (num_workers 0): the real pipeline's steps wait for 16 of them, the twin's (its first batch,
    handed again inside fit) for none. At np 2 each rank stops with pipeprof's line, the compare
    says it once and exits 2, and the np 1 rows are kept."""
    out, measured = tmp_path / "run", tmp_path / "m"
    got = run_pipeprof(
        "compare", "--engine", "ddp", "--np", "1,2", "--out", str(out), "--no-report",
        "--no-dashboard", "--set", "train.min_measure_s=2", "--set", "train.max_measure_s=10",
        "--", sys.executable, FIT, "--out", str(measured), "--item-ms", "2",
        ok=False, timeout=600,
    )  # fmt: skip
    err = got.stderr.strip()
    assert got.returncode == 2 and err.count("\n") == 0, got.stdout[-2000:] + err
    # both ranks say it (one line naming both), or the launcher stopped one before it could
    assert re.search(r"np=2: (ranks 0 and 1|rank [01]) on ", err), err
    assert "fit on torch trains in one process" in err, err
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(zip(summary["np"], summary["variant"])) == [(1, "real"), (1, "synthetic")]
    real_rows_agree_with_their_table(summary)
    real = summary[summary["variant"] == "real"].iloc[0]
    synthetic = summary[summary["variant"] == "synthetic"].iloc[0]
    # 32 ms of items a step against a step of a few ms: the gap is far from 0 and the wait
    # is the real pipeline's
    assert real["gap_pct"] - real["gap_pct_ci95"] > 50, real.to_dict()
    assert real["input_wait_pct"] > 50 > synthetic["input_wait_pct"], summary.to_dict()
    said = json.loads((measured / "fit.json").read_text())
    assert said["backend"] == "torch" and said["steps"] > 0, said
