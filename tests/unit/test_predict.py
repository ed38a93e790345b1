"""The predictor's terms against closed forms."""

import dataclasses
import math

import numpy as np
import pytest

from pipeprof.analysis.predict import Ceiling, Source, Target, expected_max, overflow_ms, predict


@pytest.mark.parametrize("n", [1, 2, 8, 32])
def test_straggler_term_matches_the_exponential_closed_form(n):
    # E[max of n Exp(λ)] = H_n / λ
    rng = np.random.default_rng(0)
    draws = rng.exponential(scale=2.0, size=200_000)
    harmonic = sum(1 / k for k in range(1, n + 1))
    assert expected_max(draws, n) == pytest.approx(2.0 * harmonic, rel=0.01)


def test_straggler_term_matches_the_normal_closed_form():
    # E[max of 2 N(μ,σ)] = μ + σ/√π ; E[max of 3] = μ + 3σ/(2√π)
    rng = np.random.default_rng(1)
    draws = rng.normal(10.0, 2.0, size=400_000)
    assert expected_max(draws, 2) == pytest.approx(10 + 2 / math.sqrt(math.pi), abs=0.01)
    assert expected_max(draws, 3) == pytest.approx(10 + 3 * 2 / (2 * math.sqrt(math.pi)), abs=0.01)


def test_expected_max_of_a_constant_and_small_samples():
    assert expected_max(np.array([5.0] * 10), 32) == 5.0
    assert expected_max(np.array([1.0, 3.0]), 2) == pytest.approx(
        0.25 * 1 + 0.75 * 3
    )  # P(max=3) = 1 - 1/4


def source(**kw):
    base = dict(
        batch_per_rank=32,
        device_ms=100.0,
        sync_cpu_ms=2.0,
        pipeline_core_ms_per_sample=1.0,
        gradient_bytes=100e6,
        bytes_per_sample=110_000.0,
        synth_jitter=(1.0,),
        real_jitter=(1.0,),
    )
    return Source(**{**base, **kw})


def test_input_bound_appears_when_cores_per_rank_shrink():
    # 32 samples × 8 core-ms per step; the device takes 100 ms; the loop keeps 2 CPU-ms per step
    src = source(pipeline_core_ms_per_sample=8.0)
    roomy, tight = (
        predict(src, Target(gpus_per_node=8, cores_per_node=c), [8])[0] for c in (64.0, 8.0)
    )
    # 8 cores per rank: 258 / 8 CPU-ms fit in the step; the pipeline keeps them busy ρ = 256 /
    # (8 t) of the real step t, in bursts of 256 / 8 ms that the synchronisation's hops wait:
    # t = 100 + κ × 256 / (8 t) × 32, so t² − 100 t − κ × 32 × 32 = 0
    t = (100 + math.sqrt(100**2 + 4 * 0.45 * 32 * 32)) / 2  # 104.41
    assert roomy.input_cpu_ms == pytest.approx(258 / 8)
    assert roomy.real_step_ms == pytest.approx(t) and roomy.contention_ms == pytest.approx(t - 100)
    assert roomy.gap_pct == pytest.approx(100 * (1 - 100 / t))
    assert roomy.dominant == "compute" and roomy.gap_cause == "contention"
    # a core per rank: no overflow; the hops' wait (κ × 256 / 258 × 256 = 114.3) sits under the CPU bound,
    # 258 CPU-ms per step on one core, which outlasts the device's 100 ms
    assert tight.busy_synth == pytest.approx(8 * 2 / (8 * 100))
    assert tight.input_cpu_ms == pytest.approx(258) and tight.contention_ms == 0.0
    assert tight.dominant == "input" and tight.gap_cause == "input"
    assert tight.gap_pct == pytest.approx(100 * (1 - 100 / 258), abs=0.01)


def test_ring_allreduce_and_storage_terms():
    tgt = Target(gpus_per_node=8, cores_per_node=64, network_gbps=100.0, storage_mbps=2000.0)
    (p,) = predict(source(), tgt, [32])
    assert p.allreduce_ms == pytest.approx(2 * 31 / 32 * 100e6 / 12.5e9 * 1e3)
    assert p.storage_ms == pytest.approx(32 * 32 * 110_000 / 2e9 * 1e3)


def test_each_ring_step_adds_its_latency_to_both_steps_but_not_to_the_storage_floor():
    # np=4: 2(N−1) = 6 ring steps of 1.5 ms, 9 ms, on top of the bytes' time over 100 Gb/s
    tgt = Target(gpus_per_node=4, cores_per_node=64, network_gbps=100.0, hop_ms=1.5)
    (p,) = predict(source(pipeline_core_ms_per_sample=0.0), tgt, [4])
    assert p.allreduce_ms == pytest.approx(9.0 + 12.0)  # 1.5 × 100 MB over 12.5 GB/s: 12 ms
    assert p.synth_step_ms == pytest.approx(121.0)
    assert p.real_step_ms == pytest.approx(p.synth_step_ms) and p.gap_pct == pytest.approx(0.0)
    (one,) = predict(source(pipeline_core_ms_per_sample=0.0), tgt, [1])
    assert one.allreduce_ms == 0.0  # one rank: no ring
    # storage read at a set rate per rank (batches every 140 ms at np=1): the reader reads on
    # through the ring's 2 × 1.5 ms at np=2, so the step is the floor's 140, not 143, against
    # a synthetic step of 103
    slow_read = source(
        pipeline_core_ms_per_sample=0.0,
        pipeline_cpu_ms=1.6,
        real_handoff_ms=40.0,
        gradient_bytes=0.0,
    )
    (r2,) = predict(slow_read, Target(gpus_per_node=2, cores_per_node=2.0, hop_ms=1.5), [2])
    assert r2.synth_step_ms == pytest.approx(103.0) and r2.real_step_ms == pytest.approx(140.0)
    assert r2.gap_pct == pytest.approx(100 * (1 - 103 / 140))
    # the allreduce ran under the floor: it is not what dominates the 140 ms step
    assert r2.allreduce_ms == pytest.approx(3.0) and r2.dominant == "compute"
    # a step measured at N (the ceiling) holds its synchronisation: α is not added to it
    tgt_c = Target(gpus_per_node=4, cores_per_node=64, hop_ms=1.5, ceiling={4: Ceiling(110.0, 0.1)})
    (c4,) = predict(source(pipeline_core_ms_per_sample=0.0), tgt_c, [4])
    assert c4.synth_step_ms == pytest.approx(110.0) and c4.allreduce_ms == pytest.approx(10.0)


def test_stragglers_grow_with_n_and_cost_the_gap_when_real_steps_are_noisier():
    jit = tuple(np.random.default_rng(2).normal(1.0, 0.2, 5000).clip(0.5))
    src = source(real_jitter=jit, synth_jitter=(1.0,), pipeline_core_ms_per_sample=0.0)
    preds = predict(src, Target(gpus_per_node=8, cores_per_node=64), [1, 4, 32])
    gaps = [p.gap_pct for p in preds]
    assert gaps[0] == pytest.approx(0.0, abs=1.0) and gaps[0] < gaps[1] < gaps[2]
    assert preds[2].dominant == "stragglers"


def test_overflow_is_zero_with_a_core_per_rank_and_grows_with_the_ranks_beyond():
    assert (
        overflow_ms(8, 64.0, 12.0) == 0.0
        and overflow_ms(2, 2.0, 12.0) == 0.0
        and overflow_ms(8, 2.0, 0.0) == 0.0
    )
    # (r − c) × P / c: 6 of 8 pipelines' bursts queue on 2 cores and drain in 6 × 12 / 2 ms
    assert overflow_ms(8, 2.0, 12.0) == pytest.approx(36.0)
    # one core is one run queue: the ranks time-share it, nothing overflows to a core it lacks
    assert overflow_ms(2, 1.0, 12.0) == 0.0


def test_busy_cores_delay_a_synchronous_step_by_their_share_of_its_bursts():
    from pipeprof.analysis.predict import busy_sync_ms

    assert busy_sync_ms(1, 1.0, 20.0, 40.0) == 0.0  # one rank: no hop to wait
    # a core per rank, 20 CPU-ms of pipeline in a 40 ms step: busy half of it, in 20 ms bursts
    assert busy_sync_ms(2, 1.0, 20.0, 40.0) == pytest.approx(0.45 * 0.5 * 20.0)
    # half a core per rank: the pipeline needs more than its share, busy all the step
    assert busy_sync_ms(2, 0.5, 20.0, 30.0) == pytest.approx(0.45 * 1.0 * 20.0)
    # 8 cores per rank: busy 20 / 320 of the step, in bursts of 20 / 8 ms
    assert busy_sync_ms(8, 8.0, 20.0, 40.0) == pytest.approx(0.45 * (20 / 320) * 2.5)
    # two ranks on a node of one core: its one run queue serves the hops sooner, κ = 0.25
    assert busy_sync_ms(2, 0.5, 24.0, 40.0, node_cores=1.0) == pytest.approx(0.25 * 1.0 * 24.0)
    # ... with a floor: a woken hop waits out half of another rank's burst, or of a 4 ms turn
    assert busy_sync_ms(2, 0.5, 10.0, 40.0, node_cores=1.0) == pytest.approx(4.0 / 2)  # κρP = 1.25
    assert busy_sync_ms(2, 0.5, 1.2, 30.0, node_cores=1.0) == pytest.approx(1.2 / 2)  # κρP = 0.02
    assert busy_sync_ms(1, 1.0, 1.2, 30.0, node_cores=1.0) == 0.0  # one rank: no other rank's burst
    assert overflow_ms(4, 2.0, 12.0) < overflow_ms(8, 2.0, 12.0) < overflow_ms(16, 2.0, 12.0)
    assert overflow_ms(32, 2.0, 12.0) == pytest.approx(2 * overflow_ms(32, 2.0, 6.0))  # linear in P


def test_the_real_step_is_the_fixed_point_of_a_busy_share_that_falls_as_it_grows():
    from pipeprof.analysis.predict import fixed_point

    # t = 10 + 24 / t: t² − 10 t − 24 = 0, t = 12
    assert fixed_point(lambda t: 10 + 24 / t) == pytest.approx(12.0, rel=1e-12)
    assert fixed_point(lambda t: 7.5) == 7.5  # nothing depends on the step
    # two ranks on a node of one core (half a core each; the one-core κ 0.25 and its floor of
    # half a 4 ms turn): 24 CPU-ms of pipeline per step keep the core busy ρ = 24 / (0.5 t) of
    # the real step t; the CPU bound, 2 × (24 + 2) = 52 ms, is under the device's 100. The
    # hops' wait 0.25 × 48 / t × 24 = 288 / t beats the floor's 2: t² − 100 t − 288 = 0
    src = source(pipeline_core_ms_per_sample=0.75)
    (p,) = predict(src, Target(gpus_per_node=2, cores_per_node=1.0), [2])
    t = (100 + math.sqrt(100**2 + 4 * 288)) / 2  # 102.80
    assert p.cores_per_rank == 0.5 and p.input_cpu_ms == pytest.approx(52.0)
    assert p.real_step_ms == pytest.approx(t) and p.contention_ms == pytest.approx(t - 100)
    assert p.gap_pct == pytest.approx(100 * (1 - 100 / t))


def test_a_measured_ceiling_sets_sync_and_the_overflow_adds_to_it():
    src = source(
        pipeline_core_ms_per_sample=0.0, pipeline_cpu_ms=12.8, device_ms=100.0, gradient_bytes=0.0
    )
    tgt = Target(
        gpus_per_node=32, cores_per_node=2.0, ceiling={8: Ceiling(step_ms=122.8, busy=0.204)}
    )
    p8, p4 = predict(src, tgt, [8, 4])
    assert p8.sync_measured and not p4.sync_measured
    assert p8.synth_step_ms == pytest.approx(122.8) and p8.allreduce_ms == pytest.approx(22.8)
    # 8 pipelines × 12.8 ms on 2 cores: 6 overflow and drain in 38.4 ms, which the slowest rank waits
    assert p8.contention_ms == pytest.approx(38.4)
    assert p8.real_step_ms == pytest.approx(100.0 + 38.4 + 22.8)
    assert p8.gap_pct == pytest.approx(100 * (1 - 122.8 / 161.2))
    assert p8.busy_real == pytest.approx(0.204 + 8 * 12.8 / (2 * 161.2))
    assert p8.dominant == "contention" and p8.gap_cause == "contention"
    # the np=1 extra H reproduces the source run at np=1; at N it is a floor (batches came every
    # 102.6 ms), which the 38.4 ms of overflow hides
    handoff = source(
        pipeline_core_ms_per_sample=0.0, pipeline_cpu_ms=12.8, real_handoff_ms=2.6, source_busy=0.07
    )
    h1, h8 = predict(handoff, Target(gpus_per_node=32, cores_per_node=2.0), [1, 8])
    assert h1.real_step_ms == pytest.approx(100.0 + 2.6, abs=0.1)
    assert h8.real_step_ms == pytest.approx(100.0 + 38.4) and h8.contention_ms == pytest.approx(
        38.4
    )
    # storage read at a set rate per rank: 40 ms beyond the device's 100 at np=1, and at np=2
    # on 2 cores with a light pipeline (1.6 CPU-ms: κ × ρ × P = 0.45 × 1.6 / 140 × 1.6 ≈ 0.01
    # ms) the batches still come every 140 ms: the floor sets the step, no contention on top
    slow_read = source(
        pipeline_core_ms_per_sample=0.0, pipeline_cpu_ms=1.6, real_handoff_ms=40.0, source_busy=0.1
    )
    (r2,) = predict(slow_read, Target(gpus_per_node=2, cores_per_node=2.0), [2])
    assert r2.real_step_ms == pytest.approx(140.0) and r2.contention_ms == 0.0
    assert r2.gap_pct == pytest.approx(100 * (1 - 100 / 140))
    # a measured synthetic step at N already holds the lone rank's cycle wait that H is
    h8c = predict(dataclasses.replace(src, real_handoff_ms=2.6, source_busy=0.07), tgt, [8])[0]
    assert h8c.real_step_ms == pytest.approx(
        p8.real_step_ms
    ) and h8c.contention_ms == pytest.approx(p8.contention_ms)
    # the same pipelines with 8 cores per rank: nothing overflows; each keeps its cores busy
    # ρ = 12.8 / (8 × (122.8 + x)) of the real step in bursts of 12.8 / 8 ms, which the hops
    # wait: x = κ × ρ × 1.6, so x² + 122.8 x − κ × 12.8 × 1.6 / 8 = 0
    roomy = predict(
        src, Target(gpus_per_node=8, cores_per_node=64.0, ceiling={8: Ceiling(122.8, 0.01)}), [8]
    )[0]
    x = (-122.8 + math.sqrt(122.8**2 + 4 * 0.45 * 12.8 * 1.6 / 8)) / 2  # 0.00938
    assert roomy.contention_ms == pytest.approx(x) and roomy.real_step_ms == pytest.approx(
        122.8 + x
    )
    assert roomy.gap_pct < 0.01


def test_a_cpu_bound_step_takes_no_overflow_on_top():
    # 32 ranks × (20 + 1.25) CPU-ms on 2 cores: 340 ms of CPU per step outlasts a 30 ms device plus the overflow
    src = source(
        pipeline_core_ms_per_sample=0.0,
        pipeline_cpu_ms=20.0,
        sync_cpu_ms=1.25,
        gradient_bytes=0.0,
        device_ms=30.0,
    )
    (p,) = predict(src, Target(gpus_per_node=32, cores_per_node=2.0), [32])
    assert 30 + overflow_ms(32, 2.0, 20.0) < 340
    assert p.input_cpu_ms == pytest.approx(340) and p.real_step_ms == pytest.approx(340)
    assert p.contention_ms == 0.0 and p.dominant == "input" and p.gap_cause == "input"
    # a 5 ms allreduce does not add to it (30 + 300 + 5 < 340): the pipelines produce through it
    synced = predict(
        dataclasses.replace(src, gradient_bytes=12.5e9 * 0.005 / (2 * 31 / 32)),
        Target(gpus_per_node=32, cores_per_node=2.0, network_gbps=100.0),
        [32],
    )[0]
    assert synced.allreduce_ms == pytest.approx(5.0) and synced.real_step_ms == pytest.approx(340)


def test_the_overflow_and_the_straggler_tail_are_one_delay():
    # a noisy np=1 real step: its tail at N and the overflow both name the slowest rank; the larger counts
    jit = tuple(np.random.default_rng(3).normal(1.0, 0.1, 5000).clip(0.5))
    src = source(
        pipeline_core_ms_per_sample=0.0, pipeline_cpu_ms=8.0, real_jitter=jit, gradient_bytes=0.0
    )
    tail = expected_max(np.array(jit), 8) * 100.0
    small, large = (
        predict(src, Target(gpus_per_node=8, cores_per_node=c), [8])[0] for c in (6.0, 2.0)
    )
    assert overflow_ms(8, 6.0, 8.0) < tail - 100 < overflow_ms(8, 2.0, 8.0)
    assert small.real_step_ms == pytest.approx(tail) and small.contention_ms == 0.0
    assert large.real_step_ms == pytest.approx(100 + 24.0) and large.contention_ms == pytest.approx(
        124.0 - tail
    )


def measured(**kw):
    from pipeprof.analysis.predict import SourceRun

    base = dict(
        batch_per_rank=32,
        synth_steps_ms=(100.0,) * 4,
        real_steps_ms=(104.0,) * 4,
        cores=2.0,
        busy=0.5,
        loop_cpu_ms=4.0,
        pipeline_cpu_ms=40.0,
        pipeline_core_ms_per_sample=1.5,
        model_on_cpu=False,
    )
    return SourceRun(**{**base, **kw})


def test_an_uncrowded_source_travels_whole():
    from pipeprof.analysis.predict import transfer

    src, removed = transfer(measured(real_steps_ms=(100.0, 108.0)))
    assert (
        not removed.crowded
        and removed.contention_ms == 0.0
        and removed.pipeline_from == "telemetry"
    )
    assert src.pipeline_ms_per_step == 40.0 and src.sync_cpu_ms == 4.0
    assert src.real_handoff_ms == pytest.approx(4.0)  # 104 beyond max(100, (4 + 40) / 2)
    assert src.real_jitter == pytest.approx((100 / 104, 108 / 104))


def test_an_uncrowded_source_whose_steps_took_more_cpu_than_its_stages_takes_the_stages():
    from pipeprof.analysis.predict import transfer

    # the suite's val-spin-650 at np=1 (kept run, 2026-11-26): 44.8 CPU-ms a real step
    # beyond the loop's, its stages alone 32 × 0.769 = 24.6, the host 66% busy
    src, removed = transfer(
        measured(busy=0.66, pipeline_cpu_ms=44.8, pipeline_core_ms_per_sample=0.769)
    )
    assert src.pipeline_ms_per_step == pytest.approx(24.6, abs=0.01)
    assert removed.pipeline_from == "stages" and removed.pipeline_telemetry_ms == 44.8
    assert not removed.crowded and removed.contention_ms == 0.0
    # the smaller figure wins either way: 2 CPU-ms a step against stages of 32 × 0.1
    src, removed = transfer(measured(pipeline_cpu_ms=2.0, pipeline_core_ms_per_sample=0.1))
    assert src.pipeline_ms_per_step == 2.0 and removed.pipeline_from == "telemetry"
    assert removed.pipeline_telemetry_ms is None


def test_a_crowded_cpu_trained_source_leaves_its_contention_and_its_model_behind():
    """The photo-crop case: the model on the source's 2 cores, 96% busy; the target has an accelerator."""
    from pipeprof.analysis.predict import transfer

    run = measured(
        synth_steps_ms=(148.0,) * 4,
        real_steps_ms=(186.0,) * 4,
        busy=0.96,
        loop_cpu_ms=287.5,
        pipeline_cpu_ms=1.4,
        pipeline_core_ms_per_sample=1.875,
        model_on_cpu=True,
    )
    src, removed = transfer(run, target_step_ms=65.0)
    # saturated cores: the telemetry's 1.4 CPU-ms is what the pipeline displaced; its stages alone cost 32 × 1.875
    assert (
        removed.crowded
        and removed.pipeline_from == "stages"
        and removed.pipeline_telemetry_ms == 1.4
    )
    assert src.pipeline_ms_per_step == pytest.approx(60.0)
    # the CPU bound on the source: (287.5 + 60) / 2 = 173.75; the real step's 186 beyond it is contention
    assert removed.contention_ms == pytest.approx(186.0 - 173.75) and src.real_handoff_ms == 0.0
    assert removed.model_cpu_ms == 287.5 and src.sync_cpu_ms == 0.0
    (one,) = predict(src, Target(gpus_per_node=8, cores_per_node=64, step_ms=65.0), [1])
    assert one.real_step_ms == pytest.approx(65.0) and one.gap_pct == pytest.approx(0.0)
    # without the step on the target, the model's CPU is the target's too: it stays in the loop
    assert transfer(run)[0].sync_cpu_ms == 287.5


def test_the_stragglers_lose_the_share_of_spread_the_contention_took():
    from pipeprof.analysis.predict import transfer

    # synthetic steps of 100 ms; real steps of 110 and 130 (mean 120) on a crowded source whose
    # CPU bound is (20 + 200) / 2 = 110: 10 of the 20 ms excess is contention, so half the spread goes
    run = measured(
        real_steps_ms=(130.0, 110.0),
        busy=0.95,
        loop_cpu_ms=20.0,
        pipeline_cpu_ms=None,
        pipeline_core_ms_per_sample=200 / 32,
    )
    src, removed = transfer(run)
    assert removed.contention_ms == pytest.approx(10.0) and removed.spread_removed == pytest.approx(
        0.5
    )
    assert src.real_jitter == pytest.approx(
        (115 / 110, 105 / 110)
    )  # 100 + half of (130, 110) − 100
    # all of the excess is contention where the bound sits below the synthetic step
    src, removed = transfer(measured(real_steps_ms=(130.0, 110.0), busy=0.95, pipeline_cpu_ms=None))
    assert removed.contention_ms == pytest.approx(20.0) and src.real_jitter == pytest.approx(
        (1.0, 1.0)
    )


def test_the_crowded_note_says_what_was_removed_and_how_much():
    from pipeprof.analysis.predict import transfer
    from pipeprof.workflows.predict import crowded_note

    run = measured(
        synth_steps_ms=(148.0,) * 4,
        real_steps_ms=(186.0,) * 4,
        busy=0.96,
        loop_cpu_ms=287.5,
        pipeline_cpu_ms=1.4,
        pipeline_core_ms_per_sample=1.875,
        model_on_cpu=True,
    )
    src, removed = transfer(run, target_step_ms=65.0)
    note = crowded_note(removed, src)
    assert "96% busy" in note and "removed 12.2 ms of contention" in note
    assert (
        "stages measured alone, 60.0 CPU-ms per step" in note and "telemetry's 1.4 CPU-ms" in note
    )
    assert "model's 287.5 CPU-ms per step stay on the source" in note


def test_the_pipelines_cpu_is_its_measured_steps_beyond_the_loops():
    import pandas as pd

    from pipeprof.workflows.predict import cpu_per_step

    def step(variant, cpu, *, paired="", round_=-1, warmup=False):  # noqa: PLR0913
        return {
            "np": 1,
            "variant": variant,
            "paired": paired,
            "round": round_,
            "warmup": warmup,
            "cpu_ms": cpu,
        }

    # the ceiling's own run: the loop costs 2 CPU-ms a step (its warm-up is not counted)
    rows = [step("synthetic", 9.0, warmup=True)] + [step("synthetic", 2.0) for _ in range(4)]
    # two rounds: the twin's steps (the pipeline stocking batches: 12 CPU-ms) and the real
    # ones, whose settle step flushed the stock (40) and whose measured steps take 32
    for r in range(2):
        rows += [step("synthetic", 12.0, paired="real", round_=r, warmup=True)]
        rows += [step("synthetic", 12.0, paired="real", round_=r)]
        rows += [step("real", 40.0, round_=r, warmup=True), step("real", 32.0, round_=r)]
    loop, pipeline = cpu_per_step(pd.DataFrame(rows), "real")
    # a batch a measured real step: 32 − 2 = 30 CPU-ms of pipeline a batch
    assert loop == 2.0 and pipeline == 30.0
    # measured alone (no rounds): its own measured steps, less the loop's
    alone = (
        [step("synthetic", 2.0)] * 3 + [step("real", 17.0, warmup=True)] + [step("real", 12.0)] * 3
    )
    assert cpu_per_step(pd.DataFrame(alone), "real") == (2.0, 10.0)
    # steps without their CPU (older runs): the caller falls back on the telemetry
    assert all(
        math.isnan(v) for v in cpu_per_step(pd.DataFrame(rows).assign(cpu_ms=math.nan), "real")
    )
