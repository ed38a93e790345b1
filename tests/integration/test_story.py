"""The write-up's story on this machine (scenario augmentation-story, emulated devices): a gap
that grows with the worker count, augmentation named as the culprit although the read stage
costs more alone (the cache holds its output), and the verdict citing the remedies measured
for it before any advice.

How much of the gap the best remedy closes here (batch augmentation: 23-70% of the np=2 gap in
the story's runs at 20-40 ms steps, benchmarks/remedies_story.py) moves too much between runs on 2 cores to be pinned
by a test; the benchmark prints it."""

import pandas as pd
import pytest

from pipeprof import scenario as scen
from pipeprof.workflows.compare import CompareRequest, compare

pytestmark = [pytest.mark.horovod, pytest.mark.alone]


def test_the_story_gap_grows_augmentation_is_named_and_the_remedies_are_cited(
    tmp_path, data_cache_dir, monkeypatch
):
    monkeypatch.setenv("PIPEPROF_DATA_DIR", str(data_cache_dir))
    story = scen.load("augmentation-story")
    # the scenario's own 15 s at most a variant: since the real steps meet the pipeline without
    # the stock it built through the twin's steps (rank.measure.flush), np=2's interval at 8 s
    # was ±10 and once failed to clear np=1's; at 15 s a run gave np=1 -0.5% ±1.3, np=2 21.5% ±11.8
    result = compare(
        CompareRequest(
            story,
            [1, 2],
            out=str(tmp_path / "run"),
            only_variants=["real"],
            remedies="auto",
            report=False,
        )
    )
    assert result.failure is None, result.failure
    rows = result.summary.set_index(["np", "variant"])
    real1, real2 = rows.loc[(1, "real")], rows.loc[(2, "real")]
    assert (
        real2["gap_pct"] - real2["gap_pct_ci95"] > real1["gap_pct"] + real1["gap_pct_ci95"]
    ), rows.to_dict()
    assert {"remedy:augment-on-device", "remedy:batch-augment"} <= set(rows.loc[2].index)
    stages = pd.read_csv(tmp_path / "run" / "stages.csv").set_index("stage")
    assert stages.loc["read", "cached"] and not stages.loc["augment", "cached"]
    verdict = {v.np: v for v in result.verdicts}[2]
    assert verdict.bottleneck == "augment", verdict.text
    assert verdict.advice[0].startswith("measured: "), verdict.advice
    assert sum(a.startswith("measured: ") for a in verdict.advice) == 2
    # the device remedy ran on the emulated device's host CPU, and says so
    assert rows.loc[(2, "remedy:augment-on-device"), "remedy_note"].startswith("emulated device")
    assert rows.loc[(2, "real"), "cpu_cores_per_rank"] > 0
