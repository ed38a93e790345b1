"""The write-up's story (scenario augmentation-story, emulated devices) on two hosts of one core
each: the ranks on the first, tf.data service's worker on the second. A gap that grows with
the worker count (np=2 shares the first host's core), augmentation named as the culprit
although the read stage costs more alone (the cache holds its output), and the verdict citing
the remedies measured for it, the service on its own host among them (issue 28, item 5);
predict sizes the service from what that worker spent there, checked against this run.

How much of the gap each remedy closes moves too much between runs on 2 cores to be pinned
by a test (docs/validation.md has the runs): one worker core makes about 12,000-13,000 of the
samples/s the two ranks take at up to 18,000, and the service closed 16-49% of the np=2 gap
in the runs of 2026-11-25 (4fdb7da), short of the half the issue asks (blocked: it needs a
second core for the service, and this machine has two in all).

It measures throughput on the cores, so it runs alone (tests/conftest.py); its cluster is its
own, started and torn down while no other file runs."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.cluster.test_two_hosts import finish, nothing_left, start

pytestmark = [pytest.mark.horovod, pytest.mark.alone]

REPO = Path(__file__).resolve().parents[2]
STORY = REPO / "pipeprof" / "scenarios" / "augmentation-story.toml"


def story_with_a_service_host(service_host: str) -> str:
    """The augmentation story as shipped, its real variant only (the classic fixes are not this
    test's), with one service worker on ``service_host``, sending its batches uncompressed: the
    two hosts share one machine's memory, so compressing buys nothing and costs the one core."""
    text = STORY.read_text()
    head = text[: text.index("[[variants]]")]
    assert re.search(r'^device = "emulated:20"$', head, re.M), "the story's step changed"
    return (
        head.replace('name = "augmentation-story"', 'name = "story-service-host"')
        + '[pipeline.service]\ncompression = "none"\n\n[[variants]]\nname = "real"\n\n'
        + f'[service]\nhosts = ["{service_host}"]\nworkers = 1\n'
    )


def test_the_story_gap_grows_augmentation_is_named_and_the_remedies_are_cited(cluster, tmp_path):
    h0, h1 = cluster.hosts
    scenario = tmp_path / "story.toml"
    scenario.write_text(story_with_a_service_host(h1.name))
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "pipeprof", "compare", str(scenario), "--np", "1,2"]
    argv += ["-H", f"{h0.name}:2", "--oversubscribe"]  # np=2: two ranks on the first host's core
    argv += ["--remedies", "--no-report", "--no-dashboard", "--out", str(out)]
    code, stdout, err = finish(start(cluster, tmp_path, argv), timeout=900)
    assert code == 0, " ".join((stdout + err).split())[-3000:]
    assert not (left := nothing_left(cluster)), left
    rows = pd.read_csv(out / "summary.csv").set_index(["np", "variant"])
    real1, real2 = rows.loc[(1, "real")], rows.loc[(2, "real")]
    # the gap grew: the difference's 95% interval lies above 0 (the two readings are
    # independent, so its half-width is the half-widths' hypot). The truth here, a plain loop
    # pinned to one core (benchmarks/truth/reference.py, 2026-11-27): 25.4% at np=1 (three
    # launches 22.3-27.4), 65.4% at np=2 (65.9, 64.8). np=1's pipeline waits near the flush
    # rule's quarter of a twin step, and its rounds spread: it read 17.2% ±5.2, 27.4% ±4.9 and
    # 40.6% ±17.0 in three runs; in the last, np=2's interval began 0.9 points below np=1's
    # top, where the difference's clears 0 for any np=2 half-width over 0.93 points
    grew = real2["gap_pct"] - real1["gap_pct"]
    readings = ", ".join(  # the whole rows dict is cut short in pytest's one-line summary
        f"np={n} {r['gap_pct']:.1f}% ±{r['gap_pct_ci95']:.1f}" for n, r in ((1, real1), (2, real2))
    )
    assert grew > math.hypot(real1["gap_pct_ci95"], real2["gap_pct_ci95"]), readings
    assert {"remedy:augment-on-device", "remedy:batch-augment", "remedy:data-service"} <= set(
        rows.loc[2].index
    )
    stages = pd.read_csv(out / "stages.csv").set_index("stage")
    assert stages.loc["read", "cached"] and not stages.loc["augment", "cached"]
    verdict = {v["np"]: v for v in json.loads((out / "verdict.json").read_text())}[2]
    assert verdict["bottleneck"] == "augment", verdict["text"]
    assert verdict["advice"][0].startswith("measured: "), verdict["advice"]
    measured = [a for a in verdict["advice"] if a.startswith("measured: ")]
    assert len(measured) == 3, verdict["advice"]  # the service's among them
    assert any("tf.data service workers" in a for a in measured), measured
    # the device remedy ran on the emulated device's host CPU, and says so
    assert rows.loc[(2, "remedy:augment-on-device"), "remedy_note"].startswith("emulated device")
    assert real2["cpu_cores_per_rank"] > 0
    # the ranks ran on the first host alone; the service's worker on the second, and said so
    assert set(rows["hosts"]) == {f"{h0.name}:1", f"{h0.name}:2"}, rows["hosts"]
    worker_log = (out / "service" / "np2" / "worker-0.log").read_text()
    assert f"worker serving on {h1.name}:" in worker_log, worker_log[-2000:]

    # predict sizes the service from the CPU that worker spent on the other host (its log)
    proc = subprocess.run(
        [sys.executable, "-m", "pipeprof", "predict", str(out), "--np", "1,2"]
        + ["--gpus-per-node", "2", "--cores-per-node", "1", "--no-report"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    info = json.loads((out / "prediction.json").read_text())["service"]
    assert info is not None and info["measured_at_np"] == 2, info
    sizing = {s["np"]: s for s in info["sizing"]}
    service = rows.loc[(2, "remedy:data-service")]
    said = (
        f"one worker predicted at {sizing[2]['worker_samples_per_s']:.0f} samples/s; at np=2 it "
        f"delivered {service['samples_per_s']:.0f}, a gap of {service['gap_pct']:.1f}% "
        f"±{service['gap_pct_ci95']:.1f}"
    )
    # where one worker could not keep up, what it delivered is its rate: predict's within 20%
    # (the paired rounds leave the ranks part of the service's stock: 6% more than in steady
    # state, measured 2026-11-25; over the measured steps, three runs of 2026-11-26 were 2-5%
    # off), and predict asks for more than one worker at np=2
    assert service["gap_pct"] - service["gap_pct_ci95"] > 0, said
    assert abs(sizing[2]["worker_samples_per_s"] / service["samples_per_s"] - 1) <= 0.2, said
    assert sizing[2]["workers"] >= 2, said
