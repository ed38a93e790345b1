"""The pet-names write-up's workload (examples/petnames_ddp.py): a four-layer character LSTM
under PyTorch DDP, its data on the device with no loader workers (model-bound) or its strings
encoded in the loader (input-bound), its batch global (each rank batch / ranks), on Dask as
the write-up ran it (on local ranks: test_ddp.py). In the torch venv (scripts/torch.sh).

Each rank's PyTorch gets one thread (``OMP_NUM_THREADS=1``, as torchrun gives it): at np 1 the
other core is left to Dask's scheduler, worker and nanny and to pipeprof's own processes, whose
work would otherwise land in the rank's steps."""

import sys

import pandas as pd
import pytest

from tests.integration.conftest import REPO, run_pipeprof

# alone: the device variant's verdict needs the second core free of other tests (above)
pytestmark = [pytest.mark.horovod, pytest.mark.torch, pytest.mark.alone]

EXAMPLE = str(REPO / "examples" / "petnames_ddp.py")
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
# a gap whose interval is clear of 5%: either class, or the 20% line between them
INPUT_BOUND = ("moderately input-bound", "highly input-bound", "on the 20% line")


def compare(out, data, nps, *options, script_args=()):
    script = [sys.executable, EXAMPLE, "--data", data, "--epochs", "10000", *script_args]
    run_pipeprof(
        "compare", "--engine", "ddp", "--launcher", "dask", "--set", f"launch.np={nps}",
        "--out", str(out), "--no-report", "--no-dashboard", *options, "--", *script,
        timeout=600, **ONE_THREAD,
    )  # fmt: skip
    summary = pd.read_csv(out / "summary.csv")
    return summary[summary["variant"] == "real"].set_index("np")


def test_on_dask_the_data_on_the_device_is_model_bound_and_encoded_in_the_loader_input_bound(
    tmp_path,
):
    """The device variant at np 1, the write-up's one-GPU baseline, measured until its interval
    clears the 5% line (10-120 s). Its LSTM layers are 128 wide here: at 64 (a step of 34 ms on
    one thread) the loader's hand-over and the gather of each batch's windows (0.25 ms) came to
    a steady 2% and the interval had 3 points left below the line (2.1% ±2.7; 1.8% ±5.3 once
    after 60 s, on the line, 2026-11-29); at 128 the step is 108 ms. Not at np 2 here: two
    ranks and the Dask processes on 2 cores swung its steps between 65 and 110 ms from one
    round to the next, and 60 s left its gap at 1.5% ±4.0, on the line (2026-11-29).

    The loader variant at np 2: its encoding is a fifth or more of each step, clear of the 5%
    line in a few seconds (29.1% ±6.4, and 21.9% ±2.7, on the 20% line: input-bound either
    way, moderately or highly). The batch is global: 256 on the one rank of np 1, 128 on
    each of np 2's."""
    device = compare(
        tmp_path / "device", "device", "[1]", "--set", "train.max_measure_s=120",
        script_args=("--hidden", "128"),
    )  # fmt: skip
    assert device.loc[1, "verdict"] == "not input-bound", device.to_dict()
    assert device.loc[1, "gap_pct"] + device.loc[1, "gap_pct_ci95"] < 5.0

    loader = compare(tmp_path / "loader", "loader", "[2]", "--set", "train.max_measure_s=20")
    assert list(loader.index) == [2]
    said = loader.to_dict()
    assert loader.loc[2, "verdict"] in INPUT_BOUND, said
    assert loader.loc[2, "gap_pct"] - loader.loc[2, "gap_pct_ci95"] >= 5.0, said
    assert loader.loc[2, "gap_pct"] > 3 * device.loc[1, "gap_pct"] + 5, said
    # the global batch of 256, split over the ranks
    for kind, np_, share in (("device", 1, 256), ("loader", 2, 128)):
        files = (tmp_path / kind / "steps").glob(f"np{np_}-*.csv")
        steps = pd.concat(pd.read_csv(f) for f in files)
        assert set(steps["batch_size"]) == {share} and set(steps["rank"]) == set(range(np_))
