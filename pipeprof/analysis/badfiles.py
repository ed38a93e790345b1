"""Bad files per (np, variant): the summary's ``bad_files`` column and the terminal's warning.

Pure functions over the frame ``data.badfiles.load`` reads (np, variant, path, reason, and
the rank and host that read it).
"""

from __future__ import annotations

import pandas as pd

from pipeprof.host import is_this_host

SHOWN = 3  # paths named in the terminal; the rest are in bad_files.csv


def add_bad_files(summary: pd.DataFrame, bad: pd.DataFrame) -> pd.DataFrame:
    """``summary`` with ``bad_files``: the distinct files each real variant skipped (empty for
    the synthetic twin, which reads nothing), placed before the verdict."""
    if summary.empty:
        return summary
    counts = (
        bad.groupby(["np", "variant"])["path"].nunique()
        if not bad.empty
        else pd.Series(dtype=float)
    )
    values = [
        float("nan") if bool(row.synthetic) else int(counts.get((int(row.np), row.variant), 0))
        for row in summary[["np", "variant", "synthetic"]].itertuples(index=False)
    ]
    out = summary.drop(columns=["bad_files"], errors="ignore")
    at = out.columns.get_loc("verdict") if "verdict" in out.columns else len(out.columns)
    out.insert(at, "bad_files", pd.array(values, dtype="Int64") if values else values)
    return out


def bad_files_warning(bad: pd.DataFrame, where: str) -> str | None:
    """One line naming the first few bad files and where the rest are listed, or None."""
    if bad.empty:
        return None
    files = bad.drop_duplicates("path")
    per = ", ".join(
        f"np={n} {v}: {len(g)}" for (n, v), g in bad.groupby(["np", "variant"], sort=True)
    )
    # the host that read each file, where any was read off this host (its path may exist there only)
    elsewhere = "host" in bad.columns and any(not is_this_host(h) for h in bad["host"] if h)
    shown = "; ".join(
        f"{r.path} ({r.reason}{f', read on {r.host}' if elsewhere and r.host else ''})"
        for r in files.head(SHOWN).itertuples(index=False)
    )
    more = f"; and {len(files) - SHOWN} more" if len(files) > SHOWN else ""
    return f"{len(files)} bad file(s) skipped ({per}): {shown}{more}; all listed in {where}"
