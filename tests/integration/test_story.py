"""The write-up's story on this machine (scenario augmentation-story, emulated devices): the
culprit named by measurement, and a remedy that closes at least half of the gap it leaves,
cited by the verdict."""

import pandas as pd
import pytest

from pipeprof import scenario as scen
from pipeprof.workflows.compare import compare

pytestmark = pytest.mark.horovod


def test_batch_augmentation_closes_most_of_the_story_gap_and_the_verdict_cites_it(tmp_path, data_cache_dir,
                                                                                   monkeypatch):
    monkeypatch.setenv("PIPEPROF_DATA_DIR", str(data_cache_dir))
    story = scen.load("augmentation-story")
    result = compare(story, [1, 2], out=str(tmp_path / "run"), only_variants=["real"], remedies="auto",
                     report=False)
    assert result.failure is None, result.failure
    rows = result.summary.set_index(["np", "variant"])
    for n in (1, 2):
        assert rows.loc[(n, "real"), "gap_pct"] - rows.loc[(n, "real"), "gap_pct_ci95"] > 5, rows.loc[n].to_dict()
        assert rows.loc[(n, "remedy:batch-augment"), "gap_closed_pct"] >= 50, rows.loc[n].to_dict()
    assert rows.loc[(2, "real"), "gap_pct"] > rows.loc[(1, "real"), "gap_pct"]  # the gap grows with np
    verdicts = {v.np: v for v in result.verdicts}
    for n in (1, 2):
        assert verdicts[n].bottleneck == "augment", verdicts[n].text
        assert verdicts[n].advice[0].startswith("measured: batch-level augmentation (vectorised after batch, one "
                                                "call per batch) closed"), verdicts[n].advice
    # the device remedy ran on the emulated device's host CPU, and says so
    notes = pd.read_csv(tmp_path / "run" / "summary.csv").set_index(["np", "variant"])["remedy_note"]
    assert notes.loc[(2, "remedy:augment-on-device")].startswith("emulated device")
