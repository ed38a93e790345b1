"""When a variant has measured enough: the adaptive stopping rule.

A real variant measures in rounds that alternate with its synthetic twin (a stretch of twin
steps, then a stretch of real steps), so that a change in the machine's speed moves both
sides of a round alike and cancels in the gap. It stops when the 95% interval of that
paired gap is narrow enough to act on: a half-width of at most ``target_ci_pct`` points with
the interval clear of every verdict threshold (5% and 20%), or an interval clear of them at
two checks in a row, whatever its width. An interval that reaches the target width while it
still spans a threshold has not decided the verdict's class: it measures on, until it is
clear, or down to half the target (then the gap truly sits on the line, and the verdict says
so), or out of time. A variant measured alone (the twin itself, or a real variant with no twin
at this np) stops when its throughput's relative half-width is at most ``target_ci_pct`` %.
Never before ``min_s`` seconds and ``MIN_STEPS`` steps (batch means need blocks of several
steps to absorb the correlation between neighbouring steps); never after ``max_s``.

Pure and deterministic: every rank evaluates it on the same numbers (step times averaged
over ranks by one allreduce per check), so all ranks stop at the same step without a
further message.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pipeprof.analysis.stats import (
    STOP_CLEAR,
    STOP_MAX_TIME,
    STOP_TARGET,
    VERDICT_THRESHOLDS_PCT,
    gap,
    paired_gap_interval,
    rate_interval,
)

MIN_STEPS = 40  # 10 blocks of at least 4 steps
CHECK_INTERVAL_S = 1.0  # how often ranks agree on whether to stop
CLEAR_CHECKS = 2  # an interval clear of the thresholds must stay clear this many checks
ON_A_LINE = 0.5  # an interval across a threshold stops at this fraction of the target width


@dataclass(frozen=True)
class Rule:
    target_ci_pct: float = 2.0
    min_s: float = 10.0
    max_s: float = 60.0


@dataclass(frozen=True)
class Check:
    stop: bool
    reason: str  # STOP_TARGET, STOP_CLEAR or STOP_MAX_TIME when stop; "" otherwise
    half_pct: float  # the gap's half-width (points), or the throughput's relative half-width (%)
    target_pct: float  # what half_pct is held to
    steps: int
    seconds: float


def check_every(warmup_step_s: float) -> int:
    """Steps between two checks, from a typical warm-up step (the same on every rank)."""
    if not warmup_step_s > 0:
        return 10
    return int(min(500, max(5, round(CHECK_INTERVAL_S / warmup_step_s))))


def precision(
    step_s: npt.NDArray[np.float64],
    samples: npt.NDArray[np.float64],
    reference: tuple[float, float] | None,
) -> tuple[float, float, float]:
    """(point, half-width, what the rule holds): the gap against ``reference`` (rate,
    half) in points, or, without a reference, the throughput's relative half-width in %."""
    rate, half = rate_interval(samples, step_s)
    if reference is None:
        return 100.0 * rate, 100.0 * half / rate if rate > 0 else math.nan, math.nan
    g, h = gap(rate, half, reference[0], reference[1])
    return g, h, g


def evaluate(
    rule: Rule,
    step_s: npt.NDArray[np.float64],
    samples: npt.NDArray[np.float64],
    reference: tuple[float, float] | None,
    clear_streak: int = 0,
) -> tuple[Check, int]:
    """Whether to stop after the steps so far; returns the check and the new clear streak."""
    g, half, _ = precision(step_s, samples, reference)
    return _decide(
        rule,
        g if reference is not None else None,
        half,
        rule.target_ci_pct,
        len(step_s),
        float(step_s.sum()),
        clear_streak,
    )


def evaluate_paired(
    rule: Rule,
    steps: int,
    s_samples: npt.NDArray[np.float64],
    s_seconds: npt.NDArray[np.float64],
    r_samples: npt.NDArray[np.float64],
    r_seconds: npt.NDArray[np.float64],
    clear_streak: int = 0,
) -> tuple[Check, int]:
    """The same rule for a real variant measured in rounds alternating with its twin (one
    value per round); ``steps`` counts the real variant's measured steps. Its seconds are
    both halves': what the measurement cost."""
    g, half = paired_gap_interval(s_samples, s_seconds, r_samples, r_seconds)
    return _decide(
        rule,
        g,
        half,
        rule.target_ci_pct,
        steps,
        float(s_seconds.sum() + r_seconds.sum()),
        clear_streak,
    )


def _decide(
    rule: Rule,
    gap_pct: float | None,
    half: float,
    target: float,
    n: int,
    seconds: float,
    streak: int,
) -> tuple[Check, int]:
    clear = (
        gap_pct is not None
        and not math.isnan(half)
        and not any(gap_pct - half < b < gap_pct + half for b in VERDICT_THRESHOLDS_PCT)
    )
    streak = streak + 1 if clear else 0

    def result(stop: bool, reason: str = "") -> tuple[Check, int]:
        return Check(stop, reason, half, target, n, seconds), streak

    if seconds >= rule.max_s:
        return result(True, STOP_MAX_TIME)
    if n < MIN_STEPS or seconds < rule.min_s or math.isnan(half):
        return result(False)
    if half <= target and (clear or gap_pct is None or half <= ON_A_LINE * target):
        return result(True, STOP_TARGET)
    if streak >= CLEAR_CHECKS:
        return result(True, STOP_CLEAR)
    return result(False)
