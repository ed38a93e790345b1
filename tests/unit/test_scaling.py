"""Batch and learning-rate scaling with the worker count, and the warm-up ramp, on
hand-worked cases (the figures below are worked out here, not taken from the code)."""

import pytest

from pipeprof.errors import PipeprofError
from pipeprof.rank.worker import batch_and_lr, ramp_lr
from pipeprof.scenario import TrainConfig


@pytest.mark.parametrize(
    "batch,mode,scaling,np,want",
    [
        (32, "per_worker", "linear", 4, (32, 0.04)),  # each worker 32; 0.01 × 4
        (64, "global", "sqrt", 4, (16, 0.02)),  # 64 / 4; 0.01 × √4
        (64, "global", "none", 2, (32, 0.01)),
        (48, "global", "linear", 3, (16, 0.03)),
    ],
)
def test_batch_and_learning_rate_at_each_worker_count(batch, mode, scaling, np, want):
    train = TrainConfig(batch_size=batch, batch_mode=mode, lr_scaling=scaling, learning_rate=0.01)
    per_worker, lr = batch_and_lr(train, np)
    assert per_worker == want[0] and lr == pytest.approx(want[1])


def test_a_global_batch_smaller_than_the_workers_is_refused_in_one_line():
    with pytest.raises(PipeprofError) as err:
        batch_and_lr(TrainConfig(batch_size=8, batch_mode="global"), 16)
    assert str(err.value) == ("train.batch_size 8 (global) leaves no samples per worker at np=16")


@pytest.mark.parametrize(
    "scaled,step,want",
    [
        (0.04, 0, 0.01),  # one worker's rate before the first step
        (0.04, 5, 0.025),  # halfway: 0.01 + 0.03 / 2
        (0.04, 10, 0.04),  # the scaled rate at the ramp's end
        (0.04, 12, 0.04),  # and after it
        (0.02, 5, 0.015),  # sqrt scaling at 4 workers ramps to 0.02, from 0.01 (not 0.005)
    ],
)
def test_the_warm_up_ramp_goes_from_one_workers_rate_to_the_scaled_one(scaled, step, want):
    assert ramp_lr(0.01, scaled, step, 10) == pytest.approx(want)
