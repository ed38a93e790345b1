"""The telemetry a rank runs beside training: samplers on one background thread, and the
stream that carries their samples and the rank's step records to the launcher.

GPUs are sampled once per host: local rank 0 samples the GPUs of all local ranks, unless
CUDA_VISIBLE_DEVICES narrows each rank to one GPU (as Slurm may), in which case every rank
samples its own. Local rank 0 also samples the host; every rank samples its own process.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from pipeprof.telemetry.gpu import GpuSampler, gpu_for_local_rank
from pipeprof.telemetry.host import HostSampler, ProcSampler
from pipeprof.telemetry.nvml import Nvml
from pipeprof.telemetry.priority import lower_this_thread
from pipeprof.telemetry.stream import StreamClient


def gpu_targets(
    local_rank: int, local_size: int, cuda_visible_devices: str | None
) -> dict[int | str, list[int]]:
    """The GPUs this rank samples, each with the local ranks that use it."""
    entries = [e for e in (cuda_visible_devices or "").split(",") if e.strip()]
    per_rank_narrowed = cuda_visible_devices is not None and len(entries) == 1 and local_size > 1
    if per_rank_narrowed:
        gpu = gpu_for_local_rank(0, cuda_visible_devices)
        return {} if gpu is None else {gpu: [local_rank]}
    if local_rank != 0:
        return {}
    targets: dict[int | str, list[int]] = {}
    for lr in range(local_size):
        gpu = gpu_for_local_rank(lr, cuda_visible_devices)
        if gpu is not None:
            targets.setdefault(gpu, []).append(lr)
    return targets


class RankTelemetry:
    def __init__(
        self,
        stream: StreamClient,
        *,
        rank: int,
        local_rank: int,
        local_size: int,
        size: int = 0,
        gpu_interval_s: float = 0.1,
        host_interval_s: float = 0.5,
        nvml_factory: Callable[[], Nvml] = Nvml,
    ) -> None:
        self.stream = stream
        self.rank, self.local_rank = rank, local_rank
        self.gpu_interval_s, self.host_interval_s = gpu_interval_s, host_interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"pipeprof-sampler-rank{rank}", daemon=True
        )
        targets = gpu_targets(local_rank, local_size, os.environ.get("CUDA_VISIBLE_DEVICES"))
        self.nvml = nvml_factory() if targets else None
        self.gpu = (
            GpuSampler(self.nvml, targets)
            if self.nvml is not None and self.nvml.available
            else None
        )
        self.host = HostSampler() if local_rank == 0 else None
        self.proc = ProcSampler(rank)
        self.cpu_time_s = 0.0  # the sampler thread's own CPU time, for the overhead benchmark
        stream.put(
            "hello",
            {
                "rank": rank,
                "local_rank": local_rank,
                "host": socket.gethostname(),
                "np": size,
                "t_unix_s": time.time(),
                "nvml": "ok"
                if self.gpu is not None
                else (self.nvml.reason if self.nvml else "not sampled"),
                "gpus": list(map(str, targets)),
            },
        )

    def start(self) -> RankTelemetry:
        self._thread.start()
        return self

    def put(self, kind: str, payload: dict[str, Any] | Any) -> None:
        """A record for the launcher (a dict, or a record with ``to_dict()``), sent at the next flush."""
        self.stream.put(kind, payload)

    def _loop(self) -> None:
        lower_this_thread()
        next_gpu = next_host = next_slow = time.monotonic()
        if self.gpu is None:  # nothing to sample at the GPU rate: wake at the host's alone
            next_gpu = float("inf")
        tick = min(self.gpu_interval_s, self.host_interval_s)
        while not self._stop.wait(max(0.0, min(next_gpu, next_host) - time.monotonic())):
            t_cpu = time.thread_time()
            now = time.monotonic()
            host_due = now >= next_host
            if now >= next_gpu:
                assert self.gpu is not None  # without one, next_gpu is inf
                next_gpu = now + self.gpu_interval_s
                # GPU and host ticks drift apart, so the slow GPU fields keep their own clock
                slow = now >= next_slow
                if slow:
                    next_slow = now + self.host_interval_s
                for s in self.gpu.sample(slow=slow):
                    self.stream.put("gpu", s.to_dict())
            if (
                host_due
            ):  # the stream is flushed at the host interval too: one send, not one per GPU tick
                next_host = now + self.host_interval_s
                if self.host is not None:
                    self.stream.put("host", self.host.sample().to_dict())
                self.stream.put("proc", self.proc.sample().to_dict())
                self.stream.flush()
            self.cpu_time_s += time.thread_time() - t_cpu
            if tick <= 0:
                break

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if not self._thread.is_alive():  # a last sample covers the steps since the previous one
            if self.host is not None:
                self.stream.put("host", self.host.sample().to_dict())
            self.stream.put("proc", self.proc.sample().to_dict())
        self.stream.close()
        if self.nvml is not None:
            self.nvml.shutdown()


def start_streaming(
    address: str,
    *,
    token: str,
    fallback_dir: str,
    rank: int,
    local_rank: int,
    local_size: int,
    size: int,
    gpu_interval_s: float,
    host_interval_s: float,
) -> RankTelemetry:
    """A rank's samplers and its stream to the launcher at ``address`` (to ``fallback_dir``
    where no collector listens; "" for neither), started: for pipeprof's own ranks and for a
    user's script alike."""
    client = StreamClient(address, token=token, rank=rank, fallback_dir=fallback_dir or None)
    return RankTelemetry(
        client,
        rank=rank,
        local_rank=local_rank,
        local_size=local_size,
        size=size,
        gpu_interval_s=gpu_interval_s,
        host_interval_s=host_interval_s,
    ).start()
