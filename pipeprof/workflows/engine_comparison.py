"""``compare --engine horovod,mirrored``: the same scenario under each engine, one run
directory each inside one folder, then one table and one chart of the gap per worker count
for every engine (``engines.csv``, ``engines.svg`` in that folder).

The engines run one after the other (never side by side: they would share the cores), each
a whole compare of its own, so each run directory is what a compare with that one engine
would have written.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipeprof.analysis import views
from pipeprof.errors import PipeprofError
from pipeprof.rundir import write_csv

COLUMNS = [
    "np",
    "engine",
    "variant",
    "synthetic_samples_per_s",
    "samples_per_s",
    "gap_pct",
    "gap_pct_ci95",
    "verdict",
]


def engine_list(spec: str) -> list[str]:
    """``horovod,mirrored`` → both, in that order; one line for a repeat or an empty part."""
    engines = [e.strip() for e in spec.split(",")]
    if any(not e for e in engines) or len(set(engines)) != len(engines):
        raise PipeprofError(
            f"--engine {spec!r}: give engines once each, separated by commas (e.g. horovod,mirrored)"
        )
    return engines


def folder(out: str | None, name: str) -> Path:
    """The folder that holds each engine's run directory: new, or empty."""
    import time

    path = Path(out) if out else Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{name}-engines"
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise PipeprofError(
            f"--out {path}: exists and is not empty (pipeprof never overwrites a run)"
        )
    path.mkdir(parents=True, exist_ok=True)
    return path


def side_by_side(summaries: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Each engine's real rows beside its own ceiling, by worker count."""
    rows = []
    for engine, summary in summaries.items():
        ceilings = views.synthetic_rows(summary).set_index("np")["samples_per_s"]
        for _, r in views.real_rows(summary).iterrows():
            rows.append(
                {
                    "np": int(r["np"]),
                    "engine": engine,
                    "variant": r["variant"],
                    "synthetic_samples_per_s": ceilings.get(r["np"], float("nan")),
                    "samples_per_s": r["samples_per_s"],
                    "gap_pct": r["gap_pct"],
                    "gap_pct_ci95": r["gap_pct_ci95"],
                    "verdict": r["verdict"],
                }
            )
    table = pd.DataFrame(rows, columns=COLUMNS)
    return table.sort_values(["np", "engine", "variant"], kind="stable").reset_index(drop=True)


def write(base: Path, table: pd.DataFrame) -> list[Path]:
    """``engines.csv`` and ``engines.svg`` (the gap per worker count, a line per engine)."""
    from pipeprof.renderers import plots

    written = [base / "engines.csv"]
    write_csv(written[0], table)
    lines = table.assign(
        variant=table["engine"] + ": " + table["variant"].astype(str), synthetic=False
    )
    svg = plots.gap_vs_np(lines)
    if svg is not None:
        (base / "engines.svg").write_text(svg)
        written.append(base / "engines.svg")
    return written
