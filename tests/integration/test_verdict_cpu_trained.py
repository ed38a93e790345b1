"""The verdict names the stage that costs, on CPU-trained ranks (model and pipeline share the
cores). These measure contention itself, so they run alone: no other test shares the cores
while they do (tests/conftest.py)."""

import pytest

from tests.integration.verdict_cases import check_verdict

pytestmark = [pytest.mark.horovod, pytest.mark.alone]


@pytest.mark.parametrize("expected", ["augment", "read"])
def test_ablation_verdict_names_the_costly_stage(expected, tmp_path, data_cache_dir):
    check_verdict(expected, tmp_path, data_cache_dir)
