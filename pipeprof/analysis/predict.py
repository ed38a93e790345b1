"""Predict throughput and the gap at N workers on a target cluster, from one machine's run.

Per rank and step, in milliseconds:

- device  ``D``: the synthetic step at np=1 (or ``--step-ms`` for the target's accelerator);
- CPU     the input pipeline needs ``P`` CPU-ms per rank and step (measured in the real run,
  or ``B × c`` from the stage costs) and the training loop ``L`` (measured on the synthetic
  run). A node's ranks share its cores, so the CPU bound on a step is
  ``ranks × (P + L) / cores``; tf.data overlaps it with the device through prefetch;
- storage ``N × B × bytes_per_sample / storage bandwidth``: every reader shares the file system;
- allreduce ``2(N−1)/N × gradient bytes / network bandwidth`` (ring allreduce), after the step;
- stragglers: a synchronous step waits for the slowest of N ranks, so the step is the
  expected maximum of N draws from the measured per-step distribution, not its mean;
- np=1 extra ``H``: what a real step took at np=1 beyond the synthetic step and any CPU bound:
  the lone rank's wait for Horovod's coordination cycle, stretched by the pipeline, and the
  batch's hand-off from tf.data's buffer. Where S is measured at N (``--ceiling``), S already
  holds the cycle's wait and H is left out;
- contention ``X``: where a node's ranks outnumber its cores, the pipelines' bursts at each
  step's start overflow the cores and the threads the step must wake wait behind them:
  ``(r − c) × P / c`` for ``r`` ranks on ``c`` cores (see ``overflow_ms``); zero on a node
  with a core per rank. The slowest rank is the one that queued longest, so X and the
  stragglers' tail are one delay: the step takes the larger.

``S`` is the ring allreduce from ``--network-gbps``, or, where a synthetic-only run at N on
the target (``--ceiling``) measured it, that run's step beyond the device time.

    synthetic(N) = E[max_N synthetic jitter] × max(D, L / cores per rank) + S
    real(N)      = max(E[max_N real jitter] × max(D, storage), E[max_N synthetic jitter] × max(D, storage) + X,
                       E[max_N real jitter] × CPU bound) + S + H     (H = 0 where S is measured)

Pure: numpy only.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np


def expected_max(samples: np.ndarray, n: int) -> float:
    """E[max of n independent draws] from the empirical distribution of ``samples``.

    Exact for that distribution: with the sample sorted, P(max = x_(i)) = (i/m)^n − ((i−1)/m)^n.
    """
    x = np.sort(np.asarray(samples, dtype=float))
    m = len(x)
    if m == 0:
        return math.nan
    if n <= 1:
        return float(x.mean())
    i = np.arange(1, m + 1)
    weights = (i / m) ** n - ((i - 1) / m) ** n
    return float(np.dot(weights, x))


@dataclass(frozen=True)
class Source:
    """What the prediction is built from (all measured on the source run)."""

    batch_per_rank: int
    device_ms: float  # synthetic step time at np=1 (mean)
    sync_cpu_ms: float  # CPU the training loop itself takes per step
    pipeline_core_ms_per_sample: float
    gradient_bytes: float
    bytes_per_sample: float | None
    synth_jitter: tuple[float, ...]  # per-step times at np=1 over their mean
    real_jitter: tuple[float, ...]
    stage_core_ms: dict[str, float] = field(default_factory=dict)
    pipeline_cpu_ms: float | None = None  # P: the pipeline's CPU per rank and step, measured in the run
    real_handoff_ms: float = 0.0  # H: what a real step took at np=1 beyond the synthetic one and any CPU bound
    source_busy: float = 0.0  # the source host's CPU utilisation over those real steps, 0..1

    @property
    def pipeline_ms_per_step(self) -> float:
        if self.pipeline_cpu_ms is not None and not math.isnan(self.pipeline_cpu_ms):
            return self.pipeline_cpu_ms
        return self.batch_per_rank * self.pipeline_core_ms_per_sample


@dataclass(frozen=True)
class Ceiling:
    """A synthetic-only run at one worker count on the target: its step and the node's CPU use."""

    step_ms: float
    busy: float  # the node's CPU utilisation during it, 0..1


@dataclass(frozen=True)
class Target:
    gpus_per_node: int
    cores_per_node: float
    storage_mbps: float | None = None  # shared file system, MB/s for all readers together
    network_gbps: float | None = None  # per node, for the allreduce
    step_ms: float | None = None  # the target accelerator's step, when known
    ceiling: dict[int, Ceiling] = field(default_factory=dict)  # measured synthetic steps per np


@dataclass(frozen=True)
class Prediction:
    np: int
    ranks_per_node: int
    cores_per_rank: float
    device_ms: float
    input_cpu_ms: float  # CPU bound of a real step on one rank's cores
    storage_ms: float
    allreduce_ms: float  # S: synchronisation per step (network model, or measured by the ceiling)
    contention_ms: float  # X: what the pipelines' overflow of the node's cores adds to real steps
    busy_synth: float  # the node's CPU utilisation, synthetic (measured by a ceiling or estimated) and real
    busy_real: float
    sync_measured: bool  # S from a ceiling run rather than the network model
    straggler_synth: float  # E[max_N jitter] for synthetic steps
    straggler_real: float
    synth_step_ms: float
    real_step_ms: float
    synthetic_samples_per_s: float
    real_samples_per_s: float
    gap_pct: float
    dominant: str  # compute | input | storage | stragglers | allreduce | contention: the real step's largest term
    gap_cause: str  # input | storage | stragglers | contention | none: the largest term real steps add

    def to_dict(self) -> dict:
        return asdict(self)


TERMS_ADVICE = {
    "input": "the ranks' CPUs cannot feed their devices: take the tuned settings (pipeprof tune --cores-per-rank "
             "{cores:g}), cache decoded data before augment, or move augmentation to the accelerator",
    "storage": "the shared file system is the limit: cache decoded data on local disk or in RAM, or store smaller "
               "(pre-resized) images",
    "stragglers": "the slowest rank sets the pace: steadier input (deeper prefetch, cached data) narrows the step-time "
                  "tail",
    "allreduce": "gradient exchange dominates: fp16 compression (hvd.Compression.fp16), larger batches per rank, or a "
                 "faster interconnect",
    "compute": "the model's step dominates: the input pipeline keeps up",
    "contention": "busy input threads delay every synchronisation hop: give ranks more cores, lower the pipeline's "
                  "CPU (tuned settings, cache before augment, augmentation on the accelerator), or fewer ranks per "
                  "node",
}


def overflow_ms(ranks: int, cores: float, pipeline_ms: float) -> float:
    """What the node's input pipelines add to a synchronous step when they outnumber its cores.

    Each step starts with every rank's pipeline refilling its buffer: ``P`` core-ms per rank.
    With ``r ≤ c`` ranks on ``c`` cores each burst has a core and overlaps the device time.
    Beyond that, ``(r − c) × P`` core-ms find no free core and queue; the queue drains in
    ``(r − c) × P / c`` ms. The threads a step must wake (the batch hand-off, Horovod's
    coordination cycle, each hop of the ring) wait in it, and a synchronous step waits for
    the rank that waited longest: the whole drain.

    Measured (benchmarks/sync_under_load.py, 2 cores): a burst of B CPU-ms at each step's
    start adds ``(r − c) × B / c`` within about 10% at np 4, 8 and 16. A real pipeline adds
    0.8–1.0 of that for its P, as not all of its work lands at the step's start: the term
    errs high by up to 20% of itself at np 4–8.
    """
    excess = ranks - cores
    if excess <= 0 or pipeline_ms <= 0:
        return 0.0
    return excess * pipeline_ms / cores


def predict(src: Source, tgt: Target, nps: list[int]) -> list[Prediction]:
    device = tgt.step_ms if tgt.step_ms else src.device_ms
    pipe = src.pipeline_ms_per_step
    out = []
    for n in nps:
        r = min(n, tgt.gpus_per_node)
        cores = tgt.cores_per_node / r
        s_syn = expected_max(np.array(src.synth_jitter), n)
        s_real = expected_max(np.array(src.real_jitter), n)
        base_synth = max(device, src.sync_cpu_ms / cores)
        ceiling = tgt.ceiling.get(n)
        if ceiling is not None:
            synth_step = ceiling.step_ms
            sync = max(0.0, synth_step - s_syn * base_synth)
            busy_synth = min(1.0, max(0.0, ceiling.busy))
        else:
            sync = 0.0
            if n > 1 and tgt.network_gbps:
                sync = 2 * (n - 1) / n * src.gradient_bytes / (tgt.network_gbps * 1e9 / 8) * 1e3
            synth_step = s_syn * base_synth + sync
            busy_synth = min(1.0, r * src.sync_cpu_ms / (tgt.cores_per_node * synth_step))
        # the CPU bound: each rank's pipeline and its training loop (as np=1 measured them) on
        # its share of the node's cores. Horovod's polling at N is left out: it takes only
        # the CPU nothing else wants (at np=32 on 2 cores, 80% of the node when synthetic)
        cpu_real = (pipe + src.sync_cpu_ms) / cores
        storage = 0.0
        if tgt.storage_mbps and src.bytes_per_sample:
            storage = n * src.batch_per_rank * src.bytes_per_sample / (tgt.storage_mbps * 1e6) * 1e3
        base_real = max(device, cpu_real, storage)
        contention = overflow_ms(r, tgt.cores_per_node, pipe)
        # H, the real step's extra at np=1, is mostly a lone rank's wait for Horovod's
        # coordination cycle; a synthetic step measured at N (the ceiling) holds that wait in
        # S already, so adding H there would count it twice (measured: np=2's gap is below np=1's)
        handoff = src.real_handoff_ms if ceiling is None else 0.0
        # the overflow is the straggler on a crowded node: the slowest rank is the one whose
        # wake-up queued longest, so it adds to the synthetic step's own tail in place of the
        # real jitter's extra tail, not on top of it. A CPU-bound step has no idle core to
        # overflow into: there the bound itself is the queue
        fed = max(s_real * max(device, storage), s_syn * max(device, storage) + contention)
        real_step = max(fed, s_real * cpu_real) + sync + handoff
        contention = max(0.0, real_step - sync - handoff - s_real * base_real)
        # the node's CPU use on real steps, as reported: the loop's (a rate: Horovod polls on a
        # clock) plus the pipelines' r·P per step
        busy_real = min(1.0, busy_synth + r * pipe / (tgt.cores_per_node * real_step))
        synth_sps = n * src.batch_per_rank / synth_step * 1e3
        real_sps = n * src.batch_per_rank / real_step * 1e3
        # what each term adds to the real step beyond the device's compute
        extra = {"input": max(0.0, cpu_real - max(device, storage)),
                 "storage": max(0.0, storage - max(device, cpu_real)),
                 "stragglers": (s_real - 1.0) * base_real,
                 "allreduce": sync,
                 "contention": contention}
        top = max(extra, key=lambda k: extra[k])
        dominant = top if extra[top] > 0.05 * device else "compute"
        # the gap: what a real step adds over a synthetic one (the allreduce is in both)
        added = {"input": extra["input"], "storage": extra["storage"],
                 "stragglers": max(0.0, (s_real - s_syn) * base_real), "contention": contention}
        cause = max(added, key=lambda k: added[k])
        cause = cause if added[cause] > 0.005 * real_step else "none"
        out.append(Prediction(np=n, ranks_per_node=r, cores_per_rank=cores, device_ms=device, input_cpu_ms=cpu_real,
                              storage_ms=storage, allreduce_ms=sync, contention_ms=contention,
                              busy_synth=busy_synth, busy_real=busy_real, sync_measured=ceiling is not None,
                              straggler_synth=s_syn, straggler_real=s_real,
                              synth_step_ms=synth_step, real_step_ms=real_step, synthetic_samples_per_s=synth_sps,
                              real_samples_per_s=real_sps, gap_pct=100.0 * (1.0 - real_sps / synth_sps),
                              dominant=dominant, gap_cause=cause))
    return out
