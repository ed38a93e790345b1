"""Telemetry samples: plain records with units in their names (None where not available)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


class _Record:
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        return cls(**{f.name: d.get(f.name) for f in fields(cls)})  # type: ignore[arg-type]

    @classmethod
    def columns(cls) -> list[str]:
        return [f.name for f in fields(cls)]  # type: ignore[arg-type]


@dataclass(frozen=True)
class GpuSample(_Record):
    t_unix_s: float
    host: str
    gpu: str  # the NVML index or UUID the ranks were mapped to
    local_ranks: str  # which local ranks use this GPU, e.g. "0" or "0;1"
    gpu_util_pct: float | None
    mem_util_pct: float | None
    mem_used_mb: float | None
    mem_total_mb: float | None
    sm_clock_mhz: float | None
    power_w: float | None
    temp_c: float | None


@dataclass(frozen=True)
class HostSample(_Record):
    t_unix_s: float
    host: str
    cpu_pct: float  # all cores together, 0..100
    cpu_per_core_pct: str  # ";"-joined, one value per core
    mem_used_mb: float
    mem_total_mb: float
    disk_read_mb_per_s: float
    net_mb_per_s: float  # received + sent


@dataclass(frozen=True)
class ProcSample(_Record):
    t_unix_s: float
    host: str
    rank: int
    cpu_pct: float  # the rank's process tree; 100 = one core
    rss_mb: float
