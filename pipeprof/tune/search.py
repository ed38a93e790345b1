"""Coordinate descent over the tuning space, under a time budget, then a run-off.

Start from the scenario's settings; sweep one knob at a time over its values with the others
held, keep whatever is better by more than the noise margin, and sweep again until a pass
changes nothing or the budget runs out. Then the best few are measured again in alternating
rounds and the winner is the best mean of that run-off, so neither one lucky short
measurement nor a fast spell of the machine can win.

Each trial measures at least half a trial length and at most one: it stops early once its
rate is known well enough to rank it (a 95% interval within ``margin``/2 of the rate) or once
it cannot beat the incumbent by ``margin`` (it loses early). The machine's speed drifts by more than the margin over tens of seconds, so the
incumbent is measured again before a sweep when its figure has grown old: candidates are
held to a figure taken in the same spell.
"""

from __future__ import annotations

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
    phase: str = "search"  # start | recheck | search | run-off
    error: str = ""
    seconds: float = float("nan")
    half_pct: float = float("nan")  # the rate's 95% half-width, % of the rate
    stop: str = ""  # how the measurement ended: fixed | target | lost | max_time


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


Evaluate = Callable[[Point, Window], dict[str, Any]]  # -> {"samples_per_s", "cpu_cores_used", ...} or {"error"}

RECHECK_TRIALS = 3  # the incumbent's figure is re-measured once this many trial lengths old
RUNOFF_ROUNDS = 2


def coordinate_descent(space: list[Dimension], start: Point, evaluate: Evaluate, *, budget_s: float,
                       trial_s: float = 1.5, margin: float = 0.02, runoff: int = 3, max_passes: int = 3,
                       allowed: Callable[[Point], bool] = lambda p: True,
                       on_trial: Callable[[Trial], None] | None = None,
                       clock: Callable[[], float] = time.monotonic) -> SearchResult:
    result = SearchResult()
    seen: dict[tuple, Trial] = {}
    deadline = clock() + budget_s
    target = 100 * margin / 2

    def run(point: Point, window: Window, phase: str) -> Trial:
        res = evaluate(point, window)
        t = Trial(point=dict(point), samples_per_s=float(res.get("samples_per_s", 0.0)),
                  cpu_cores_used=float(res.get("cpu_cores_used", float("nan"))), phase=phase, error=res.get("error", ""),
                  seconds=float(res.get("seconds", float("nan"))), half_pct=float(res.get("half_pct", float("nan"))),
                  stop=str(res.get("stop", "")))
        result.trials.append(t)
        if on_trial is not None:
            on_trial(t)
        return t

    def adaptive(beat: float | None = None) -> Window:  # never longer than a fixed trial
        return Window(0.5 * trial_s, trial_s, target, beat)

    current = dict(start)
    best = seen[key(current)] = run(current, adaptive(), "start")
    measured_at = clock()
    for _ in range(max_passes):
        improved = False
        for dim in space:
            todo = [{**current, dim.name: v} for v in dim.values]
            todo = [c for c in todo if key(c) not in seen and allowed(c)]
            if not todo:
                continue
            if clock() > deadline:
                result.stopped_by_budget = True
                break
            if not best.error and clock() - measured_at > RECHECK_TRIALS * trial_s:
                best = seen[key(current)] = run(current, adaptive(), "recheck")
                measured_at = clock()
            for candidate in todo:
                if clock() > deadline:
                    result.stopped_by_budget = True
                    break
                bar = best.samples_per_s * (1 + margin) if not best.error else None
                t = seen[key(candidate)] = run(candidate, adaptive(bar), "search")
                if not t.error and (bar is None or t.samples_per_s > bar):
                    best, current, improved = t, candidate, True
                    measured_at = clock()
            if result.stopped_by_budget:
                break
        if not improved or result.stopped_by_budget:
            break

    # run-off: the best few again, in alternating rounds of equal length; the best mean wins
    # (the search's own winner always among them: the others' figures may come from a faster spell)
    others = sorted((t for k, t in seen.items() if not t.error and k != key(current)), key=lambda t: -t.samples_per_s)
    finalists = ([best] if not best.error else []) + others[:runoff - (0 if best.error else 1)]
    if len(finalists) > 1:
        rounds = [[run(t.point, Window(trial_s, trial_s), "run-off") for t in finalists] for _ in range(RUNOFF_ROUNDS)]
        means = [sum(r[i].samples_per_s for r in rounds) / len(rounds) for i in range(len(finalists))]
        i = max(range(len(finalists)), key=lambda j: means[j])
        last = rounds[-1][i]
        result.best = Trial(point=last.point, samples_per_s=means[i], cpu_cores_used=last.cpu_cores_used,
                            phase="run-off", seconds=sum(r[i].seconds for r in rounds), stop="fixed")
    else:
        result.best = finalists[0] if finalists else best
    return result
