"""Which step comes next while one variant is measured, and when it has measured enough.

A variant's steps: warm-up, then measured steps, either a fixed number or until
``analysis.stopping`` says the interval is narrow enough. A real variant measured adaptively
once its synthetic twin ran at this np alternates with the twin in rounds: ``SETTLE_STEPS``
+ ``every`` twin steps, then as many of its own, the first ``SETTLE_STEPS`` of each half not
measured (the real pipeline refills its buffers during the twin's first steps and its first
steps drain them).

The plan is driven from outside: ``next_step()`` says what the next step is (its source, the
variant and round to record it under, whether it is warm-up); the caller runs it and hands
its time to ``finish_step(ms)``. pipeprof's own training loop (``rank.measure``) and a user's
``model.fit`` (``pipeprof.keras``) drive the same plan, so both measure the same way.

Pure: no TensorFlow. ``average(values)`` is an allreduce over ranks, called at the same step
on every rank, so all ranks make the same decisions and stop at the same step.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import numpy

from pipeprof.analysis import stopping
from pipeprof.analysis.stats import STOP_FIXED

# After each switch between a real variant and its twin, this many steps are not measured.
SETTLE_STEPS = 2
OWN, TWIN = "own", "twin"


@dataclass(frozen=True)
class Step:
    source: str  # OWN: the variant's batches; TWIN: the synthetic twin's
    variant: str  # what the record says: the variant, or "synthetic" for a twin step
    paired: str  # on a twin step: the real variant it alternates with; "" otherwise
    warmup: bool  # not measured
    index: int  # counts every step of the variant, the twin's included
    round: int  # the round of an alternating measurement; -1 otherwise


class Plan:
    """One variant's measurement on one rank (see the module's docstring)."""

    def __init__(
        self,
        variant: str,
        *,
        warmup_steps: int,
        measure_steps: int,
        rule: stopping.Rule,
        np: int,
        per_worker_batch: int,
        average: Callable[[list[float]], numpy.ndarray] | None = None,
        paired: bool = False,
    ) -> None:
        self.variant = variant
        self.warmup = warmup_steps
        self.fixed = measure_steps
        self.rule = rule
        self.average = average
        self.paired = paired and measure_steps == 0
        self.batch = float(per_worker_batch * np)
        self.finished = False
        self.stop_reason = ""
        self.half_pct = math.nan
        self.seconds: float | None = None  # None: the caller sums its own measured steps
        self.last_check: stopping.Check | None = None
        self._index = 0
        self._warm_times: list[float] = []
        self._every = 0
        self._streak = 0
        self._chunk: list[float] = []  # measured times of the chunk (or round half) under way
        self._halves: list[list[float]] = []
        self._agreed: list[float] = []  # measured step seconds, averaged over ranks
        self._rounds: list[tuple[float, float]] = []
        self._round = 0
        self._pos = 0  # position within the current round: twin half first, then the own half
        if not self.fixed and self.warmup == 0:
            self._start_measuring()

    @property
    def total_steps(self) -> int:
        """The steps a fixed plan takes (0 when adaptive)."""
        return self.warmup + self.fixed if self.fixed else 0

    def next_step(self) -> Step:
        i = self._index
        if self.fixed or i < self.warmup or not self.paired:
            return Step(OWN, self.variant, "", i < self.warmup, i, -1)
        half = SETTLE_STEPS + self._every
        twin = self._pos < half
        settle = (self._pos % half) < SETTLE_STEPS
        return Step(
            TWIN if twin else OWN,
            "synthetic" if twin else self.variant,
            self.variant if twin else "",
            settle,
            i,
            self._round,
        )

    def finish_step(self, step_ms: float) -> stopping.Check | None:
        """Take the time of the step ``next_step`` announced; returns the check made after it, if one was."""
        step = self.next_step()
        self._index += 1
        if self.fixed:
            if self._index >= self.total_steps:
                self._finish(STOP_FIXED, math.nan, None)
            return None
        if step.warmup and step.round < 0:
            self._warm_times.append(step_ms)
            if self._index == self.warmup:
                self._start_measuring()
            return None
        if not self.paired:
            self._chunk.append(step_ms)
            if len(self._chunk) < self._every:
                return None
            self._agreed += [float(v) for v in self._avg(self._chunk)]
            self._chunk = []
            seconds = numpy.asarray(self._agreed) / 1e3
            check, self._streak = stopping.evaluate(
                self.rule, seconds, numpy.full(len(seconds), self.batch), None, self._streak
            )
            return self._checked(check)
        if not step.warmup:
            self._chunk.append(step_ms)
        self._pos += 1
        if self._pos == SETTLE_STEPS + self._every:  # the twin half is done
            self._halves, self._chunk = [self._chunk], []
            return None
        if self._pos < 2 * (SETTLE_STEPS + self._every):
            return None
        twin, own = self._halves[0], self._chunk
        agreed = self._avg(twin + own) / 1e3
        self._rounds.append(
            (float(agreed[: self._every].sum()), float(agreed[self._every :].sum()))
        )
        self._chunk, self._halves, self._pos = [], [], 0
        self._round += 1
        s_sec, r_sec = (numpy.array(col) for col in zip(*self._rounds))
        per_round = numpy.full(len(self._rounds), self.batch * self._every)
        check, self._streak = stopping.evaluate_paired(
            self.rule,
            self._every * len(self._rounds),
            per_round,
            s_sec,
            per_round,
            r_sec,
            self._streak,
        )
        return self._checked(check)

    def _start_measuring(self) -> None:
        # every rank sizes its checks from the same typical warm-up step
        typical = statistics.median(self._warm_times[1:] or self._warm_times or [0.0])
        self._every = stopping.check_every(float(self._avg([typical])[0]) / 1e3)

    def _avg(self, values: list[float]) -> numpy.ndarray:
        return numpy.asarray(
            self.average(values) if self.average is not None else values, dtype=float
        )

    def _checked(self, check: stopping.Check) -> stopping.Check:
        self.last_check = check
        if check.stop:
            self._finish(check.reason, check.half_pct, check.seconds)
        return check

    def _finish(self, reason: str, half_pct: float, seconds: float | None) -> None:
        self.finished, self.stop_reason, self.half_pct, self.seconds = (
            True,
            reason,
            half_pct,
            seconds,
        )
