"""A fake of the pynvml module's functions pipeprof calls, for a host without GPUs.

Behaves like nvidia-ml-py: handles from an index, NVMLError with a ``value`` code, and a
per-function switch to answer NOT_SUPPORTED, as some drivers do for power or clocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_UNKNOWN = 999


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeGpu:
    name: str = "NVIDIA Fake H100"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    util_pct: int = 50
    mem_util_pct: int = 20
    mem_used: int = 4 * 2**30
    mem_total: int = 80 * 2**30
    sm_clock_mhz: int = 1980
    power_mw: int = 300_000
    temp_c: int = 60


@dataclass
class FakeNvml:
    gpus: list[FakeGpu] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)
    failing: set[str] = field(default_factory=set)  # raise a non-"not supported" error
    missing_library: bool = False
    calls: list[str] = field(default_factory=list)
    NVML_ERROR_NOT_SUPPORTED: int = NVML_ERROR_NOT_SUPPORTED

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.unsupported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if name in self.failing:
            raise NVMLError(NVML_ERROR_UNKNOWN)

    def nvmlInit(self) -> None:
        if self.missing_library:
            raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
        self._call("nvmlInit")

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")

    def nvmlDeviceGetCount(self) -> int:
        self._call("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:
        self._call("nvmlDeviceGetHandleByIndex")
        return self.gpus[i]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeGpu:
        self._call("nvmlDeviceGetHandleByUUID")
        return next(g for g in self.gpus if g.uuid == uuid)

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        self._call("nvmlDeviceGetName")
        return h.name

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        self._call("nvmlDeviceGetUUID")
        return h.uuid

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu):
        self._call("nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(used=h.mem_used, total=h.mem_total, free=h.mem_total - h.mem_used)

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu):
        self._call("nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=h.util_pct, memory=h.mem_util_pct)

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, clock_type: int) -> int:
        self._call("nvmlDeviceGetClockInfo")
        return h.sm_clock_mhz

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        self._call("nvmlDeviceGetPowerUsage")
        return h.power_mw

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        self._call("nvmlDeviceGetTemperature")
        return h.temp_c
