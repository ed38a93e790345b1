"""GPU sampling through NVML, once per host, for the GPUs this host's ranks use."""

from __future__ import annotations

import socket
import time
from typing import Any

from pipeprof.telemetry.nvml import NA, Nvml
from pipeprof.telemetry.samples import GpuSample

NVML_CLOCK_SM = 1  # pynvml.NVML_CLOCK_SM
NVML_TEMPERATURE_GPU = 0  # pynvml.NVML_TEMPERATURE_GPU


def gpu_for_local_rank(local_rank: int, cuda_visible_devices: str | None) -> int | str | None:
    """The NVML identity of the GPU a rank uses: an index or a UUID; None when it has none.

    Ranks are pinned by local rank among the GPUs CUDA lets them see; CUDA_VISIBLE_DEVICES
    maps that to a physical GPU by index or by UUID ("GPU-…", "MIG-…").
    """
    if cuda_visible_devices is None:
        return local_rank
    entries = [e.strip() for e in cuda_visible_devices.split(",") if e.strip()]
    if not entries or entries[0] in ("-1", "NoDevFiles"):
        return None
    entry = entries[local_rank % len(entries)]
    return entry if not entry.isdigit() else int(entry)


def _num(value: Any, scale: float = 1.0) -> float | None:
    return None if value is NA or value is None else float(value) * scale


class GpuSampler:
    """Samples the given GPUs; ``targets`` maps each GPU (index or UUID) to its local ranks."""

    def __init__(self, nvml: Nvml, targets: dict[int | str, list[int]]) -> None:
        self.nvml = nvml
        self.host = socket.gethostname()
        self._handles: list[tuple[str, str, Any]] = []
        count = nvml.device_count()
        for gpu, ranks in sorted(targets.items(), key=lambda kv: str(kv[0])):
            if isinstance(gpu, int):
                h = nvml.query("nvmlDeviceGetHandleByIndex", gpu) if gpu < count else NA
            else:
                h = nvml.query("nvmlDeviceGetHandleByUUID", gpu)
            if h is not NA:
                self._handles.append((str(gpu), ";".join(map(str, sorted(ranks))), h))

    @property
    def active(self) -> bool:
        return bool(self._handles)

    def sample(self, slow: bool = True) -> list[GpuSample]:
        """Utilisation every call; memory, SM clock, power and temperature, which move slowly,
        only when ``slow`` (the caller asks for them at its host interval): one NVML query per
        GPU per fast sample instead of five."""
        now = time.time()
        out = []
        q = self.nvml.query
        for gpu, ranks, h in self._handles:
            util = q("nvmlDeviceGetUtilizationRates", h)
            mem = q("nvmlDeviceGetMemoryInfo", h) if slow else NA
            out.append(
                GpuSample(
                    t_unix_s=now,
                    host=self.host,
                    gpu=gpu,
                    local_ranks=ranks,
                    gpu_util_pct=None if util is NA else float(util.gpu),
                    mem_util_pct=None if util is NA else float(util.memory),
                    mem_used_mb=None if mem is NA else mem.used / 2**20,
                    mem_total_mb=None if mem is NA else mem.total / 2**20,
                    sm_clock_mhz=_num(q("nvmlDeviceGetClockInfo", h, NVML_CLOCK_SM))
                    if slow
                    else None,
                    power_w=_num(q("nvmlDeviceGetPowerUsage", h), 1e-3) if slow else None,
                    temp_c=_num(q("nvmlDeviceGetTemperature", h, NVML_TEMPERATURE_GPU))
                    if slow
                    else None,
                )
            )
        return out
