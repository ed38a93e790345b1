"""Remedies: which apply to a pipeline (and why not), and what share of the gap each closed."""

import dataclasses
import math

import pandas as pd
import pytest

from pipeprof.analysis import remedies
from pipeprof.analysis.verdict import bounding_stage, decide
from pipeprof.scenario import AugmentConfig, CacheConfig, PipelineConfig, ReadConfig, ServiceUse


def names(planned):
    return {p.remedy.name: (p.pipeline, p.skipped) for p in planned}


def test_each_remedy_changes_one_thing_of_the_real_pipeline():
    base = PipelineConfig()
    got = names(remedies.plan(base, None, data=remedies.Data("jpeg", 512, 128)))
    assert set(got) == {
        "augment-on-device",
        "batch-augment",
        "decode-less",
        "cache-decoded",
        "data-service",
    }
    assert got["decode-less"][0] == dataclasses.replace(base, read=ReadConfig(decode="reduced"))
    device, batch, cache = (
        got[n][0] for n in ("augment-on-device", "batch-augment", "cache-decoded")
    )
    assert got["data-service"][0] == dataclasses.replace(base, service=ServiceUse(enabled=True))
    assert device == dataclasses.replace(
        base, augment=dataclasses.replace(base.augment, placement="device")
    )
    assert batch == dataclasses.replace(
        base, augment=dataclasses.replace(base.augment, placement="batch")
    )
    assert cache == dataclasses.replace(
        base, cache=CacheConfig(enabled=True, kind="memory", placement="before_augment")
    )
    # chosen for a stage: only its remedies; tf.data service relieves both, but is skipped
    # unless its workers have CPU hosts of their own
    assert set(names(remedies.plan(base, ["read"]))) == {
        "decode-less",
        "cache-decoded",
        "data-service",
    }
    assert set(names(remedies.plan(base, ["augment"]))) == {
        "augment-on-device",
        "batch-augment",
        "data-service",
    }
    assert names(remedies.plan(base, ["read"]))["data-service"] == (None, remedies.SERVICE_HERE)
    assert names(remedies.plan(base, ["read"], service_hosts=True))["data-service"][
        0
    ].service.enabled
    assert remedies.plan(base, ["shuffle"]) == []


def test_a_remedy_that_does_not_apply_says_why():
    no_aug = dataclasses.replace(
        PipelineConfig(), augment=AugmentConfig(enabled=False), cache=CacheConfig(enabled=True)
    )
    got = names(remedies.plan(no_aug, None))
    assert got["augment-on-device"] == (None, "the scenario's pipeline does not augment")
    assert got["batch-augment"][0] is None and got["cache-decoded"][0] is None
    assert "already caches decoded images" in got["cache-decoded"][1]
    frozen = dataclasses.replace(
        PipelineConfig(), cache=CacheConfig(enabled=True, placement="after_augment")
    )
    assert "after augment" in names(remedies.plan(frozen, ["augment"]))["batch-augment"][1]

    def decode_less(data):
        return names(remedies.plan(PipelineConfig(), ["read"], data=data))["decode-less"]

    assert decode_less(remedies.Data("png", 448, 48)) == (
        None,
        "the stored images are PNG: only JPEGs decode at a reduced scale",
    )
    assert decode_less(remedies.Data("jpeg", 96, 64)) == (
        None,
        "the stored images (96px) are less than twice the model's input (64px): there is nothing to decode less",
    )
    assert (
        "not known" in decode_less(remedies.Data(image_size=224))[1]
    )  # TFRecords: not looked into
    assert (
        decode_less(remedies.Data("jpeg", 128, 64))[0].read.decode == "reduced"
    )  # twice: 1/2 scale
    fails = names(remedies.plan(PipelineConfig(), None, on_bad_file="fail"))["data-service"]
    assert fails == (
        None,
        'data.on_bad_file = "fail": a service worker cannot end a rank on a bad file',
    )
    file_cache = dataclasses.replace(PipelineConfig(), cache=CacheConfig(enabled=True, kind="file"))
    assert "file cache" in names(remedies.plan(file_cache, None))["data-service"][1]
    on_batch = dataclasses.replace(PipelineConfig(), augment=AugmentConfig(placement="batch"))
    assert (
        "already augments per batch"
        in names(remedies.plan(on_batch, ["augment"]))["batch-augment"][1]
    )


def test_bounding_stage_is_the_costliest_per_sample():
    rows = [
        {"stage": s, "marginal_core_ms_1": c}
        for s, c in (("read", 0.3), ("label", 0.1), ("augment", 1.5))
    ]
    assert bounding_stage(rows) == "augment" and bounding_stage([]) == "none"


def test_a_cached_stage_is_paid_once_so_it_does_not_bound_throughput():
    # read costs most alone, but a cache before augment holds its output after the first epoch
    rows = [
        {"stage": "read", "marginal_core_ms_1": 0.07, "cached": True},
        {"stage": "label", "marginal_core_ms_1": 0.02, "cached": True},
        {"stage": "shuffle", "marginal_core_ms_1": 0.01, "cached": False},
        {
            "stage": "augment",
            "marginal_core_ms_1": 0.05,
            "cached": False,
            "samples_per_s_configured": 4000.0,
        },
    ]
    assert bounding_stage(rows) == "augment"
    v = decide(rows, np=1, synthetic_per_rank=10_000.0, cores_per_rank=1.0)
    # the steady state costs shuffle + augment: 0.06 core-ms, so 0.6 of a core at 10,000 samples/s
    assert v.pipeline_core_ms_per_sample == pytest.approx(0.06) and v.cores_needed == pytest.approx(
        0.6
    )
    assert any(
        "read and label cached in RAM or on disk: paid in the first epoch only" in line
        for line in v.text
    )
    # everything cached (after augment): the costs are all there is to report
    frozen = [dict(r, cached=True) for r in rows]
    assert bounding_stage(frozen) == "read"


def summary(real_gap, real_half, rows):
    return pd.DataFrame(
        [
            {"np": 2, "variant": "synthetic", "gap_pct": math.nan, "gap_pct_ci95": math.nan},
            {"np": 2, "variant": "real", "gap_pct": real_gap, "gap_pct_ci95": real_half},
        ]
        + [
            {"np": 2, "variant": remedies.PREFIX + n, "gap_pct": g, "gap_pct_ci95": h}
            for n, g, h in rows
        ]
    )


def test_gap_closed_is_the_share_of_the_real_gap_and_cited_best_first():
    s = remedies.add_gap_closed(
        summary(
            40.0,
            3.0,
            [
                ("batch-augment", 30.0, 2.0),
                ("augment-on-device", 4.0, 1.5),
                ("cache-decoded", 44.0, 3.0),
            ],
        ),
        "real",
        "emulated:20ms",
        0,
    )
    closed = dict(zip(s["variant"], s["gap_closed_pct"]))
    # (40 - 30) / 40 = 25%; (40 - 4) / 40 = 90%; (40 - 44) / 40 = -10%
    assert closed["remedy:batch-augment"] == pytest.approx(25.0)
    assert closed["remedy:augment-on-device"] == pytest.approx(90.0)
    assert closed["remedy:cache-decoded"] == pytest.approx(-10.0) and math.isnan(closed["real"])
    notes = dict(zip(s["variant"], s["remedy_note"]))
    assert notes["remedy:augment-on-device"].startswith(
        "emulated device: the augmentation ran on the CPU"
    )
    assert notes["remedy:batch-augment"] == ""
    lines = remedies.measured_lines(s, "real", 2)
    assert (
        lines[0].startswith("measured: augmentation on the accelerator")
        and "closed 90% of the gap at np=2" in lines[0]
    )
    assert "(40.0% → 4.0% ±1.5)" in lines[0] and "emulated device" in lines[0]
    assert "did not close the gap (it widened)" in lines[2]
    # on a GPU host the device remedy carries no note; without one it does
    assert remedies.device_note("remedy:augment-on-device", "real", 8) == ""
    assert remedies.device_note("remedy:augment-on-device", "real", 0).startswith("no accelerator")
    # the verdict cites the figures before the untried advice
    rows = [{"stage": "augment", "marginal_core_ms_1": 3.0, "samples_per_s_configured": 300.0}]
    v = decide(
        rows,
        np=2,
        synthetic_per_rank=500,
        cores_per_rank=1,
        gap_pct=40.0,
        gap_ci95=3.0,
        measured_remedies=lines,
    )
    assert v.bottleneck == "augment" and v.advice[:3] == lines
    assert all(a.startswith("not measured here: ") for a in v.advice[3:])


def test_a_gap_that_is_not_there_is_not_closed():
    s = remedies.add_gap_closed(summary(1.9, 2.2, [("batch-augment", 0.4, 1.9)]), "real")
    (line,) = remedies.measured_lines(s, "real", 2)
    assert "closed" not in line and "left nothing to close" in line and "0.4% ±1.9" in line
    assert (
        s[s["variant"] == "remedy:batch-augment"]["gap_closed_pct"].isna().all()
    )  # no share of no gap
    # a large gap measured with a wide interval is still there to close (a CI run's read case)
    s = remedies.add_gap_closed(summary(53.8, 61.7, [("cache-decoded", 10.0, 5.0)]), "real")
    (line,) = remedies.measured_lines(s, "real", 2)
    assert "closed 81% of the gap at np=2 (53.8% → 10.0% ±5.0)" in line


def test_a_stage_that_waits_on_its_source_bounds_though_another_costs_more_cpu():
    # A read throttled by storage: 400 samples/s (2.5 ms of wall time per sample at the
    # configured parallelism) for 0.1 core-ms; augment costs the most CPU (1.5 core-ms at one
    # thread) but adds only 0.05 ms of wall time per sample on top of the read.
    rows = [
        {
            "stage": "read",
            "marginal_core_ms_1": 0.1,
            "marginal_core_ms_configured": 0.1,
            "samples_per_s_configured": 400.0,
        },
        {
            "stage": "label",
            "marginal_core_ms_1": 0.01,
            "marginal_core_ms_configured": 0.01,
            "samples_per_s_configured": 398.0,
        },
        {
            "stage": "augment",
            "marginal_core_ms_1": 1.5,
            "marginal_core_ms_configured": 1.6,
            "samples_per_s_configured": 390.0,
        },
    ]
    assert bounding_stage(rows) == "read"
    v = decide(
        rows, np=1, synthetic_per_rank=1000.0, cores_per_rank=2.0, gap_pct=60.0, gap_ci95=2.0
    )
    assert v.input_bound and v.bottleneck == "read"
    assert v.text[0] == "input-bound: the read stage bounds throughput (it waits on its source)."
    assert any(
        "read stage waits rather than computes: 2.50 ms of wall time per sample for 0.10 core-ms"
        in line
        for line in v.text
    )
    # the same read served from RAM (its wall time is its CPU's): the CPU ranking stands
    fast = [
        dict(rows[0], samples_per_s_configured=10_000.0),
        dict(rows[1], samples_per_s_configured=9_900.0),
        dict(rows[2], samples_per_s_configured=1_300.0),
    ]
    assert bounding_stage(fast) == "augment"


def test_a_waiting_stage_under_a_cache_is_paid_once_and_does_not_bound():
    rows = [
        {
            "stage": "read",
            "marginal_core_ms_1": 0.1,
            "marginal_core_ms_configured": 0.1,
            "samples_per_s_configured": 400.0,
            "cached": True,
        },
        {
            "stage": "augment",
            "marginal_core_ms_1": 1.5,
            "marginal_core_ms_configured": 1.6,
            "samples_per_s_configured": 390.0,
            "cached": False,
        },
    ]
    assert bounding_stage(rows) == "augment"


def test_a_dataloader_gets_a_worker_per_core_and_no_tf_data_service():
    base = PipelineConfig()
    few = remedies.Loader(workers=0, cores=2)
    got = names(remedies.plan(base, ["read"], loader=few))
    assert set(got) == {"decode-less", "cache-decoded", "loader-workers"}
    assert got["loader-workers"][0] == dataclasses.replace(
        base, loader=dataclasses.replace(base.loader, num_workers=2)
    )
    enough = names(remedies.plan(base, ["augment"], loader=remedies.Loader(2, 2)))
    assert set(enough) == {"augment-on-device", "batch-augment", "loader-workers"}
    assert enough["loader-workers"] == (
        None,
        "the loader already runs 2 worker(s) on the rank's 2 core(s)",
    )
