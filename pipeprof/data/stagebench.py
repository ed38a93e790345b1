"""Pipeline-only measurements: how fast the input pipeline alone can go, and what it costs.

No model and no Horovod: batches are pulled as fast as the pipeline yields them. CPU cost is
the process's CPU time (every tf.data thread included) over the samples produced, in
core-milliseconds per sample. Measurements run in a worker process pinned to N cores
(``os.sched_setaffinity`` before TensorFlow starts, so tf.data's thread pools size themselves
to those cores) to emulate one rank's share of a node.

The worker speaks JSON lines on stdin/stdout, so one TensorFlow start serves many trials:
``python -m pipeprof.data.stagebench --cores 2`` reads ``{"data":…, "pipeline":…, ...}``
and answers ``{"samples_per_s":…, "core_ms_per_sample":…, ...}`` per line. Its stderr
(TensorFlow's, and any traceback) goes to a log in the run directory. It dies with pipeprof:
the kernel kills it when its parent dies (``--parent``), and a stop signal ends it at once.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from pipeprof import plugins
from pipeprof.analysis.ablation import ladder
from pipeprof.analysis.stages import COSTLY
from pipeprof.analysis.stats import (
    STOP_FIXED_TIME,
    STOP_LOST,
    STOP_MAX_TIME,
    STOP_TARGET,
    rate_interval,
)
from pipeprof.config import build
from pipeprof.data import filecache
from pipeprof.data.files import count_images
from pipeprof.errors import PipeprofError
from pipeprof.launch import signals, supervise, topology
from pipeprof.scenario import DataConfig, PipelineConfig, ServiceUse

# the input library a bench takes for data.library "auto" (callers that know the run's
# engine pass the library it resolves to): tf.data, which every engine but ddp reads
AUTO_LIBRARY = "tfdata"

STAGES = COSTLY

MIN_BATCHES = (
    20  # batch means need blocks of a few batches: prefetching makes neighbours correlated
)
CHECK_S = 0.1  # how often an adaptive measurement looks at its interval


def stage_ladder(base: PipelineConfig) -> list[tuple[str, PipelineConfig]]:
    """Cumulative pipelines for the stage benchmark: read only, then + label, + shuffle,
    + map, + augment (no cache, no prefetch); a stage the scenario has switched off is skipped."""
    return ladder(base, upto=STAGES[-1], skip_off=True)


def single_threaded(p: PipelineConfig) -> PipelineConfig:
    """One thread of tf.data, one DataLoader worker process, or Grain's one read thread in
    this process (no worker process: its own timings are read at once, where a worker's reach
    this process every 5 s)."""
    return dataclasses.replace(
        p,
        parallel_calls=1,
        private_threadpool_size=1,
        max_intra_op_parallelism=1,
        loader=dataclasses.replace(p.loader, num_workers=1),
        grain=dataclasses.replace(p.grain, worker_count=0, read_threads=1),
    )


def _warmed(
    data: DataConfig,
    pipe: PipelineConfig,
    *,
    data_root: str,
    batch_size: int,
    warmup_batches: int,
    cache_prefix: str,
):
    """``pipe``'s pipeline and an iterator over it, past its start-up: the shuffle buffer and
    any cache filled. Built by ``data.library``'s input library ("auto": tf.data, as before
    libraries were points of their own), one rank's whole data set on and on."""
    library = AUTO_LIBRARY if data.library == plugins.AUTO else data.library
    # measured here, in this process: never on a tf.data service the variant names
    pipe = dataclasses.replace(pipe, service=ServiceUse())
    ds = plugins.make(plugins.INPUTS, library).pipeline(
        data,
        pipe,
        data_root=data_root,
        shard=(0, 1),
        batch_size=batch_size,
        cache_prefix=cache_prefix,
    )
    it = iter(ds)
    # The shuffle buffer sits before repeat, so it never holds more than an epoch of a small
    # data set (a DataLoader's sampler shuffles its indices and holds no buffer).
    images = count_images(data_root) if data.source in ("folder", "generated") else 0
    has_buffer = pipe.shuffle.enabled and not plugins.capability(
        plugins.INPUTS, library, "shuffles_indices", False
    )
    buffer = pipe.shuffle.buffer_size if has_buffer else 0
    fill = (min(buffer, images) if images else buffer) // batch_size
    if pipe.cache.enabled:
        fill = max(fill, images // batch_size + 1)
    for _ in range(warmup_batches + fill):
        next(it)
    return ds, it


def measure(
    data: DataConfig,
    pipe: PipelineConfig,
    *,
    data_root: str,
    batch_size: int,
    seconds: float,
    warmup_batches: int = 5,
    cache_prefix: str = "",
    min_seconds: float | None = None,
    target_pct: float = 0.0,
    beat: float | None = None,
) -> dict[str, Any]:
    """Pull batches after warm-up; throughput and CPU cost of this process.

    Fixed length (``seconds``) unless ``min_seconds`` is given: then the measurement stops,
    after ``min_seconds``, as soon as the rate's 95% batch-means interval is within
    ``target_pct`` % of it (known well enough to rank), or lies wholly below ``beat`` (it
    cannot win: it loses early), and at ``seconds`` at the latest."""
    # the shuffle buffer and any cache are filled first: those are start-up, not steady state
    library = AUTO_LIBRARY if data.library == plugins.AUTO else data.library
    ds, it = _warmed(
        data,
        pipe,
        data_root=data_root,
        batch_size=batch_size,
        warmup_batches=warmup_batches,
        cache_prefix=cache_prefix,
    )
    ends = []
    stop, next_check = STOP_FIXED_TIME, min_seconds
    c0, t0 = cpu_seconds(), time.perf_counter()
    while True:
        next(it)
        ends.append(time.perf_counter())
        wall = ends[-1] - t0
        if wall >= seconds and len(ends) >= 3:
            stop = STOP_MAX_TIME if min_seconds is not None else STOP_FIXED_TIME
            break
        if next_check is not None and wall >= next_check and len(ends) >= MIN_BATCHES:
            next_check = wall + CHECK_S
            rate, half = _interval(t0, ends, batch_size)
            if beat is not None and rate + half < beat:
                stop = STOP_LOST
                break
            if half <= target_pct / 100 * rate:
                stop = STOP_TARGET
                break
    cpu = cpu_seconds() - c0
    # the library's own timing of its stages (Grain's execution summary), where it has one
    own = plugins.capability(plugins.INPUTS, library, "own_stage_ms", None)
    own_ms = own(ds) if own is not None else {}
    close = getattr(ds, "close", None)
    if close is not None:  # Grain's workers end now, before the next trial's start
        close()
    del it  # a DataLoader's workers end with their iterator, before the next trial's start
    samples = len(ends) * batch_size
    rate, half = _interval(t0, ends, batch_size)
    return {
        "samples_per_s": samples / wall,
        "core_ms_per_sample": 1e3 * cpu / samples,
        "cpu_cores_used": cpu / wall,
        "batches": len(ends),
        "seconds": wall,
        "half_pct": 100 * half / rate if rate > 0 and not math.isnan(half) else math.nan,
        "stop": stop,
        "library_stage_ms": own_ms,
    }


def cpu_seconds() -> float:
    """CPU time of this process (tf.data's threads) and of its child processes (a DataLoader's
    workers): those still running, and those that ended and were reaped (the kernel's count
    for them, ``RUSAGE_CHILDREN``: the workers that restart with each epoch)."""
    import resource

    import psutil

    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = time.process_time() + ended.ru_utime + ended.ru_stime
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


def _interval(t0: float, ends: list[float], batch_size: int) -> tuple[float, float]:
    durations = np.diff(np.array([t0] + ends))
    return rate_interval(np.full(len(durations), float(batch_size)), durations)


def serve(cores: int | None) -> int:
    """Worker loop: one JSON request per stdin line, one JSON answer per stdout line."""
    out = sys.stdout
    sys.stdout = sys.stderr  # TensorFlow's chatter must not corrupt the answers
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        try:
            data = build(DataConfig, req["data"], "stagebench", "data")
            pipe = build(PipelineConfig, req["pipeline"], "stagebench", "pipeline")
            res = measure(
                data,
                pipe,
                data_root=req["data_root"],
                batch_size=req["batch_size"],
                seconds=req["seconds"],
                cache_prefix=req.get("cache_prefix", ""),
                min_seconds=req.get("min_seconds"),
                target_pct=req.get("target_pct", 0.0),
                beat=req.get("beat"),
            )
            res["cores"] = cores or topology.usable_cores()
        except Exception as exc:  # one bad configuration must not end the whole search
            res = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
        out.write(json.dumps(res) + "\n")
        out.flush()
    return 0


class StageBench:
    """A pinned worker process; ``run(pipeline)`` measures one configuration in it. Its stderr
    is appended to ``log_path`` (the run directory's logs/stagebench.log). Create it in the
    thread that uses it: the worker is killed when that thread ends (PR_SET_PDEATHSIG)."""

    def __init__(
        self,
        data: DataConfig,
        data_root: str,
        batch_size: int,
        *,
        log_path: Path,
        cores: int | None = None,
        seconds: float = 2.0,
        cache_dir: str = "",
    ) -> None:
        self.data, self.data_root, self.batch_size = data, data_root, batch_size
        self.cores = cores
        self.seconds = seconds
        self.cache_dir = cache_dir
        self.trials = 0
        available = topology.usable_cores()
        if cores is not None and not 1 <= cores <= available:
            raise PipeprofError(
                f"--cores-per-rank {cores}: this machine lets pipeprof use 1..{available} cores"
            )
        argv = [sys.executable, "-m", "pipeprof.data.stagebench", "--parent", str(os.getpid())] + (
            ["--cores", str(cores)] if cores else []
        )
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._stack = ExitStack()
        log = self._stack.enter_context(self.log_path.open("a"))
        log.write("$ " + " ".join(argv) + "\n")
        log.flush()
        # its own session: the terminal's Ctrl-C reaches pipeprof, which then stops it in order
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
            start_new_session=True,
        )
        self._family = supervise.Family(self._proc)
        self._stack.enter_context(signals.on_force(self._family.kill_now))

    def __enter__(self) -> StageBench:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self.close(stop_now=kind is not None)

    def run(
        self,
        pipe: PipelineConfig,
        seconds: float | None = None,
        *,
        min_seconds: float | None = None,
        target_pct: float = 0.0,
        beat: float | None = None,
    ) -> dict[str, Any]:
        """One measurement (see ``measure``: fixed length, or adaptive with ``min_seconds``)."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        if prefix := filecache.user_prefix(pipe):
            filecache.claim(prefix, "pipeline benchmark")
        self.trials += 1
        req = {
            "data": dataclasses.asdict(self.data),
            "pipeline": dataclasses.asdict(pipe),
            "data_root": self.data_root,
            "batch_size": self.batch_size,
            "seconds": seconds or self.seconds,
            "cache_prefix": str(Path(self.cache_dir) / f"trial{self.trials}")
            if self.cache_dir
            else "",
            "min_seconds": min_seconds,
            "target_pct": target_pct,
            "beat": beat,
        }
        try:
            self._proc.stdin.write(json.dumps(req) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            raise PipeprofError(
                f"the pipeline benchmark worker died (exit {self._proc.wait()}; "
                f"its log: {self.log_path})",
                exit_code=1,
            )
        return json.loads(line)

    def close(self, stop_now: bool = False) -> None:
        """End the worker: it leaves when its stdin closes; on an error or a stop signal
        (``stop_now``) it gets SIGTERM, a short wait, then SIGKILL."""
        try:
            if self._proc.poll() is None and not stop_now:
                assert self._proc.stdin is not None
                try:
                    self._proc.stdin.close()
                    self._proc.wait(timeout=30)
                except (subprocess.TimeoutExpired, BrokenPipeError):
                    pass
        finally:  # also when a stop signal lands while waiting
            try:
                self._family.stop(grace_s=supervise.STRAGGLER_GRACE_S)
            finally:
                for pipe in (self._proc.stdin, self._proc.stdout):
                    if pipe is not None and not pipe.closed:
                        try:
                            pipe.close()
                        except BrokenPipeError:
                            pass
                self._stack.close()


STAGE_TARGET_PCT = 2.0  # a stage's rate known to ±2% is enough to rank the stages' costs


def stage_costs(bench: StageBench, base: PipelineConfig) -> list[dict[str, Any]]:
    """Each stage's rate and marginal CPU cost, at one thread and at the configured
    parallelism: each measured for half the bench's trial length at least, and until its rate
    is known to ±2% or the full length has passed."""
    rows = []
    prev = {"1": 0.0, "configured": 0.0}
    for stage, pipe in stage_ladder(base):
        row: dict[str, Any] = {"stage": stage}
        for label, p in (("1", single_threaded(pipe)), ("configured", pipe)):
            res = bench.run(p, min_seconds=bench.seconds / 2, target_pct=STAGE_TARGET_PCT)
            if "error" in res:
                raise PipeprofError(
                    f"pipeline benchmark of stage '{stage}' failed: {res['error']}", exit_code=1
                )
            row[f"samples_per_s_{label}"] = res["samples_per_s"]
            row[f"core_ms_per_sample_{label}"] = res["core_ms_per_sample"]
            row[f"marginal_core_ms_{label}"] = max(0.0, res["core_ms_per_sample"] - prev[label])
            prev[label] = res["core_ms_per_sample"]
            if label == "1" and stage in res.get("library_stage_ms", {}):
                # the library's own figure for the stage, ms an element in its one thread
                row["library_ms_per_element"] = res["library_stage_ms"][stage]
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--parent" in argv:  # die with pipeprof, even when it is SIGKILLed
        supervise.die_with_parent(int(argv[argv.index("--parent") + 1]))
    cores = int(argv[argv.index("--cores") + 1]) if "--cores" in argv else None
    if cores:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cores])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Grain times its own nodes in this process (pipeprof.inputs.grain), for the stage table
    os.environ.setdefault("PIPEPROF_GRAIN_STAGE_TIMING", "1")
    return serve(cores)


if __name__ == "__main__":
    sys.exit(main())
