"""The stage benchmark's trials on a real pipeline: fixed length, or adaptive (the tuner's)."""

from pipeprof.analysis.stats import STOP_FIXED_TIME, STOP_LOST, STOP_TARGET
from pipeprof.data.generate import generate
from pipeprof.data.stagebench import StageBench
from pipeprof.scenario import DataConfig, GenerateConfig, PipelineConfig


def test_a_trial_measures_its_length_or_stops_once_it_cannot_win_or_is_known(tmp_path):
    root = generate(GenerateConfig(images=64, size=24, classes=2, seed=3), tmp_path / "data")
    data = DataConfig(source="folder", path=str(root), image_size=16, num_classes=2)
    with StageBench(data, str(root), 8, cores=1, log_path=tmp_path / "sb.log") as bench:
        fixed = bench.run(PipelineConfig(), 0.6)
        assert (
            fixed["stop"] == STOP_FIXED_TIME
            and fixed["seconds"] >= 0.6
            and fixed["samples_per_s"] > 0
        )
        # a bar a thousand times the rate just measured: it loses at its minimum, not its maximum
        lost = bench.run(
            PipelineConfig(), 20.0, min_seconds=0.3, beat=1000 * fixed["samples_per_s"]
        )
        assert lost["stop"] == STOP_LOST and lost["seconds"] < 10.0
        # a target any interval meets: it stops at its minimum, with the half-width it reached
        known = bench.run(PipelineConfig(), 20.0, min_seconds=0.3, target_pct=1000.0)
        assert (
            known["stop"] == STOP_TARGET and known["seconds"] < 10.0 and known["half_pct"] <= 1000.0
        )
