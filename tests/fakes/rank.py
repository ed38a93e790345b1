"""A fake rank: what ``python -m pipeprof.rank JOB`` does, without TensorFlow or Horovod.

It reads the real job, and trains each variant through pipeprof's own measurement loop
(``rank.measure.run_variant``) and output (``rank.output``): real step records, variants.jsonl
lines and progress lines. Only the work is fake: a model step sleeps ``train.device``'s
emulated milliseconds, and the "real" pipeline is a thread that makes a batch every
``PIPEPROF_FAKE_BATCH_MS`` ms into a small prefetch queue (as tf.data's prefetch does). The
true gap is then known: max(0, 1 − step / batch time). ``PIPEPROF_FAKE_FAIL_RANK`` makes that
rank fail its first real variant, as a rank whose input breaks does; ``PIPEPROF_FAKE_KILL_RANK``
makes it die there of SIGKILL, printing nothing.

    python -m tests.fakes.rank JOB
"""

from __future__ import annotations

import itertools
import os
import queue
import signal
import sys
import threading
import time
from pathlib import Path

from pipeprof.errors import PipeprofError
from pipeprof.events import RanksUp, emit
from pipeprof.launch.job import ERROR_TAG, Job
from pipeprof.rank import engine as engines
from pipeprof.rank.identity import identity
from pipeprof.rank.measure import run_variant
from pipeprof.rank.output import gather_records, write_variant
from pipeprof.records import VariantRun
from pipeprof.scenario import Scenario, emulated_ms

engines.register("files", "tests.fakes.engine:FileEngine")
ENV_BATCH_MS = "PIPEPROF_FAKE_BATCH_MS"
ENV_FAIL_RANK = "PIPEPROF_FAKE_FAIL_RANK"
ENV_KILL_RANK = "PIPEPROF_FAKE_KILL_RANK"  # this rank is killed (SIGKILL) at its first real variant


def no_data():  # data.factory of the fake scenarios: the fake ranks make their own batches
    raise AssertionError("the fake ranks never call their data factory")


def produced(every_s: float, stop: threading.Event, depth: int = 2):
    """Batches made one every ``every_s`` seconds by a thread, ``depth`` kept ready."""
    ready: queue.Queue = queue.Queue(maxsize=depth)

    def make() -> None:
        while not stop.is_set():
            time.sleep(every_s)
            while not stop.is_set():
                try:
                    ready.put((0, 0), timeout=0.05)
                    break
                except queue.Full:
                    continue

    threading.Thread(target=make, daemon=True, name="fake-pipeline").start()
    while True:
        yield ready.get()


def train(job: Job) -> int:
    scenario = Scenario.from_dict(
        {k: v for k, v in job.scenario.items() if k != "source_file"}, "job"
    )
    engine = engines.get(scenario.train.engine)
    engine.start(scenario.launch.controller)
    rank, size = engine.rank, engine.size
    device_s = (emulated_ms(scenario.train.device) or 5.0) / 1e3
    batch_s = float(os.environ.get(ENV_BATCH_MS, "0")) / 1e3
    fail_rank = int(os.environ.get(ENV_FAIL_RANK, "-1"))
    kill_rank = int(os.environ.get(ENV_KILL_RANK, "-1"))
    per_worker_batch = scenario.train.batch_size

    def step(x, y):
        time.sleep(device_s)
        return {"loss": 1.0, "accuracy": 0.5}

    if rank == 0:
        emit(
            RanksUp(
                np=size,
                device="fake",
                per_worker_batch=per_worker_batch,
                learning_rate=scenario.train.learning_rate,
            )
        )
    twin_ran = False
    for k, spec in enumerate(job.variants):
        if not spec.synthetic and rank == fail_rank:
            raise PipeprofError(f"fake input failure in variant {spec.name}")
        if not spec.synthetic and rank == kill_rank:
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer or a user's kill -9 does
        stop = threading.Event()
        batches = itertools.repeat((0, 0)) if spec.synthetic else produced(batch_s, stop)
        engine.barrier(f"variant_{k}")
        started = time.perf_counter()
        twin = itertools.repeat((0, 0)) if twin_ran and spec.paired and not spec.synthetic else None
        measured = run_variant(
            step,
            batches,
            np=size,
            variant=spec.name,
            rank=rank,
            train=scenario.train,
            per_worker_batch=per_worker_batch,
            average=lambda v: engine.average(v, "check"),
            max_measure_s=spec.max_measure_s,
            twin=twin,
        )
        stop.set()
        every = gather_records(engine, measured.records, name=f"records_{k}")
        twin_ran = twin_ran or spec.synthetic
        if rank == 0:
            write_variant(
                Path(job.run_dir),
                every,
                VariantRun(
                    np=size,
                    variant=spec.name,
                    synthetic=spec.synthetic,
                    per_worker_batch=per_worker_batch,
                    global_batch=per_worker_batch * size,
                    learning_rate=scenario.train.learning_rate,
                    loss_mean=measured.loss,
                    accuracy_mean=measured.accuracy,
                    wall_s=time.perf_counter() - started,
                    measured_steps=measured.steps,
                    measured_s=measured.seconds,
                    stop_reason=measured.stop_reason,
                    half_pct=measured.half_pct,
                ),
                index=k,
                of=len(job.variants),
            )
    engine.barrier("end")
    return 0


def main(argv: list[str]) -> int:
    try:
        return train(Job.decode(argv[0]))
    except PipeprofError as exc:
        print(identity().error_line(ERROR_TAG, exc.message), file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
