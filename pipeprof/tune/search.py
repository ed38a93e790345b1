"""Coordinate descent over the tuning space, under a time budget, then a run-off.

Start from the scenario's settings; sweep one knob at a time over its values with the others
held, keep whatever is better by more than the noise margin, and sweep again until a pass
changes nothing or the budget runs out. Then the best few are measured again for longer
and the winner is the best of that run-off, so one lucky short measurement cannot win.
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
    phase: str = "search"
    error: str = ""


@dataclass
class SearchResult:
    trials: list[Trial] = field(default_factory=list)
    best: Trial | None = None
    stopped_by_budget: bool = False


Evaluate = Callable[[Point, float], dict[str, Any]]  # (point, seconds) -> {"samples_per_s", "cpu_cores_used"} or {"error"}


def coordinate_descent(space: list[Dimension], start: Point, evaluate: Evaluate, *, budget_s: float,
                       trial_s: float = 1.5, margin: float = 0.02, runoff: int = 3, max_passes: int = 3,
                       allowed: Callable[[Point], bool] = lambda p: True,
                       on_trial: Callable[[Trial], None] | None = None,
                       clock: Callable[[], float] = time.monotonic) -> SearchResult:
    result = SearchResult()
    seen: dict[tuple, Trial] = {}
    deadline = clock() + budget_s

    def run(point: Point, seconds: float, phase: str) -> Trial:
        res = evaluate(point, seconds)
        t = Trial(point=dict(point), samples_per_s=float(res.get("samples_per_s", 0.0)),
                  cpu_cores_used=float(res.get("cpu_cores_used", float("nan"))), phase=phase, error=res.get("error", ""))
        result.trials.append(t)
        if on_trial is not None:
            on_trial(t)
        return t

    current = dict(start)
    best = seen[key(current)] = run(current, trial_s, "start")
    for _ in range(max_passes):
        improved = False
        for dim in space:
            for value in dim.values:
                candidate = {**current, dim.name: value}
                if key(candidate) in seen or not allowed(candidate):
                    continue
                if clock() > deadline:
                    result.stopped_by_budget = True
                    break
                t = seen[key(candidate)] = run(candidate, trial_s, "search")
                if not t.error and t.samples_per_s > best.samples_per_s * (1 + margin):
                    best, current, improved = t, candidate, True
            if result.stopped_by_budget:
                break
        if not improved or result.stopped_by_budget:
            break

    # run-off: the best few again, twice as long, in one go
    finalists = sorted((t for t in seen.values() if not t.error), key=lambda t: -t.samples_per_s)[:runoff]
    if len(finalists) > 1:
        again = [run(t.point, 2 * trial_s, "run-off") for t in finalists]
        result.best = max(again, key=lambda t: t.samples_per_s)
    else:
        result.best = finalists[0] if finalists else best
    return result
