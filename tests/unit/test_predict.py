"""The predictor's terms against closed forms."""

import math

import numpy as np
import pytest

from pipeprof.analysis.predict import Source, Target, expected_max, predict


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
    assert expected_max(np.array([1.0, 3.0]), 2) == pytest.approx(0.25 * 1 + 0.75 * 3)  # P(max=3) = 1 - 1/4


def source(**kw):
    base = dict(batch_per_rank=32, device_ms=100.0, sync_cpu_ms=2.0, pipeline_core_ms_per_sample=1.0,
                gradient_bytes=100e6, bytes_per_sample=110_000.0, synth_jitter=(1.0,), real_jitter=(1.0,))
    return Source(**{**base, **kw})


def test_input_bound_appears_when_cores_per_rank_shrink():
    # 32 samples × 1 core-ms + 2 ms = 34 core-ms per step; the device takes 100 ms
    preds = {p.np: p for p in predict(source(), Target(gpus_per_node=8, cores_per_node=2.0), [1, 8])}
    assert preds[1].gap_pct == pytest.approx(0.0) and preds[1].dominant == "compute"
    p8 = preds[8]  # 8 ranks share 2 cores: 0.25 core each → 136 ms of CPU per step
    assert p8.input_cpu_ms == pytest.approx(136.0) and p8.dominant == "input"
    assert p8.gap_pct == pytest.approx(100 * (1 - 100 / 136), abs=0.01)


def test_ring_allreduce_and_storage_terms():
    tgt = Target(gpus_per_node=8, cores_per_node=64, network_gbps=100.0, storage_mbps=2000.0)
    (p,) = predict(source(), tgt, [32])
    assert p.allreduce_ms == pytest.approx(2 * 31 / 32 * 100e6 / 12.5e9 * 1e3)
    assert p.storage_ms == pytest.approx(32 * 32 * 110_000 / 2e9 * 1e3)


def test_stragglers_grow_with_n_and_cost_the_gap_when_real_steps_are_noisier():
    jit = tuple(np.random.default_rng(2).normal(1.0, 0.2, 5000).clip(0.5))
    src = source(real_jitter=jit, synth_jitter=(1.0,), pipeline_core_ms_per_sample=0.0)
    preds = predict(src, Target(gpus_per_node=8, cores_per_node=64), [1, 4, 32])
    gaps = [p.gap_pct for p in preds]
    assert gaps[0] == pytest.approx(0.0, abs=1.0) and gaps[0] < gaps[1] < gaps[2]
    assert preds[2].dominant == "stragglers"


def test_contention_latency_grows_with_ring_hops_and_shrinks_with_more_cores():
    src = source(pipeline_core_ms_per_sample=0.0, wake_delay_ms=1.5, source_cores_per_rank=2.0)
    p = {x.np: x for x in predict(src, Target(gpus_per_node=32, cores_per_node=2.0), [1, 8])}
    assert p[1].contention_ms == pytest.approx(1.5)  # np=1 reproduces what was measured
    assert p[8].contention_ms == pytest.approx(1.5 * (14 + sum(1 / k for k in range(1, 9))))
    assert p[8].gap_pct > p[1].gap_pct > 0
    roomy = predict(src, Target(gpus_per_node=8, cores_per_node=64.0), [8])[0]  # 8 cores a rank, not 2
    assert roomy.contention_ms == pytest.approx(p[8].contention_ms / 4)
