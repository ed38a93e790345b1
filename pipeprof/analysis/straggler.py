"""The slow rank: the one whose input wait (or step time) stays above the other ranks' over a
variant's measured steps.

In synchronous data-parallel training every rank's step ends at the same allreduce, so a rank
whose pipeline is slow shows as its own wait in ``next()`` while the others wait for it inside
the allreduce: their input wait stays low. A rank is named when, over the measured steps,

* its mean input wait a step exceeds the median of the other ranks' by more than ``margin``:
  ``MARGIN_MS`` or ``MARGIN_SHARE`` of the median step time, whichever is larger, and is at
  least ``RATIO`` times it (where every rank waits long for input, every pipeline is too slow:
  the story's two ranks sharing one core waited 32.0 and 17.4 ms a step, a gap of the whole
  pipeline's cost with one rank scheduled worse, not one slow rank), and
* it waited longest on average in at least ``CONSISTENT`` of the ``CHUNKS`` stretches of
  consecutive steps the measurement splits into (a rank that was slow once, for a burst, is
  not the slow rank; one whose prefetch buffer hides its slowness at some steps still is);

the same test on step time, without the ratio, names a rank whose own steps come slower
(ranks that do not synchronise each step, e.g. a pipeline stage feeding a service). Its
figure is the rank's pace: the time from one of its step ends to the next, over consecutive
measured steps. Ranks that meet in an allreduce at every step keep one pace, whatever each
counts as its step: in a custom loop a rank's time between epochs is no step's, yet another
rank waits for it inside its own next step (the loop example at np=2, 2026-11-26: 34.1
against 27.6 ms a step by step time, one rank's 170 ms pipeline restart in the other's
step; the same pace on both). By step time that would name the rank that waited.
Pure: frames in, records out.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

MARGIN_MS = 2.0
MARGIN_SHARE = 0.10
RATIO = 2.0
CHUNKS = 4
CONSISTENT = 0.75
COLUMNS = ["straggler", "straggler_input_wait_ms", "others_input_wait_ms"]


@dataclass(frozen=True)
class Straggler:
    np: int
    variant: str
    rank: int
    host: str
    figure: str  # "input wait" or "step time"
    rank_ms: float  # its mean a step
    others_ms: float  # the median of the other ranks' means
    share_of_stretches: float  # of the measurement's stretches, those it was the slowest in

    @property
    def who(self) -> str:
        return f"rank {self.rank}" + (f" on {self.host}" if self.host else "")

    def line(self) -> str:
        return (
            f"{self.who} is the slow rank: its {self.figure} was {self.rank_ms:.1f} ms a step "
            f"against {self.others_ms:.1f} ms for the others (the longest in "
            f"{round(self.share_of_stretches * CHUNKS)} of {CHUNKS} quarters of the measurement)"
            + (
                "; the other ranks wait for it in the allreduce"
                if self.figure == "input wait"
                else ""
            )
        )


def _slowest(
    per_step: pd.DataFrame, margin: float, ratio: float
) -> tuple[int, float, float, float] | None:
    """(rank, its mean, the others' median mean, share of stretches it was slowest in), or
    None. ``per_step``: one row a step, one column a rank."""
    if per_step.shape[1] < 2 or len(per_step) < CHUNKS:
        return None
    means = per_step.mean()
    rank = int(means.idxmax())
    others = means.drop(rank)
    if means[rank] - others.median() <= margin or means[rank] < ratio * others.median():
        return None
    size = len(per_step) / CHUNKS
    stretches = [per_step.iloc[round(k * size) : round((k + 1) * size)] for k in range(CHUNKS)]
    share = sum(int(s.mean().idxmax()) == rank for s in stretches) / CHUNKS
    if share < CONSISTENT:
        return None
    return rank, float(means[rank]), float(others.median()), share


def pace(rows: pd.DataFrame) -> pd.DataFrame:
    """Each rank's time from one step's end to the next (ms; a row a step, a column a rank),
    over steps whose predecessor was measured too; the steps' own times where the records
    have no end times."""
    if "end_unix_s" not in rows.columns or rows["end_unix_s"].isna().all():
        return rows.pivot_table(index="step", columns="rank", values="step_time_ms").dropna()
    ends = rows.pivot_table(index="step", columns="rank", values="end_unix_s").dropna()
    after = ends.index.to_series().diff() == 1
    return (ends.diff() * 1e3)[after]


def find(steps: pd.DataFrame) -> dict[tuple[int, str], Straggler]:
    """The slow rank of each (np, variant) that has one, from its measured step records (the
    rank's own steps: not warm-up, not the twin's steps paired with a real variant)."""
    out: dict[tuple[int, str], Straggler] = {}
    if steps.empty:
        return out
    m = steps[~steps["warmup"].astype(bool)]
    if "paired" in m.columns:
        m = m[m["paired"].fillna("") == ""]
    for (n, variant), rows in m.groupby(["np", "variant"]):
        if rows["rank"].nunique() < 2:
            continue
        margin = max(MARGIN_MS, MARGIN_SHARE * float(rows["step_time_ms"].median()))
        hosts = (
            rows.drop_duplicates("rank").set_index("rank")["host"].fillna("").astype(str)
            if "host" in rows.columns
            else pd.Series(dtype=str)
        )
        waits = rows.pivot_table(index="step", columns="rank", values="input_wait_ms").dropna()
        for figure, per_step, ratio in (
            ("input wait", waits, RATIO),
            ("step time", pace(rows), 1.0),  # every rank steps: the margin alone says
        ):
            found = _slowest(per_step, margin, ratio)
            if found is not None:
                rank, mine, others, share = found
                out[(int(n), str(variant))] = Straggler(
                    int(n),
                    str(variant),
                    rank,
                    str(hosts.get(rank, "")),
                    figure,
                    mine,
                    others,
                    share,
                )
                break
    return out


def add_stragglers(summary: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """``summary`` with the slow rank of each row named (``straggler``: "rank 1 on node2", or
    empty), its figure and the others', and its line added to the row's warning."""
    found = find(steps)
    out = summary.copy()
    who, mine, others, warnings = [], [], [], []
    for _, r in out.iterrows():
        s = found.get((int(r["np"]), str(r["variant"])))
        who.append(s.who if s else "")
        mine.append(s.rank_ms if s and s.figure == "input wait" else float("nan"))
        others.append(s.others_ms if s and s.figure == "input wait" else float("nan"))
        before = r["warning"] if isinstance(r.get("warning"), str) else ""
        warnings.append("; ".join(w for w in (before, s.line() if s else "") if w))
    out["straggler"], out["straggler_input_wait_ms"], out["others_input_wait_ms"] = (
        who,
        mine,
        others,
    )
    if "warning" in out.columns or any(warnings):
        out["warning"] = warnings
    return out
