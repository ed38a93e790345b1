"""The timed loop of one variant on one rank, following its measurement plan (``rank.plan``):
warm-up, then measured steps, fixed in number or until ``analysis.stopping`` says the
interval is narrow enough; a real variant measured in rounds alternating with its twin.

Timing: each iteration is ``next(batches)`` (the input wait) followed by Keras's own
``train_step`` and a read of the loss, which waits until the step has really finished on
the device.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pipeprof.analysis import stopping
from pipeprof.rank.identity import identity
from pipeprof.rank.plan import TWIN, Plan
from pipeprof.records import StepRecord
from pipeprof.scenario import TrainConfig


@dataclass
class Measured:
    """One variant's steps on this rank, and how its measurement ended (the same on every rank)."""

    records: list[StepRecord]  # the variant's, and its twin's when measured in alternation
    loss: float
    accuracy: float
    steps: int  # the variant's measured steps (warm-up excluded)
    seconds: float  # the measured steps' time, averaged over ranks (twin's included)
    stop_reason: str
    half_pct: float  # the precision reached (NaN with fixed steps: the summary computes it)
    # in rounds: its stock flushed at every round or the first only, or its iterator made anew
    flush: str = ""
    # what ``keeps_stock`` decided on, averaged over ranks: the first round's two flushes'
    # batches (at its switch to the real steps, at its end) and its real steps' mean wait for
    # a batch as a share of a twin step
    flush_counts: tuple[float, ...] = ()


class Stepper:
    """Timed training steps of one variant, recorded the same way whichever mode measures."""

    def __init__(
        self, step_fn, *, np: int, rank: int, per_worker_batch: int, on_step, learning_rate=None
    ) -> None:
        self.step_fn, self.np, self.rank, self.batch, self.on_step = (
            step_fn,
            np,
            rank,
            per_worker_batch,
            on_step,
        )
        self.learning_rate = learning_rate  # the rate the coming step trains with, if read
        self.host = identity().host
        self.records: list[StepRecord] = []
        self.losses: list[float] = []
        self.accs: list[float] = []
        self.prev_end, self.prev_cpu = time.perf_counter(), time.process_time()

    def step(
        self,
        batches,
        variant: str,
        index: int,
        warmup: bool,
        total: int,
        paired: str = "",
        round_: int = -1,
        step_fn=None,
    ) -> float:
        clock = time.perf_counter
        t0 = clock()
        x, y = next(batches)
        t1 = clock()
        lr = float(self.learning_rate()) if self.learning_rate is not None else math.nan
        logs = (step_fn or self.step_fn)(x, y)
        loss = float(logs["loss"])  # blocks until the step is done on the device
        t2, cpu = clock(), time.process_time()
        # A step runs from the end of the previous one, so the bookkeeping between steps
        # (records, progress, telemetry, checks) is counted and measured steps add up to wall time.
        step_ms, self.prev_end = (t2 - self.prev_end) * 1e3, t2
        cpu_ms, self.prev_cpu = (cpu - self.prev_cpu) * 1e3, cpu
        if not paired:
            self.losses.append(loss)
            self.accs.append(float(logs.get("accuracy", float("nan"))))
        record = StepRecord(
            np=self.np,
            variant=variant,
            rank=self.rank,
            step=index,
            warmup=warmup,
            input_wait_ms=(t1 - t0) * 1e3,
            step_time_ms=step_ms,
            batch_size=self.batch,
            end_unix_s=time.time(),
            paired=paired,
            round=round_,
            cpu_ms=cpu_ms,
            host=self.host,
            learning_rate=lr,
        )
        self.records.append(record)
        if self.on_step is not None:
            self.on_step(record, total)
        return step_ms

    def measured(
        self, warmup: int, stop_reason: str, half_pct: float, seconds: float | None = None
    ) -> Measured:
        losses, accs = self.losses[warmup:] or self.losses, self.accs[warmup:] or self.accs
        own = [r for r in self.records if not r.warmup and not r.paired]
        if seconds is None:
            seconds = sum(r.step_time_ms for r in own) / 1e3
        return Measured(
            self.records,
            sum(losses) / len(losses),
            sum(accs) / len(accs),
            len(own),
            seconds,
            stop_reason,
            half_pct,
        )


FLUSH_MAX_BATCHES = 256  # a flush takes at most this many batches
# and at most this many twin steps' time, or FLUSH_STOCK_S a batch of FLUSH_MAX_BATCHES if
# longer: a stocked batch comes in 0.1-0.3 ms, and a step of a few ms must not cut a stock of a
# hundred short (autotune grows it: below)
FLUSH_MAX_STEPS, FLUSH_STOCK_S = 2.0, 1e-3
FLUSH_FRESH = 0.25  # a batch that takes this share of a twin step to come is made, not stocked
# or this many times the quickest batch taken before it, and at least FLUSH_JUMP_MIN_S: a batch
# from the stock comes in about 0.1 ms, one being made takes its pipeline's time
FLUSH_JUMP, FLUSH_JUMP_MIN_S = 8.0, 1e-3


def flush(batches, twin_step_s: float) -> int:
    """Take and drop the batches the pipeline stocked while the twin's steps ran; return how many.

    A pipeline the model does not hold back through the twin's steps (its host has cores to
    spare: an accelerator, an emulated device) fills its buffers (shuffle, prefetch: often ten
    batches and more) meanwhile; real steps served from that stock run at the model's pace, and
    a pipeline up to twice as slow as the model shows no gap at all (a 50% storage-bound gap
    read 6%: docs/validation-archive.md, 2026-11-25, 40b3f71). Taken one after another with no
    step between, stocked batches come at once; the first that takes ``FLUSH_FRESH`` of a twin
    step, or ``FLUSH_JUMP`` times the quickest before it (and ``FLUSH_JUMP_MIN_S``), is being
    made: the stock is gone, and the real steps meet the pipeline as it is in steady state.
    The second rule ends the flush of a pipeline faster than the model, which hides nothing:
    taken flat out for ``FLUSH_MAX_STEPS`` twin steps, its batches keep every core busy and
    its buffers refill during the measured steps, a burst of CPU the pipeline never makes in
    steady state (a spin of true gap 0 read 23.5% at np=2: 2026-11-25, 244216b). The time cap
    is at least ``FLUSH_STOCK_S`` a batch: tf.data's autotuned prefetch doubles its buffer
    after each flush that empties it once it was full, until the twin's half can no longer
    fill it, and two twin steps of 8 ms left most of such a stock to the real steps, which
    then waited 0.3 ms for a batch through a whole half (2026-11-27, b9d4df7)."""
    threshold = FLUSH_FRESH * twin_step_s
    limit = max(FLUSH_MAX_STEPS * twin_step_s, FLUSH_STOCK_S * FLUSH_MAX_BATCHES)
    started, taken, quickest = time.perf_counter(), 0, math.inf
    while taken < FLUSH_MAX_BATCHES and time.perf_counter() - started < limit:
        t0 = time.perf_counter()
        try:
            next(batches)
        except StopIteration:
            break
        took = time.perf_counter() - t0
        taken += 1
        if took >= threshold or (took >= FLUSH_JUMP_MIN_S and took >= FLUSH_JUMP * quickest):
            break
        quickest = min(quickest, took)
    return taken


FLUSH_EVERY, FLUSH_FIRST = "every round", "first round only"  # Measured.flush
FRESH = "a new iterator each round"  # Measured.flush: ``Fresh`` replaced the flushes from round 2


@dataclass(frozen=True)
class Fresh:
    """How ``run_variant`` makes the real iterator of a pipeline slower than its steps anew for
    each round's real half, and drops it at each switch to the twin, so no thread of it runs
    beside the twin's steps, as none does beside a plain loop's synthetic phase
    (``benchmarks/truth/reference.py``). Such a pipeline holds no stock in steady state: a
    new iterator starts from none, as the steps find it in a long run.

    Kept across the rounds, the iterator's threads work through the twin's half: on an
    emulated device (the twin spends no CPU) they fill tf.data's buffers above the batch,
    which the flush does not reach, and the real half takes from that stock. A pipeline two
    to three times slower than its steps then read 27-31 points below its truth in one run of
    three, with intervals up to ±24; made anew, ±1-10.5 (docs/validation-archive.md,
    2026-11-27, 795714f). A pipeline faster than its steps (``keeps_stock``) keeps its
    iterator: in steady state its buffers are full, and made anew it starts empty (one such
    read 13-16 points above its truth made anew, 2-9 kept).

    ``make()``: a new iterator over the variant's pipeline. ``drop(held)``: retire the iterator
    the list ``held`` holds, its only reference (its threads wind down off the training thread).
    ``after``: the real steps the first iterator serves before it is first dropped: a memory
    cache not read to its end is discarded with its iterator, so one is kept until a cached
    pipeline's first epoch is through (the same on every rank, which all decide alike at the
    same step); until then it is flushed at every round as a kept one is."""

    make: Callable[[], Iterator]
    drop: Callable[[list], None]
    after: int = 0


def keeps_stock(after_twin: float, after_real: float, real_wait: float = 0.0) -> bool:
    """Whether a pipeline keeps its stock while the real steps take from it, from two flushes
    of the first round (each rank's counts averaged over the ranks, so all decide alike): the
    one at its switch to the real steps (what the pipeline stocked through the twin's steps)
    and one at its end (what it stocked again through real steps that started from none);
    and from ``real_wait``, the mean wait of those real steps for their batch, as a share of
    a twin step (averaged over the ranks too).

    A pipeline that restocks as much while it is read as while it is not is faster than the
    steps that read it: in steady state its buffers are full, and flushing them at every
    round makes it work harder than it ever does, refilling them during the measured steps.
    And tf.data's autotuned prefetch doubles its buffer each time a flush finds it empty, so
    the refill grows round after round (flushes of 2, 3, 9, 17, then 33 batches at np=4; a
    gap read 19.1% and 28.8% where a plain loop loses 11.7%: docs/validation-archive.md,
    2026-11-27, 18d453e). A pipeline slower than its steps has no stock left at the end of a
    real half (1 batch, the one being made): its flushes go on. So does one that stocked
    nothing through the twin's steps (1: the flush's first batch was being made): then
    neither count can tell, and its flushes drop nothing to refill.

    The counts are a few batches, and a batch half made when a flush starts comes in time to
    count as stocked: by the counts alone, pipelines two to three times slower than their
    steps were judged to keep their stock and read 41-45% where the truth was 52-66%. Their
    first round's real steps waited 44-79% of a twin step for each batch; those of pipelines
    flushed at every round 25-142% (one 11.9%), of those faster than their steps at most 11%,
    mostly 1-3%, the iterator's hand-off (2026-11-27, f2d7c65). The mean, not the median: at
    np=2 one rank's waits can show in the other's step instead. A real step that waits
    ``FLUSH_FRESH`` of a twin step or more for its batch (the flush's own mark of a batch
    being made, not stocked) has no stock to keep."""
    return after_twin > 1 and after_real >= after_twin and real_wait < FLUSH_FRESH


def run_variant(
    step_fn,
    batches,
    *,
    np: int,
    variant: str,
    rank: int,
    train: TrainConfig,
    per_worker_batch: int,
    on_step=None,
    average=None,
    max_measure_s: float = 0.0,
    twin=None,
    on_check=None,
    twin_step_fn=None,
    replicas: int = 1,
    learning_rate=None,
    fresh: Fresh | None = None,
) -> Measured:
    """Train ``warmup_steps`` steps, then measured steps: exactly ``measure_steps`` when set,
    else until ``analysis.stopping`` says the interval is narrow enough (``rank.plan``).

    ``on_step(record, total)`` runs after each step, outside the timed region (``total`` is
    0 when adaptive). ``average(values)`` averages a list of floats over ranks (an
    allreduce); ``max_measure_s`` replaces ``train.max_measure_s`` when set. When adaptive,
    a real variant given its synthetic ``twin`` (batches) alternates with it in rounds and
    stops on the paired gap; otherwise (the twin itself, or no twin at this np) it stops on
    its own throughput's interval. ``on_check(check)`` sees every adaptive check.
    ``twin_step_fn``: the step the twin's batches train with, when the variant's own differs
    (augmentation inside the step): the gap is then held against the ceiling's own step.
    At each switch from the twin's steps to the variant's, the batches its pipeline stocked
    meanwhile are dropped (``flush``): they would hide its cost; after the first round, only
    for a pipeline that cannot restock while it is read (``keeps_stock``). Given ``fresh``
    (``Fresh``), such a pipeline's iterator is dropped at each switch to the twin from the
    second round on, and made anew at each switch back, with no flush (``batches`` may be
    None: ``fresh.make()`` makes the first; the caller must then hold no other reference to
    it). ``replicas``: how many
    workers this process's steps train (tf.distribute's; each record counts their samples).
    ``learning_rate()``: the optimizer's rate, read before each step where it changes (the
    warm-up ramp) and recorded with it.
    """
    stepper = Stepper(
        step_fn,
        np=np,
        rank=rank,
        per_worker_batch=per_worker_batch * replicas,
        on_step=on_step,
        learning_rate=learning_rate,
    )
    rule = stopping.Rule(
        train.target_ci_pct, train.min_measure_s, max_measure_s or train.max_measure_s
    )
    plan = Plan(
        variant,
        warmup_steps=train.warmup_steps,
        measure_steps=train.measure_steps,
        rule=rule,
        np=np,
        per_worker_batch=per_worker_batch,
        average=average,
        paired=twin is not None,
    )
    on_twin = False
    twin_ms: list[float] = []
    twin_step_s = 0.0
    flushing, after_twin = FLUSH_EVERY, 0  # until the first round's end shows the stock kept
    decided_on: tuple[float, ...] = ()
    if batches is None and fresh is not None:
        batches = fresh.make()
    # the real steps taken from the first iterator (its flushes not counted: they differ
    # between ranks, and every rank must drop it at the same step) and whether it was dropped
    taken, remade = 0, False
    while not plan.finished:
        s = plan.next_step()
        # a flush or a new iterator lands in the step after it, a settle step (not measured)
        if on_twin and s.source != TWIN and twin_ms:
            twin_step_s, twin_ms = statistics.median(twin_ms) / 1e3, []
            if batches is None:
                batches = fresh.make()  # type: ignore[union-attr]
            elif flushing == FLUSH_EVERY:
                after_twin = flush(batches, twin_step_s)
        elif not on_twin and s.source == TWIN:
            if s.round == 1 and twin_step_s:
                after_real = flush(batches, twin_step_s)
                first_waits = [  # the first round's measured real steps' waits for a batch, ms
                    r.input_wait_ms
                    for r in stepper.records
                    if r.round == 0 and not r.paired and not r.warmup
                ]
                wait = statistics.fmean(first_waits) / 1e3 / twin_step_s if first_waits else 0.0
                counts = [float(after_twin), float(after_real), wait]
                mean = average(counts) if average is not None else counts
                decided_on = tuple(float(v) for v in mean)
                if keeps_stock(*decided_on):
                    flushing = FLUSH_FIRST
            if (
                fresh is not None
                and s.round >= 1
                and flushing == FLUSH_EVERY
                and (remade or taken > fresh.after)
            ):
                held, batches, remade = [batches], None, True
                fresh.drop(held)
        on_twin = s.source == TWIN
        ms = stepper.step(
            twin if on_twin else batches,
            s.variant,
            s.index,
            s.warmup,
            plan.total_steps,
            s.paired,
            s.round,
            step_fn=twin_step_fn if on_twin else None,
        )
        if on_twin:
            twin_ms.append(ms)
        else:
            taken += 1
        check = plan.finish_step(ms)
        if check is not None and on_check is not None:
            on_check(check)
    measured = stepper.measured(train.warmup_steps, plan.stop_reason, plan.half_pct, plan.seconds)
    measured.flush = FRESH if remade else flushing if twin_step_s else ""
    measured.flush_counts = decided_on
    if fresh is not None:
        held, batches = [batches], None
        fresh.drop(held)
    return measured
