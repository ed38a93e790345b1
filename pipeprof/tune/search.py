"""Coordinate descent over the tuning space, under a time budget, then a run-off.

Start from the scenario's settings; sweep one knob at a time over its values with the others
held, keep whatever is better by more than the margin, and go on round the knobs until every
one has been swept since the last change, or the budget runs out. Then the best few are
measured again in alternating rounds and the winner is the best mean of that run-off, so
neither one lucky short measurement nor a fast spell of the machine can win.

The machine's speed drifts by more than the margin between trials (here ±10% over tens of
seconds), so candidates are held to a figure of the incumbent from the same spell: it is
measured again before a sweep once three trials old, and again at once when a candidate
looks better, which moves the search only if it still wins. Those repeated measurements of
one setting also say how noisy the machine is, and a move must clear twice that spread (2%
at least): a lucky fast second would otherwise move the search, and each false move costs
another round of sweeps. On a quiet machine the margin stays at 2%; on this development VM
(same-setting trials ±10-17% apart) it rises, and only changes as large as the cache's move it.

Each trial measures at least half a trial length and at most one: it stops early once its
rate is known well enough to rank it (a 95% interval within ``margin``/2 of the rate) or once
it cannot beat the incumbent by ``margin`` (it loses early).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipeprof.tune.space import Dimension, Point, key


@dataclass
class Trial:
    point: Point
    samples_per_s: float
    cpu_cores_used: float = float("nan")
    phase: str = "search"  # start | recheck | search | confirm | run-off
    error: str = ""
    seconds: float = float("nan")
    half_pct: float = float("nan")  # the rate's 95% half-width, % of the rate
    stop: str = ""  # how the measurement ended (analysis.stats.STOP_*: target, lost, max time, ...)


@dataclass(frozen=True)
class Window:
    """How long one trial measures: at least ``min_s``, at most ``max_s``; in between it stops
    once its interval is within ``target_pct`` % or wholly below ``beat`` (samples/s)."""

    min_s: float
    max_s: float
    target_pct: float = 0.0
    beat: float | None = None


@dataclass
class SearchResult:
    trials: list[Trial] = field(default_factory=list)
    best: Trial | None = None
    stopped_by_budget: bool = False
    noise_pct: float = float("nan")  # the spread between two measurements of one setting (RMS, %)
    margin_pct: float = float("nan")  # the margin a move had to clear at the end of the search


Evaluate = Callable[
    [Point, Window], dict[str, Any]
]  # -> {"samples_per_s", "cpu_cores_used", ...} or {"error"}

RECHECK_TRIALS = 3  # the incumbent's figure is re-measured once this many trials old
RUNOFF_ROUNDS = 2
NOISE_FACTOR = 2.0  # a move must beat the incumbent by this many times the measured spread


class Noise:
    """How far two measurements of the same setting land apart on this machine: the RMS of the
    log-ratios between a confirmation of the incumbent and its figure just before, a few trials
    earlier. That is about the spread of a candidate-against-incumbent comparison itself, so a
    margin of twice it keeps noise from moving the search. A decision uses the pairs seen
    before it, not the one its own confirmation adds: the first (the cache's, swept first) is
    held to the plain margin. Rechecks are left out: they follow the machine's slow drift,
    which the confirmation cancels."""

    def __init__(self) -> None:
        self.log_ratios: list[float] = []

    def add(self, before: Trial, after: Trial) -> None:
        if (
            not before.error
            and not after.error
            and before.samples_per_s > 0
            and after.samples_per_s > 0
        ):
            self.log_ratios.append(math.log(after.samples_per_s / before.samples_per_s))

    @property
    def spread(self) -> float:
        if not self.log_ratios:
            return math.nan
        return math.sqrt(sum(x * x for x in self.log_ratios) / len(self.log_ratios))

    def margin(self, floor: float) -> float:
        spread = self.spread
        return floor if math.isnan(spread) else max(floor, NOISE_FACTOR * spread)


def coordinate_descent(
    space: list[Dimension],
    start: Point,
    evaluate: Evaluate,
    *,
    budget_s: float,
    trial_s: float = 1.5,
    margin: float = 0.02,
    runoff: int = 3,
    max_passes: int = 3,
    max_trials: int = 0,
    allowed: Callable[[Point], bool] = lambda p: True,
    on_trial: Callable[[Trial], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> SearchResult:
    result = SearchResult()
    seen: dict[tuple, Trial] = {}
    deadline = clock() + budget_s
    target = 100 * margin / 2

    def spent() -> bool:  # the budget: time, and the search's trial count when one is set
        return clock() > deadline or 0 < max_trials <= len(result.trials)

    def run(point: Point, window: Window, phase: str) -> Trial:
        res = evaluate(point, window)
        t = Trial(
            point=dict(point),
            samples_per_s=float(res.get("samples_per_s", 0.0)),
            cpu_cores_used=float(res.get("cpu_cores_used", float("nan"))),
            phase=phase,
            error=res.get("error", ""),
            seconds=float(res.get("seconds", float("nan"))),
            half_pct=float(res.get("half_pct", float("nan"))),
            stop=str(res.get("stop", "")),
        )
        result.trials.append(t)
        if on_trial is not None:
            on_trial(t)
        return t

    def adaptive(beat: float | None = None) -> Window:  # never longer than a fixed trial
        return Window(0.5 * trial_s, trial_s, target, beat)

    noise = Noise()
    current = dict(start)
    best = seen[key(current)] = run(current, adaptive(), "start")
    measured_at = len(result.trials)  # the trial that last measured the incumbent
    # Sweep the dimensions in turn, round and round, until every one has been swept since the
    # search last moved (one that moved is done: its other values were tried at this point).
    clean, sweeps = 0, 0
    while clean < len(space) and sweeps < max_passes * len(space):
        dim = space[sweeps % len(space)]
        sweeps += 1
        todo = [{**current, dim.name: v} for v in dim.values]
        todo = [c for c in todo if key(c) not in seen and allowed(c)]
        if not todo:
            clean += 1
            continue
        if spent():
            result.stopped_by_budget = True
            break
        if not best.error and len(result.trials) - measured_at >= RECHECK_TRIALS:
            best = seen[key(current)] = run(current, adaptive(), "recheck")
            measured_at = len(result.trials)
        moved = False
        for candidate in todo:
            if spent():
                result.stopped_by_budget = True
                break
            bar = best.samples_per_s * (1 + noise.margin(margin)) if not best.error else None
            t = seen[key(candidate)] = run(candidate, adaptive(bar), "search")
            if t.error or (bar is not None and t.samples_per_s <= bar):
                continue
            if bar is not None and 0 < max_trials <= len(result.trials):
                # no trial left to confirm it: the run-off below measures it beside the incumbent
                result.stopped_by_budget = True
                break
            if bar is not None:
                # It looks better. Measure the incumbent again at once, so both figures come from
                # the same spell of the machine (its speed drifts by more than the margin between
                # trials), and move only if the candidate still wins by the margin.
                ref = run(current, adaptive(), "confirm")
                measured_at = len(result.trials)
                if not ref.error:
                    needed = noise.margin(margin)  # from the evidence before this pair
                    noise.add(best, ref)
                    best = seen[key(current)] = ref
                    if t.samples_per_s <= ref.samples_per_s * (1 + needed):
                        continue
            best, current, moved = t, candidate, True
            measured_at = len(result.trials)
        clean = 0 if moved else clean + 1
        if result.stopped_by_budget:
            break

    result.noise_pct, result.margin_pct = 100 * noise.spread, 100 * noise.margin(margin)
    # run-off: the best few again, in alternating rounds of equal length; the best mean wins
    # (the search's own winner always among them: the others' figures may come from a faster spell)
    others = sorted(
        (t for k, t in seen.items() if not t.error and k != key(current)),
        key=lambda t: -t.samples_per_s,
    )
    finalists = ([best] if not best.error else []) + others[: runoff - (0 if best.error else 1)]
    if len(finalists) > 1:
        rounds = [
            [run(t.point, Window(trial_s, trial_s), "run-off") for t in finalists]
            for _ in range(RUNOFF_ROUNDS)
        ]
        means = [
            sum(r[i].samples_per_s for r in rounds) / len(rounds) for i in range(len(finalists))
        ]
        i = max(range(len(finalists)), key=lambda j: means[j])
        last = rounds[-1][i]
        # the mean's interval from its rounds' own: their half-widths (in samples/s) added in
        # quadrature over the number of rounds, as the mean of independent measurements has
        halves = [r[i].half_pct / 100 * r[i].samples_per_s for r in rounds]
        half = math.sqrt(sum(h * h for h in halves)) / len(rounds)
        result.best = Trial(
            point=last.point,
            samples_per_s=means[i],
            cpu_cores_used=last.cpu_cores_used,
            phase="run-off",
            seconds=sum(r[i].seconds for r in rounds),
            half_pct=100 * half / means[i] if means[i] > 0 else math.nan,
            stop="fixed",
        )
    else:
        result.best = finalists[0] if finalists else best
    return result
