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


def compare(out, data, nps, *options):
    script = [sys.executable, EXAMPLE, "--data", data, "--epochs", "10000"]
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
    clears the 5% line (the default rule: 10-60 s). Not at np 2 here: two ranks and the Dask
    processes on 2 cores swung its steps (``--hidden 128``) between 65 and 110 ms from one
    round to the next, and 60 s left its gap at 1.5% ±4.0, on the line (2026-11-29). The loader variant at np 1 and 2: its encoding is a
    quarter or more of each step, clear of the line in a few seconds."""
    device = compare(tmp_path / "device", "device", "[1]")
    assert device.loc[1, "verdict"] == "not input-bound", device.to_dict()
    assert device.loc[1, "gap_pct"] + device.loc[1, "gap_pct_ci95"] < 5.0

    out = tmp_path / "loader"
    loader = compare(out, "loader", "[1, 2]", "--set", "train.max_measure_s=20")
    assert list(loader.index) == [1, 2]
    for np_ in (1, 2):
        assert loader.loc[np_, "verdict"].endswith("input-bound"), loader.to_dict()
        assert not loader.loc[np_, "verdict"].startswith("not"), loader.to_dict()
        assert loader.loc[np_, "gap_pct"] - loader.loc[np_, "gap_pct_ci95"] >= 5.0
        assert loader.loc[np_, "gap_pct"] > 3 * device.loc[1, "gap_pct"] + 5
    # the global batch of 256, split over the ranks
    for np_, share in ((1, 256), (2, 128)):
        steps = pd.concat(pd.read_csv(f) for f in (out / "steps").glob(f"np{np_}-*.csv"))
        assert set(steps["batch_size"]) == {share} and set(steps["rank"]) == set(range(np_))
