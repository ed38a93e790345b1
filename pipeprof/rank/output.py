"""What ranks leave behind for the launcher: progress lines on stdout, and rank 0's files in
the run directory (every rank's steps of a variant, and the variant's facts). pipeprof's own
ranks and a user's ``model.fit`` under pipeprof (``pipeprof.keras``) write them alike."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from pipeprof.launch.job import PROGRESS_TAG
from pipeprof.records import STEP_COLUMNS, StepRecord, VariantRun


def emit(tag: str, payload: dict) -> None:
    """A line for the launcher (horovodrun merges every rank's output into one stream)."""
    print(f"{tag} {json.dumps(payload)}", flush=True)


def write_steps(path: Path, records: list[StepRecord]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=STEP_COLUMNS)
        w.writeheader()
        for r in records:
            w.writerow(r.to_dict())
    tmp.replace(path)


def gather_records(engine, records: list[StepRecord], name: str) -> list[StepRecord]:
    """Every rank's records on every rank (the engine's allgather: other hosts need no shared disk)."""
    gathered = engine.gather([r.to_dict() for r in records], name=name)
    return [StepRecord.from_dict(d) for part in gathered for d in part]


def write_variant(
    run_dir: Path, records: list[StepRecord], result: VariantRun, *, index: int, of: int
) -> None:
    """Rank 0, once a variant is measured: its steps, its line in variants.jsonl, and the progress event."""
    run_dir = Path(run_dir)
    write_steps(run_dir / "steps" / f"np{result.np}-{result.variant}.csv", records)
    with (run_dir / "variants.jsonl").open("a") as fh:
        fh.write(json.dumps(result.to_dict()) + "\n")
    emit(
        PROGRESS_TAG,
        {
            "event": "variant_done",
            "np": result.np,
            "variant": result.variant,
            "index": index,
            "of_variants": of,
            "wall_s": result.wall_s,
            "steps": result.measured_steps,
            "stop_reason": result.stop_reason,
            "half_pct": result.half_pct,
        },
    )
