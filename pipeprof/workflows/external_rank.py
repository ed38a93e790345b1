"""``pipeprof rank SCENARIO --run-dir DIR``: one of pipeprof's ranks, started by a launcher
pipeprof does not drive (the ``external`` launcher): mpirun run by hand, a Kubeflow MPIJob's
launcher pod, srun in a script of the user's.

Each process reads who it is from its launcher's variables (``rank.identity``: Horovod's, Open
MPI's, PMI's, PMIx's, Slurm's), so the worker count is the launch's size. The launcher must
give Horovod what it needs to join the ranks (mpirun does, for a Horovod built with MPI). Every
rank makes its data ready (the built-in set generated once per host, the others waiting for
it); rank 0 keeps the run directory: it creates it on the first launch, and a later launch at
another worker count of the same scenario adds to it, never over what was measured (the
manifest keeps each launch's state). Every rank's steps reach rank 0 over Horovod, and rank 0
writes the variants, the steps and, once they are done, ``summary.csv``; ``pipeprof report
DIR`` renders the run, assembling the summary from the steps if rank 0 could not. The other
ranks write only what is their own host's (the bad files they skipped, a file cache), under
the same path on their host: a shared filesystem gathers those too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from pipeprof.data.generate import GeneratingElsewhere
from pipeprof.errors import PipeprofError
from pipeprof.launch import signals
from pipeprof.launch.job import Job
from pipeprof.progress import emit_to
from pipeprof.rank.identity import Identity, identity
from pipeprof.reporting import Reporter
from pipeprof.rundir import FAILED, FINISHED, INTERRUPTED, RUNNING, RunDir, manifest
from pipeprof.scenario import Scenario
from pipeprof.workflows.data import prepare_data
from pipeprof.workflows.plan import variant_specs
from pipeprof.workflows.summary import write_summary

LAUNCHER = "external"
DATA_WAIT_S = 900.0  # another process generating the built-in set: how long to wait for it


def _prepare(scenario: Scenario, wait_s: float) -> str:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return prepare_data(scenario, Reporter())
        except GeneratingElsewhere:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def ready_data(scenario: Scenario, wait_s: float = DATA_WAIT_S) -> str:
    """``prepare_data`` in a child process (generating the built-in set imports TensorFlow,
    whose threads this rank sets up later, once), waiting while another rank of this host, or
    of another on a shared filesystem, generates the same set."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_prepare, scenario, wait_s).result()


def measured_nps(run: RunDir) -> set[int]:
    return {int(r["np"]) for r in run.variant_runs()}


def _flat(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def measured_alike(scenario: Scenario) -> dict[str, object]:
    """What must be the same for two worker counts to be compared: the scenario's keys, less
    where it came from and how it was launched."""
    keys = {k: v for k, v in scenario.to_dict().items() if k not in ("launch", "source_file")}
    return _flat(keys)


@contextlib.contextmanager
def held(path: Path) -> Iterator[None]:
    """``path`` (a folder, made when missing) locked against another launch's rank 0 doing
    the same at the same time."""
    if path.exists() and not path.is_dir():
        raise PipeprofError(f"--run-dir {path}: exists and is not a directory")
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def open_run_dir(path: Path, scenario: Scenario, me: Identity, argv: list[str]) -> RunDir:
    """Rank 0's run directory: created when missing or empty; a run of ``pipeprof rank`` for
    the same scenario gains this worker count; anything else is refused in one line."""
    where = f"--run-dir {path}"
    with held(path):
        if not any(path.iterdir()):
            run = RunDir.create(str(path), scenario.name)
            run.write_manifest(
                manifest(
                    scenario.to_dict(),
                    argv,
                    [],
                    {
                        "launcher": LAUNCHER,
                        "rank_variables": me.source or "none (a single process)",
                        "worker_counts": [me.size],
                        "launches": {str(me.size): RUNNING},
                        "variants": [s.name for s in variant_specs(scenario)],
                        "device": scenario.train.device,
                        "command": "rank",
                    },
                )
            )
            return run
        run = RunDir(path)
        try:
            known = run.manifest()
        except (PipeprofError, ValueError):
            raise PipeprofError(
                f"{where}: not empty and not a run of pipeprof rank (pipeprof never writes "
                "into a folder it did not make)"
            ) from None
        if known.get("launcher") != LAUNCHER:
            raise PipeprofError(
                f"{where}: a run of {known.get('command_line', ['another command'])[0]} with "
                f"launcher {known.get('launcher')}; give pipeprof rank a run directory of its own"
            )
        before = _flat(
            {
                k: v
                for k, v in known.get("scenario", {}).items()
                if k not in ("launch", "source_file")
            }
        )
        now = measured_alike(scenario)
        if differ := sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k)):
            shown = ", ".join(
                f"{k} ({before.get(k)!r} there, {now.get(k)!r} now)" for k in differ[:3]
            )
            raise PipeprofError(
                f"{where}: its worker counts measured another scenario: {shown}"
                + (f" and {len(differ) - 3} more" if len(differ) > 3 else "")
                + "; give this one a run directory of its own"
            )
        launches = known.get("launches", {})
        if me.size in measured_nps(run) or str(me.size) in launches:
            state = launches.get(str(me.size), FINISHED)
            how = (
                "is measured there already"
                if state == FINISHED
                else f"was launched there ({state})"
            )
            raise PipeprofError(
                f"{where}: np={me.size} {how} (pipeprof never overwrites a run); give another "
                "--run-dir"
            )
        known["worker_counts"] = sorted({*known.get("worker_counts", []), me.size})
        known["launches"] = {**launches, str(me.size): RUNNING}
        run.write_manifest(known)
        return run


def ended(run: RunDir, np: int, state: str, detail: str) -> None:
    """This launch's end, in the run's status and in the manifest's per worker count."""
    with held(run.path):
        known = run.manifest()
        known["launches"] = {**known.get("launches", {}), str(np): state}
        run.write_manifest(known)
    run.write_status(state, detail)


def summarise(run: RunDir) -> None:
    """summary.csv from every worker count rank 0 wrote into the run directory."""
    known = run.manifest()
    write_summary(run.path, {"synthetic"}, known["variants"], None, known["device"])


def assemble(run: RunDir) -> bool:
    """``pipeprof report``'s part: the summary of a ``pipeprof rank`` run written again when
    its steps are newer (a worker count whose rank 0 ended before writing it); True if so.
    A run directory this user cannot write is rendered as it is."""
    variants, summary = run.path / "variants.jsonl", run.path / "summary.csv"
    if run.manifest().get("launcher") != LAUNCHER or not variants.exists():
        return False
    if summary.exists() and summary.stat().st_mtime >= variants.stat().st_mtime:
        return False
    try:
        summarise(run)
    except OSError:
        return False
    return True


def run_rank(scenario: Scenario, run_dir: Path, argv: list[str], reporter: Reporter) -> int:
    """This process as one rank of a launch some other program started; its exit code."""
    me = identity()
    run = open_run_dir(run_dir, scenario, me, argv) if me.rank == 0 else None
    if run is not None:
        run.write_status(RUNNING, f"np={me.size}")
        emit_to(reporter.progress)  # rank 0's progress as lines, not for a launcher to parse
    try:
        data_root = ready_data(scenario)
        job = Job(
            run_dir=str(run_dir.resolve()),
            np=me.size,
            scenario=scenario.to_dict(),
            data_root=data_root,
            variants=variant_specs(scenario),
        )
        from pipeprof.rank.worker import run_job  # TensorFlow and Horovod: only now

        code = run_job(job)
    except signals.Interrupted as exc:  # mpirun's abort, a pod deleted, scancel
        if run is not None:
            ended(run, me.size, INTERRUPTED, f"np={me.size}: {exc}")
        raise
    except BaseException as exc:
        if run is not None:
            ended(run, me.size, FAILED, f"np={me.size}: {exc}")
        raise
    finally:
        emit_to(None)
    if run is not None:
        if code == 0:
            summarise(run)
            ended(run, me.size, FINISHED, f"np={me.size}")
        else:
            ended(run, me.size, FAILED, f"np={me.size}: a rank failed (its line is above)")
    return code
