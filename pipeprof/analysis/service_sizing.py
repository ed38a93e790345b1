"""Sizing tf.data service for a target cluster, from one worker's measured cost.

The rule is the one tf.data service's own autoscaler uses: workers needed = the consumers'
total rate ÷ one worker's throughput. The consumers' rate at N ranks is what their devices
would take (the predicted synthetic samples/s: the ceiling); one worker's throughput is its
cores over its CPU per sample served, as measured on the source run's service workers. With
fewer workers the ranks get what the workers make, and the gap is what they miss.

Pure: no TensorFlow.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Sizing:
    np: int
    demand_samples_per_s: float  # what the ranks' devices would take
    worker_samples_per_s: float  # one worker, on cores_per_worker cores
    workers: int  # needed to keep up
    cores: float  # their cores together
    fewer_workers: int  # half as many (0 when one is needed)
    gap_with_fewer_pct: float  # the gap those leave (nan when fewer_workers is 0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def worker_rate(core_ms_per_sample: float, cores_per_worker: float) -> float:
    """Samples/s one worker makes on ``cores_per_worker`` cores."""
    if not core_ms_per_sample > 0 or not cores_per_worker > 0:
        raise ValueError("a worker's cost per sample and its cores must be positive")
    return cores_per_worker * 1e3 / core_ms_per_sample


def size(
    demand_by_np: dict[int, float], core_ms_per_sample: float, cores_per_worker: float
) -> list[Sizing]:
    """Per np: the workers (and cores) that keep ``demand`` samples/s fed, and the gap with half as many."""
    rate = worker_rate(core_ms_per_sample, cores_per_worker)
    out = []
    for n, demand in demand_by_np.items():
        workers = max(1, math.ceil(demand / rate - 1e-9))
        fewer = workers // 2
        gap = 100.0 * (1.0 - min(1.0, fewer * rate / demand)) if fewer else math.nan
        out.append(
            Sizing(
                np=n,
                demand_samples_per_s=demand,
                worker_samples_per_s=rate,
                workers=workers,
                cores=workers * cores_per_worker,
                fewer_workers=fewer,
                gap_with_fewer_pct=gap,
            )
        )
    return out
