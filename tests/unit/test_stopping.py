"""The adaptive stopping rule: when a variant has measured enough, and whether the interval it
stops on is still honest (checked on correlated step times, as real steps are)."""

import math

import numpy as np
import pytest

from pipeprof.analysis import stats, stopping
from pipeprof.analysis.stopping import MIN_STEPS, Rule, evaluate


def ar1(rng, n, mean_ms, sd_ms, phi=0.6):
    """Step times whose neighbours are correlated, as on a real machine (AR(1) noise)."""
    e = rng.normal(0.0, sd_ms * math.sqrt(1 - phi**2), size=n)
    x = np.empty(n)
    x[0] = rng.normal(0.0, sd_ms)
    for i in range(1, n):
        x[i] = phi * x[i - 1] + e[i]
    return np.maximum(1.0, mean_ms + x) / 1e3  # seconds


def samples(n, batch=32):
    return np.full(n, float(batch))


def test_nothing_stops_before_the_minimum_steps_and_seconds():
    rule = Rule(target_ci_pct=2.0, min_s=1.0, max_s=60.0)
    constant = np.full(MIN_STEPS - 1, 0.1)  # a zero-width interval, but too few steps
    check, _ = evaluate(rule, constant, samples(len(constant)), reference=(320.0, 0.0))
    assert not check.stop
    short = np.full(MIN_STEPS, 0.01)  # enough steps, 0.4 s < min_s
    check, _ = evaluate(rule, short, samples(len(short)), reference=(3200.0, 0.0))
    assert not check.stop


def test_a_narrow_gap_interval_stops_on_the_target():
    rule = Rule(target_ci_pct=2.0, min_s=0.0, max_s=60.0)
    t = np.full(60, 0.125)  # 256 samples/s against a ceiling of 320: gap 20% ± 0
    check, _ = evaluate(rule, t, samples(60), reference=(320.0, 0.0))
    assert check.stop and check.reason == stats.STOP_TARGET
    assert check.half_pct == pytest.approx(0.0) and check.target_pct == 2.0
    assert check.steps == 60 and check.seconds == pytest.approx(7.5)


def test_a_variant_measured_alone_is_held_to_its_relative_half_width():
    rule = Rule(target_ci_pct=2.0, min_s=0.0, max_s=600.0)
    rng = np.random.default_rng(0)
    t = ar1(rng, 80, 100.0, 10.0)
    check, _ = evaluate(rule, t, samples(80), reference=None)
    rate, half = stats.rate_interval(samples(80), t)
    assert check.half_pct == pytest.approx(100 * half / rate) and check.target_pct == 2.0
    assert check.stop == (check.half_pct <= check.target_pct)


def test_an_interval_clear_of_the_thresholds_stops_only_when_it_stays_clear():
    rule = Rule(target_ci_pct=0.5, min_s=0.0, max_s=600.0)
    rng = np.random.default_rng(3)
    t = 0.05 / (1 - 0.40) + rng.normal(0, 0.004, size=60)  # gap ≈ 40% ± a few points: clear of 20%
    first, streak = evaluate(rule, t, samples(60), reference=(640.0, 5.0))
    assert not first.stop and streak == 1 and first.half_pct > 0.5
    second, streak = evaluate(rule, t, samples(60), reference=(640.0, 5.0), clear_streak=streak)
    assert second.stop and second.reason == stats.STOP_CLEAR and streak == stopping.CLEAR_CHECKS


def test_an_interval_across_a_threshold_does_not_count_as_clear():
    rule = Rule(target_ci_pct=0.5, min_s=0.0, max_s=600.0)
    rng = np.random.default_rng(4)
    t = 0.05 / (1 - 0.05) + rng.normal(
        0, 0.006, size=60
    )  # gap ≈ 5%: the interval straddles the line
    check, streak = evaluate(rule, t, samples(60), reference=(640.0, 5.0), clear_streak=5)
    assert not check.stop and streak == 0


def test_the_maximum_time_ends_the_measurement_and_says_so():
    rule = Rule(target_ci_pct=0.1, min_s=0.0, max_s=5.0)
    rng = np.random.default_rng(5)
    t = ar1(rng, 60, 100.0, 30.0)  # 6 s of very noisy steps
    check, _ = evaluate(rule, t, samples(60), reference=(330.0, 20.0))
    assert check.stop and check.reason == stats.STOP_MAX_TIME


def test_checks_come_about_once_a_second():
    assert stopping.check_every(0.1) == 10
    assert stopping.check_every(0.001) == 500  # at most 500 steps between checks
    assert stopping.check_every(2.0) == 5  # at least 5
    assert stopping.check_every(0.0) == 10  # no warm-up to size it from


def sequential_run(rng, rule, mean_ms, sd_ms, reference, every=10, limit=20000):
    """Measure as a rank does: check every ``every`` steps until the rule stops."""
    t = np.empty(0)
    streak = 0
    while len(t) < limit:
        t = np.concatenate([t, ar1(rng, every, mean_ms, sd_ms)])  # fresh noise per chunk
        check, streak = evaluate(rule, t, samples(len(t)), reference, streak)
        if check.stop:
            return t, check
    raise AssertionError("the rule never stopped")


def test_the_adaptive_interval_still_covers_the_true_gap():
    """Optional stopping and correlated steps must not make the stopping interval dishonest.

    A ceiling of 640 samples/s (50 ms steps) measured over 400 steps; a real variant at 60 ms
    (true gap 16.7%), measured adaptively. Seeded: the same 300 runs every time."""
    rng = np.random.default_rng(11)
    rule = Rule(target_ci_pct=2.0, min_s=2.0, max_s=120.0)
    true_gap = 100 * (1 - 50.0 / 60.0)
    hits, reasons = 0, []
    for _ in range(300):
        synth_t = ar1(rng, 400, 50.0, 5.0)
        ref = stats.rate_interval(samples(400), synth_t)
        t, check = sequential_run(rng, rule, 60.0, 6.0, ref)
        g, h, _ = stopping.precision(t, samples(len(t)), ref)
        assert h == pytest.approx(check.half_pct)
        hits += abs(g - true_gap) <= h
        reasons.append(check.reason)
    coverage = hits / 300
    print(
        f"adaptive stopping interval coverage: {coverage:.3f}; stops: "
        f"{ {r: reasons.count(r) for r in set(reasons)} }"
    )
    assert coverage >= 0.90


def test_a_change_in_machine_speed_cancels_in_the_paired_gap():
    """Rounds alternate twin and real steps: when the whole machine slows by 30% halfway
    through, the paired gap stays at the truth, where twin-then-real would report 30 points."""
    rounds = 10
    slow = np.where(np.arange(rounds) < rounds // 2, 1.0, 1.3)
    s_sec = 10 * 0.050 * slow  # 10 twin steps of 50 ms per round
    r_sec = 10 * 0.060 * slow  # 10 real steps of 60 ms: true gap 16.7%
    per_round = np.full(rounds, 320.0)
    g, h = stats.paired_gap_interval(per_round, s_sec, per_round, r_sec)
    assert g == pytest.approx(100 * (1 - 50 / 60)) and h == pytest.approx(0.0, abs=1e-9)
    twin_alone, real_alone = 320 * 5 / s_sec[:5].sum(), 320 * 5 / r_sec[5:].sum()  # fast, then slow
    assert (
        100 * (1 - real_alone / twin_alone) > g + 15
    )  # what measuring one after the other reports


def test_paired_rounds_stop_on_the_paired_gap():
    rule = Rule(target_ci_pct=2.0, min_s=0.0, max_s=600.0)
    rounds = 6
    s_sec, r_sec = np.full(rounds, 0.5), np.full(rounds, 0.625)  # gap 20% exactly, every round
    per_round = np.full(rounds, 100.0)
    check, _ = stopping.evaluate_paired(rule, 10 * rounds, per_round, s_sec, per_round, r_sec)
    assert check.stop and check.reason == stats.STOP_TARGET
    assert check.seconds == pytest.approx(rounds * 1.125) and check.steps == 60
    few, _ = stopping.evaluate_paired(rule, MIN_STEPS - 1, per_round, s_sec, per_round, r_sec)
    assert not few.stop


def rounds_alternating(low_pct: float, high_pct: float, rounds: int = 10):
    """Paired rounds whose gaps alternate between ``low_pct`` and ``high_pct``: the twin makes
    100 samples in 1 s each round, the real variant the same 100 in 1 / (1 - gap) s."""
    gaps = np.array([low_pct, high_pct] * (rounds // 2)) / 100.0
    per_round = np.full(rounds, 100.0)
    return per_round, np.ones(rounds), per_round, 1.0 / (1.0 - gaps)


@pytest.mark.parametrize(
    "low, high, gap_pct, half_pct, stops",
    [
        # ten rounds, ten blocks: half = t(9) 2.262 x sd / sqrt(10); the point is the gap of
        # the sums, 1 - 10 / sum(1 / (1 - g))
        (0.5, 3.5, 2.02, 1.13, True),  # 2.0 ±1.1: within the target and clear of 5%: a class
        (2.5, 6.5, 4.54, 1.51, False),  # 4.5 ±1.5: within the target, but across 5%: measure on
        (3.5, 5.5, 4.51, 0.75, True),  # 4.5 ±0.75: across 5% at half the target: on the line
    ],
)
def test_an_interval_across_a_line_at_the_target_width_measures_on(
    low, high, gap_pct, half_pct, stops
):
    rule = Rule(target_ci_pct=2.0, min_s=0.0, max_s=600.0)
    rounds = rounds_alternating(low, high)
    check, _ = stopping.evaluate_paired(rule, 100, *rounds)
    assert check.half_pct == pytest.approx(half_pct, abs=0.01)
    assert check.stop == stops
    assert check.reason == (stats.STOP_TARGET if stops else "")
    point, _ = stats.paired_gap_interval(*rounds)
    assert point == pytest.approx(gap_pct, abs=0.01)
