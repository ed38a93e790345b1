"""Predict throughput and the gap at N workers on a target cluster, from one machine's run.

Per rank and step, in milliseconds:

- device  ``D``: the synthetic step at np=1 (or ``--step-ms`` for the target's accelerator);
- CPU     the rank's CPU work per step, ``sync`` for the training loop (measured on the
  synthetic run) plus ``B × c`` for the input pipeline (``c`` core-ms per sample, measured
  stage by stage). A node's ranks share its cores, so the CPU bound on a step is
  ``(sync + B·c) / cores_per_rank``; tf.data overlaps it with the device through prefetch;
- storage ``N × B × bytes_per_sample / storage bandwidth``: every reader shares the file system;
- allreduce ``2(N−1)/N × gradient bytes / network bandwidth`` (ring allreduce), after the step;
- stragglers: a synchronous step waits for the slowest of N ranks, so the step is the
  expected maximum of N draws from the measured per-step distribution, not its mean;
- contention latency: a busy input pipeline delays a rank's critical path each time a
  thread must wake for it. At np=1 that costs δ per step (real minus synthetic step, beyond
  any CPU bound). At N ranks every one of the ring's 2(N−1) hops waits for such a wake-up,
  and the step waits for the last of N ranks to wake (H_N × δ for exponential delays).
  δ shrinks in proportion where the target gives a rank more cores than the source had.

    step(N) = E[max of N draws of jitter] × max(D, CPU bound, storage) + allreduce(N)
              + contention latency(N)   (real steps only)

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
    wake_delay_ms: float = 0.0  # δ: what a busy pipeline adds to one rank's step at np=1
    source_cores_per_rank: float = 0.0  # cores the np=1 rank had (scales δ to the target)


@dataclass(frozen=True)
class Target:
    gpus_per_node: int
    cores_per_node: float
    storage_mbps: float | None = None  # shared file system, MB/s for all readers together
    network_gbps: float | None = None  # per node, for the allreduce
    step_ms: float | None = None  # the target accelerator's step, when known


@dataclass(frozen=True)
class Prediction:
    np: int
    ranks_per_node: int
    cores_per_rank: float
    device_ms: float
    input_cpu_ms: float  # CPU bound of a real step on one rank's cores
    storage_ms: float
    allreduce_ms: float
    contention_ms: float
    straggler_synth: float  # E[max_N jitter] for synthetic steps
    straggler_real: float
    synth_step_ms: float
    real_step_ms: float
    synthetic_samples_per_s: float
    real_samples_per_s: float
    gap_pct: float
    dominant: str  # compute | input | storage | stragglers | allreduce | contention

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


def predict(src: Source, tgt: Target, nps: list[int]) -> list[Prediction]:
    device = tgt.step_ms if tgt.step_ms else src.device_ms
    out = []
    for n in nps:
        r = min(n, tgt.gpus_per_node)
        cores = tgt.cores_per_node / r
        cpu_synth = src.sync_cpu_ms / cores
        cpu_real = (src.sync_cpu_ms + src.batch_per_rank * src.pipeline_core_ms_per_sample) / cores
        storage = 0.0
        if tgt.storage_mbps and src.bytes_per_sample:
            storage = n * src.batch_per_rank * src.bytes_per_sample / (tgt.storage_mbps * 1e6) * 1e3
        allreduce = 0.0
        if n > 1 and tgt.network_gbps:
            allreduce = 2 * (n - 1) / n * src.gradient_bytes / (tgt.network_gbps * 1e9 / 8) * 1e3
        s_syn = expected_max(np.array(src.synth_jitter), n)
        s_real = expected_max(np.array(src.real_jitter), n)
        base_synth = max(device, cpu_synth)
        base_real = max(device, cpu_real, storage)
        delta = src.wake_delay_ms
        if src.source_cores_per_rank and cores > src.source_cores_per_rank:
            delta *= src.source_cores_per_rank / cores
        harmonic = sum(1.0 / k for k in range(1, n + 1))
        contention = delta * (2 * (n - 1) + harmonic)
        synth_step = s_syn * base_synth + allreduce
        real_step = s_real * base_real + allreduce + contention
        synth_sps = n * src.batch_per_rank / synth_step * 1e3
        real_sps = n * src.batch_per_rank / real_step * 1e3
        # what each term adds to the real step beyond the device's compute
        extra = {"input": max(0.0, cpu_real - max(device, storage)),
                 "storage": max(0.0, storage - max(device, cpu_real)),
                 "stragglers": (s_real - 1.0) * base_real,
                 "allreduce": allreduce,
                 "contention": contention}
        top = max(extra, key=lambda k: extra[k])
        dominant = top if extra[top] > 0.05 * device else "compute"
        out.append(Prediction(np=n, ranks_per_node=r, cores_per_rank=cores, device_ms=device, input_cpu_ms=cpu_real,
                              storage_ms=storage, allreduce_ms=allreduce, contention_ms=contention,
                              straggler_synth=s_syn, straggler_real=s_real,
                              synth_step_ms=synth_step, real_step_ms=real_step, synthetic_samples_per_s=synth_sps,
                              real_samples_per_s=real_sps, gap_pct=100.0 * (1.0 - real_sps / synth_sps),
                              dominant=dominant))
    return out
