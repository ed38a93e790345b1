"""What ranks leave behind for the launcher: progress lines on stdout, and rank 0's files in
the run directory (every rank's steps of a variant, and the variant's facts). pipeprof's own
ranks and a user's ``model.fit`` under pipeprof (``pipeprof.keras``) write them alike."""

from __future__ import annotations

from pathlib import Path

from pipeprof.progress import VariantDone, emit
from pipeprof.records import StepRecord, VariantRun
from pipeprof.rundir import RunDir


def gather_records(engine, records: list[StepRecord], name: str) -> list[StepRecord]:
    """Every rank's records on every rank (the engine's allgather: other hosts need no shared disk)."""
    gathered = engine.gather([r.to_dict() for r in records], name=name)
    return [StepRecord.from_dict(d) for part in gathered for d in part]


def write_variant(
    run_dir: Path, records: list[StepRecord], result: VariantRun, *, index: int, of: int
) -> None:
    """Rank 0, once a variant is measured: its steps, its line in variants.jsonl, and the progress event."""
    RunDir(run_dir).write_variant_run(records, result)
    emit(
        VariantDone(
            np=result.np,
            variant=result.variant,
            index=index,
            of_variants=of,
            wall_s=result.wall_s,
            steps=result.measured_steps,
            stop_reason=result.stop_reason,
            half_pct=result.half_pct,
        )
    )
