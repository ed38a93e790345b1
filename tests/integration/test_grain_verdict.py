"""Grain's stages under ``--engine data_parallel``: the verdict names an injected augmentation
and nothing for a control, and ``tune`` turns Grain's worker count. In the torch venv, which
holds JAX and Grain and no TensorFlow (scripts/torch.sh). These measure the cores, so they run
alone (tests/conftest.py)."""

import json

import pandas as pd
import pytest

from tests.integration.conftest import run_pipeprof
from tests.integration.verdict_cases import CASES, EMULATED_CONTROL, TRAIN, merge

pytestmark = [pytest.mark.horovod, pytest.mark.torch, pytest.mark.alone]

GRAIN = ("--engine", "data_parallel", "--set", "data.library=grain")

# the suite's augment case (verdict_cases.py: arbitrary-angle rotation and deep crops of 64 px
# photos) on an emulated device of 8 ms a step that takes no CPU: its numpy augmentation, about
# 1.3 ms an image in Grain's own figures, cannot keep up on 2 cores
AUGMENT = merge(CASES["augment"], TRAIN.replace("[train]\n", '[train]\ndevice = "emulated:8"\n'))

# model-bound: the DataLoader's control (verdict_cases.py), no augmentation and a step of
# 160 ms that takes no CPU
CONTROL = merge(EMULATED_CONTROL, TRAIN)


@pytest.mark.parametrize(
    "case, named", [(AUGMENT, "augment"), (CONTROL, "none")], ids=["augment", "control"]
)
def test_the_verdict_names_augment_on_grain_and_nothing_for_a_control(
    case, named, tmp_path, data_cache_dir
):
    scen = tmp_path / "s.toml"
    scen.write_text(case)
    out = tmp_path / "run"
    got = run_pipeprof(
        "compare", str(scen), "--np", "1", *GRAIN, "--verdict", "--no-report",
        "--no-dashboard", "--out", str(out), data=data_cache_dir,
    )  # fmt: skip
    verdict = json.loads((out / "verdict.json").read_text())[0]
    assert verdict["bottleneck"] == named, verdict["text"]
    if named == "augment":  # Grain's advice, and Grain's own timing beside pipeprof's
        advice = " ".join(verdict["advice"])
        assert "worker_count" in advice and "num_parallel_calls" not in advice, advice
        assert "Grain's own ms/element" in got.stdout, got.stdout[-3000:]
    else:
        assert "not the bottleneck" in got.stdout


# 240 generated JPEGs of 480 px decoded to 32 px, Grain with no worker process and one read
# thread: decoding is nearly all of the pipeline's CPU, on one core of the two
DECODE_HEAVY = """
name = "decode-heavy"
[data]
source = "generated"
image_size = 32
num_classes = 3
library = "grain"
[data.generate]
images = 240
size = 480
classes = 3
[pipeline.grain]
worker_count = 0
read_threads = 1
[train]
engine = "data_parallel"
batch_size = 8
warmup_steps = 3
measure_steps = 20
"""


def test_tune_turns_grains_worker_count_and_beats_one_thread(tmp_path, data_cache_dir):
    scen = tmp_path / "s.toml"
    scen.write_text(DECODE_HEAVY)
    out = tmp_path / "tune"
    run_pipeprof(
        "tune", str(scen), "--cores-per-rank", "2", "--budget", "40s", "--confirm-steps", "0",
        "--ram-budget", "1M", "--no-report", "--out", str(out), data=data_cache_dir,
    )  # fmt: skip
    got = json.loads((out / "tune.json").read_text())
    tried = set(pd.read_csv(out / "trials.csv")["worker_count"])
    assert len(tried) > 1, tried  # the worker count was turned
    assert got["scenario_default"]["point"]["worker_count"] == 0
    low = got["winner_samples_per_s"] * (1 - got["winner_half_pct"] / 100)
    base = got["scenario_default"]
    assert low > base["samples_per_s"] * (1 + base["half_pct"] / 100), (got["winner"], base)
    assert got["autotune"]["label"] == "Grain defaults"
    code = (out / "grain.py.txt").read_text()
    assert "grain.ReadOptions(num_threads=" in code and "auto" not in code, code
    assert "[pipeline.grain]" in (out / "winner.toml").read_text()
