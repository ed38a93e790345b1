"""The verdict on an emulated device, where the model's step bounds it: not the bottleneck.

It runs alone (tests/conftest.py). Beside another launch file it read the host 95% busy "with
the step alone" (the neighbour's CPU, on a step that uses none) and a gap of 8.7% ±17.7, which
straddled the 5% line; the contention law then accounted for the point estimate, and the
verdict said input-bound (CI on aa71490, 2026-11-27)."""

import pytest

from tests.integration.verdict_cases import check_verdict

pytestmark = [pytest.mark.horovod, pytest.mark.alone]


def test_ablation_verdict_says_the_pipeline_is_not_the_bottleneck_of_a_model_bound_step(
    tmp_path, data_cache_dir
):
    check_verdict("none", tmp_path, data_cache_dir)
