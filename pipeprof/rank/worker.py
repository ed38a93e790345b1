"""What one rank does: set up, then train every variant of the job in turn.

Run as ``python -m pipeprof.rank <encoded job>`` under the launcher. The rank sees its
framework, distribution and input library only through their interfaces
(``pipeprof.plugins``): the framework (TensorFlow, ...) and the distribution (Horovod, ...)
start once; the model and its compiled step are built once and reused by every variant, so
variants differ only in where their batches come from. The timed loop of one variant is in
``measure``.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import sys
import threading
import time
import traceback
from pathlib import Path

import numpy

from pipeprof import plugins
from pipeprof.analysis import stopping
from pipeprof.config import build
from pipeprof.distributions import Distribution
from pipeprof.errors import PipeprofError
from pipeprof.frameworks import Framework
from pipeprof.inputs import InputLibrary
from pipeprof.launch import supervise
from pipeprof.launch.job import ERROR_TAG, Job, VariantSpec
from pipeprof.progress import Precision, RanksUp, StepProgress, VariantStart, emit
from pipeprof.rank.identity import identity
from pipeprof.rank.measure import Fresh, run_variant
from pipeprof.rank.output import gather_records, write_variant
from pipeprof.records import StepRecord, VariantRun
from pipeprof.rundir import RunDir
from pipeprof.scenario import PipelineConfig, Scenario, TrainConfig, emulated_ms

RETIRE_WAIT_S = 30.0  # how long the end of a launch waits for an iterator to wind down


def lr_factor(scaling: str, np: int) -> float:
    return {"linear": float(np), "sqrt": math.sqrt(np), "none": 1.0}[scaling]


def batch_and_lr(train: TrainConfig, np: int) -> tuple[int, float]:
    """Per-worker batch size and the scaled learning rate at ``np`` workers."""
    per_worker = train.batch_size if train.batch_mode == "per_worker" else train.batch_size // np
    if per_worker < 1:
        raise PipeprofError(
            f"train.batch_size {train.batch_size} (global) leaves no samples per worker at np={np}"
        )
    return per_worker, train.learning_rate * lr_factor(train.lr_scaling, np)


def ramp_lr(base: float, scaled: float, step: int, steps: int) -> float:
    """The learning rate after ``step`` of ``steps`` warm-up steps (Goyal et al.): from one
    worker's ``base`` up to the ``scaled`` rate in equal steps, then the scaled rate."""
    return scaled if step >= steps else base + (scaled - base) * step / steps


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    supervise.end_when_output_closes()  # a rank over ssh: how it hears of the launcher's stop
    return run_job(Job.decode(argv[0]))


def run_job(job: Job) -> int:
    """Train every variant of ``job`` as this rank; a failure is one line naming the rank
    and its host (for the launcher to show), and exit 1."""
    me = identity()  # from the launcher's environment: known before any distribution starts
    try:
        return _run(job)
    except PipeprofError as exc:
        print(me.error_line(ERROR_TAG, exc.message), file=sys.stderr, flush=True)
    except Exception as exc:  # report, then let horovodrun end the other ranks
        if (line := _input_failure(exc)) is not None:  # a bad file: one line, no traceback
            print(me.error_line(ERROR_TAG, line), file=sys.stderr, flush=True)
            return 1
        traceback.print_exc()
        print(me.error_line(ERROR_TAG, one_line(exc)), file=sys.stderr, flush=True)
    return 1


# TensorFlow's "Detected at node X defined at (most recent call last):" and the Python frames
# that built the node, which come before what went wrong in its graph execution errors
_NODE_TRACE = re.compile(
    r":?\s*Detected at node '?([\w/.-]+)'? defined at \(most recent call last\):"
    r"(?:\s*File \"[^\"]*\", line \d+, in \S+)*"
)


def one_line(exc: BaseException, limit: int = 500) -> str:
    """An exception as one line of at most ``limit`` characters of message: its type, and
    for a TensorFlow graph execution error what went wrong before where the node was defined
    (the frames would fill the line: a MultiWorkerMirroredStrategy worker's "Collective ops is
    aborted by: Connection reset by peer" came after 500 characters of them)."""
    text = _NODE_TRACE.sub(lambda m: f" at node {m.group(1)}:", str(exc), count=1)
    return f"{type(exc).__name__}: {' '.join(text.split())[:limit]}"


def _bad_files(run_dir: Path, np: int, variant: str, rank: int, telemetry=None):
    """Where this rank's pipeline for ``variant`` writes the bad files it skips (and streams
    them, for the live metrics)."""
    from pipeprof.data import badfiles

    def stream(path: str, reason: str) -> None:
        telemetry.put(
            "bad_file", {"rank": rank, "np": np, "variant": variant, "path": path, "reason": reason}
        )

    return badfiles.BadFiles(
        badfiles.log_path(run_dir, np, variant, rank),
        variant=variant,
        listener=stream if telemetry is not None else None,
        host=identity().host,
    )


def _input_failure(exc: BaseException) -> str | None:
    """The one line for a rank ended by its input (a bad file under data.on_bad_file = "fail",
    or a decode error past the checks; a DataLoader worker gone, whose error PyTorch's SIGCHLD
    handler raises wherever the main thread is, in the step as often as in the loader's
    ``next()``), else None."""
    from pipeprof.data import badfiles

    line = badfiles.failure_line(exc)
    if line is None and isinstance(exc, RuntimeError):
        from pipeprof.inputs.dataloader import worker_failure

        line = worker_failure(str(exc), math.nan, waiting=False)
    return line


def _start_telemetry(
    job: Job, scenario: Scenario, rank: int, size: int, local_rank: int, local_size: int
):
    from pipeprof.telemetry.agent import start_streaming

    if not scenario.telemetry.enabled or not job.stream:
        return None
    return start_streaming(
        job.stream,
        token=job.stream_token,
        fallback_dir=job.run_dir,
        rank=rank,
        local_rank=local_rank,
        local_size=local_size,
        size=size,
        gpu_interval_s=scenario.telemetry.gpu_interval_ms / 1e3,
        host_interval_s=scenario.telemetry.host_interval_ms / 1e3,
    )


def _run(job: Job) -> int:
    scenario = Scenario.from_dict(
        {k: v for k, v in job.scenario.items() if k != "source_file"}, "job"
    )
    plugins.adopt(job.plugins)  # what the launching process registered, registered here
    scenario = plugins.resolve(scenario)  # "auto" as the launching process resolved it
    dist: Distribution = plugins.make(plugins.DISTRIBUTION, scenario.train.engine)
    dist.start(scenario.launch.controller, np=job.np, rendezvous=job.rendezvous)
    dist.set_input(scenario.train.distribute_input)
    telemetry = _start_telemetry(
        job, scenario, dist.rank, dist.size, dist.local_rank, dist.local_size
    )
    try:
        return _train(job, scenario, dist, telemetry)
    finally:
        if telemetry is not None:
            telemetry.stop()


def _train(job: Job, scenario: Scenario, dist: Distribution, telemetry) -> int:
    framework: Framework = plugins.make(plugins.FRAMEWORK, scenario.train.framework)
    inputs: InputLibrary = plugins.make(plugins.INPUTS, scenario.data.library)
    train = scenario.train
    device = framework.setup(dist, train.intra_op_threads)
    # the worker count: ranks × the replicas each drives (one a process: 1; mirrored: all)
    rank, processes, replicas = dist.rank, dist.size, dist.replicas
    size = processes * replicas
    if size != job.np:
        raise PipeprofError(f"launched {size} ranks but the job is for np={job.np}")
    per_worker_batch, lr = batch_and_lr(train, size)
    input_batch = dist.input_batch(per_worker_batch)  # what this process's pipeline yields
    run_dir = Path(job.run_dir)

    data = scenario.data
    input_shape = (data.image_size, data.image_size, 3)
    model = framework.build(scenario.model.name, input_shape, data.num_classes, train, lr, dist)
    step_fn = framework.train_step(model, dist)
    how = train.distribute_input  # said where it was chosen: the default goes unsaid
    device = dist.describe(dist.device_kind or device, how)
    gradient_floats = framework.parameters(model)
    device_ms = emulated_ms(train.device)
    if device_ms is not None:
        step_fn = framework.emulated_step(dist, device_ms, gradient_floats, seed=rank)
        device = dist.describe(
            f"emulated ({device_ms:g} ms/step + allreduce of {gradient_floats * 4 / 2**20:.1f} MB)",
            how,
        )

    device_steps: dict[str, object] = {}

    def pipe_of(spec: VariantSpec) -> PipelineConfig:
        return build(PipelineConfig, spec.pipeline, "job", f"variants.{spec.name}.pipeline")

    def step_for(spec: VariantSpec):
        """The training step a variant runs: the model's own, or, with augment.placement =
        "device", the same batch augmentation first, inside the step (on the GPU where there
        is one; on an emulated device, on the CPU before the device time)."""
        pipe = pipe_of(spec)
        if spec.synthetic or not pipe.augment.enabled or pipe.augment.placement != "device":
            return step_fn
        key = json.dumps(spec.pipeline["augment"], sort_keys=True)
        if key not in device_steps:
            augment = inputs.batch_augment(pipe.augment, data.image_size)
            if device_ms is not None:
                on_device = framework.compiled(lambda x, y: augment(x, y)[0])
                device_steps[key] = lambda x, y: step_fn(on_device(x, y), y)
            else:
                device_steps[key] = framework.train_step(model, dist, lambda x, y: augment(x, y)[0])
        return device_steps[key]

    def real_dataset(spec: VariantSpec, epochs: int | None = None):
        return inputs.pipeline(
            data,
            pipe_of(spec),
            data_root=job.data_root,
            shard=(rank, processes),
            batch_size=input_batch,
            epochs=epochs,
            cache_prefix=str(run_dir / "cache" / f"np{size}-{spec.name}"),
            bad_files=_bad_files(run_dir, size, spec.name, rank, telemetry),
        )

    def fresh_for(spec: VariantSpec) -> Fresh | None:
        """How a real variant's rounds may make its iterator anew (``rank.measure.Fresh``:
        ``run_variant`` does for a pipeline slower than its steps), or None where they keep
        one and flush its stock whatever its speed: a pipeline its input library cannot
        restart (a file cache, a tf.data service), or a memory cache whose epoch's length is
        unknown."""
        pipe = pipe_of(spec)
        if not inputs.restartable(pipe):
            return None
        # =kept: every pipeline keeps its iterator (for a side-by-side run; docs/measurement.md)
        if os.environ.get("PIPEPROF_ROUNDS_ITERATOR", "") == "kept":
            return None
        after = 0
        if pipe.cache.enabled:  # kept until its first epoch is read through, and a batch more
            elements = inputs.epoch_elements(data, pipe, job.data_root, (rank, processes))
            if elements is None:  # the same on every rank: the same source
                return None
            # the ranks' shards differ by a file at most: the mean's ceiling and a batch more
            # covers each, and every rank drops its first iterator at the same step
            mean = float(average([math.ceil(elements / input_batch)])[0])
            after = math.ceil(mean) + 1
        dataset = dist.distribute(real_dataset(spec))
        return Fresh(make=lambda: iter(dataset), drop=retire, after=after)

    def retire(held: list) -> None:
        """Drop the iterator ``held`` holds (its only reference) on a side thread: deleting it
        cancels its pipeline's threads at once, then may block ~5 s (no CPU spent) while they
        wind down, which the training thread need not wait for."""
        retiring.append(threading.Thread(target=held.clear, name="pipeprof-retire", daemon=True))
        retiring[-1].start()

    # The synthetic twin takes its shapes from the real pipeline's element spec.
    first_real = next((v for v in job.variants if not v.synthetic), None)
    if first_real is not None:
        element_spec = inputs.element_spec(real_dataset(first_real))
    else:
        element_spec = inputs.spec_of(input_batch, input_shape)

    # Same starting weights everywhere (what BroadcastGlobalVariablesCallback does in fit).
    dist.broadcast(framework.variables(model), root=0)
    broadcast_opt_pending = True
    if rank == 0:
        emit(
            RanksUp(
                np=size,
                device=device,
                per_worker_batch=per_worker_batch,
                learning_rate=lr,
            )
        )
        written = RunDir(run_dir)
        launches = written.model().get("launches", {})  # each worker count's, kept
        launches[str(size)] = {
            "device": device,
            "processes": processes,
            "replicas_per_process": replicas,
            "backend": framework.backend,
        }
        written.write_model(
            {
                "model": scenario.model.name,
                "parameters": gradient_floats,
                "gradient_bytes": 4 * gradient_floats,
                "device": train.device,
                "framework": framework.name,
                "framework_version": framework.version,
                "engine": dist.name,
                "inputs": inputs.name,
                "launches": launches,
            }
        )

    def average(values: list[float]) -> numpy.ndarray:
        return dist.average(values, name="pipeprof_check")

    retiring: list[threading.Thread] = []  # each variant's iterator, dropped on a side thread
    twin_ran = False  # once the synthetic twin ran at this np, real variants alternate with it
    warm_lr_steps, global_step = train.lr_warmup_steps, 0
    noise = dist.distribute_batch(
        framework.on_device(
            lambda: inputs.synthetic_batch(element_spec, data.num_classes, seed=rank)
        )
    )
    for k, spec in enumerate(job.variants):
        # A real variant measured in rounds makes its iterator anew each round where it can.
        alternates = twin_ran and spec.paired and not spec.synthetic
        fresh = fresh_for(spec) if alternates else None
        if spec.synthetic:
            batches = itertools.repeat(noise)
        elif fresh is not None:
            batches = None  # run_variant makes and drops its iterators
        else:
            batches = iter(dist.distribute(real_dataset(spec)))
        dist.barrier(f"barrier_{k}")  # all ranks start the variant together
        started = time.perf_counter()
        total = (
            train.warmup_steps + train.measure_steps if train.measure_steps else 0
        )  # 0: adaptive
        if rank == 0:
            emit(
                VariantStart(
                    np=size,
                    variant=spec.name,
                    index=k,
                    of_variants=len(job.variants),
                    steps=total,
                )
            )

        def on_step(
            record: StepRecord, of: int, name: str = spec.name, k: int = k, total: int = total
        ) -> None:
            nonlocal broadcast_opt_pending, global_step
            done = record.step + 1
            if telemetry is not None:
                telemetry.put("step", record)
            global_step += 1
            if broadcast_opt_pending:  # optimizer slots exist only after the first update
                dist.broadcast(framework.optimizer_variables(model), root=0)
                broadcast_opt_pending = False
            if warm_lr_steps and global_step <= warm_lr_steps:
                framework.set_learning_rate(
                    model, ramp_lr(train.learning_rate, lr, global_step, warm_lr_steps)
                )
            if rank == 0 and (done % job.progress_every == 0 or done == of):
                emit(
                    StepProgress(
                        np=size,
                        variant=name,
                        index=k,
                        of_variants=len(job.variants),
                        step=done,
                        steps=total,
                    )
                )

        if warm_lr_steps and global_step == 0:
            framework.set_learning_rate(model, train.learning_rate)

        def on_check(
            check: stopping.Check, name: str = spec.name, gap: bool = alternates, k: int = k
        ) -> None:
            if rank == 0:
                emit(
                    Precision(
                        np=size,
                        variant=name,
                        index=k,
                        of_variants=len(job.variants),
                        half_pct=check.half_pct,
                        target_pct=check.target_pct,
                        gap=gap,
                        steps=check.steps,
                        seconds=check.seconds,
                    )
                )

        twin = itertools.repeat(noise) if alternates else None
        measured = run_variant(
            step_for(spec),
            batches,
            np=size,
            variant=spec.name,
            rank=rank,
            train=train,
            per_worker_batch=per_worker_batch,
            on_step=on_step,
            average=average,
            max_measure_s=spec.max_measure_s,
            twin=twin,
            on_check=on_check,
            twin_step_fn=step_fn,
            replicas=replicas,
            # the rate each step trains with, read before it where a ramp is set (~20 µs)
            learning_rate=framework.learning_rate(model) if warm_lr_steps else None,
            fresh=fresh,
        )
        wall = time.perf_counter() - started
        fresh = None
        if batches is not None:  # given fresh, run_variant dropped its own iterators
            held, batches = [batches], None
            retire(held)  # the next variant need not wait for this one's to wind down
        avg = dist.average([measured.loss, measured.accuracy], name=f"metrics_{k}")
        all_records = gather_records(dist, measured.records, name=f"records_{k}")
        twin_ran = twin_ran or spec.synthetic
        if rank == 0:
            write_variant(
                run_dir,
                all_records,
                VariantRun(
                    np=size,
                    variant=spec.name,
                    synthetic=spec.synthetic,
                    per_worker_batch=per_worker_batch,
                    global_batch=per_worker_batch * size,
                    learning_rate=lr,
                    loss_mean=float(avg[0]),
                    accuracy_mean=float(avg[1]),
                    wall_s=wall,
                    measured_steps=measured.steps,
                    measured_s=measured.seconds,
                    stop_reason=measured.stop_reason,
                    half_pct=measured.half_pct,
                    flush=measured.flush,
                    flush_counts=list(measured.flush_counts),
                ),
                index=k,
                of=len(job.variants),
            )
    # where each process ran, and its weights at the end: equal on all of them where the
    # replicas stayed in step (a process's own is recorded by rank 0 with the launch)
    ended = dist.gather([identity().host, framework.weights_digest(model)], name="weights_end")
    if rank == 0:
        written = RunDir(run_dir)
        kept = written.model()
        launched = kept.get("launches", {}).get(str(size))
        if launched is not None:
            launched["hosts"] = [each[0] for each in ended]
            launched["weights_digest"] = [each[1] for each in ended]
            written.write_model(kept)
    dist.barrier("barrier_end")
    # The iterators still winding down must be gone before the process ends: Python's exit
    # stops a daemon thread inside TensorFlow's C++ with a forced unwind, which aborts the
    # process (measured: "FATAL: exception not rethrown", exit -6, once in a clean-clone CI
    # run of the mirrored distribution, after every variant was written).
    for thread in retiring:
        thread.join(timeout=RETIRE_WAIT_S)
    return 0


if __name__ == "__main__":
    sys.exit(main())
