"""The slow rank, on hand-made step records: named when its input wait stays above the other
ranks' by the margin, not for a burst, not when none is slow; in summary.csv's columns, the
row's warning, and the live dashboard."""

import io
import math

import pandas as pd
from rich.console import Console

from pipeprof.analysis.straggler import add_stragglers, find
from pipeprof.tui.dashboard import render
from pipeprof.tui.state import LiveState


def steps(waits_by_rank, step_ms=30.0, hosts=("a", "a", "b")):
    """40 measured steps per rank; ``waits_by_rank[r](i)`` is rank r's input wait at step i."""
    return pd.DataFrame(
        [
            {
                "np": len(waits_by_rank),
                "variant": "real",
                "rank": r,
                "step": i,
                "warmup": False,
                "paired": "",
                "input_wait_ms": wait(i),
                "step_time_ms": step_ms,
                "host": hosts[r],
            }
            for r, wait in enumerate(waits_by_rank)
            for i in range(40)
        ]
    )


def jitter(i):  # 0.3-0.7 ms, different at each step
    return 0.3 + 0.1 * (i * 7 % 5)


def test_a_rank_whose_input_wait_stays_high_is_named_with_its_host_and_figures():
    found = find(steps([jitter, jitter, lambda i: 12.0 + jitter(i)]))
    s = found[(3, "real")]
    assert (s.rank, s.host, s.figure, s.share_of_stretches) == (2, "b", "input wait", 1.0)
    assert math.isclose(s.rank_ms, 12.5) and math.isclose(s.others_ms, 0.5)
    assert s.line() == (
        "rank 2 on b is the slow rank: its input wait was 12.5 ms a step against 0.5 ms for the "
        "others (the longest in 4 of 4 quarters of the measurement); the other ranks wait for it "
        "in the allreduce"
    )


def test_no_rank_is_named_when_none_is_slow_or_one_was_slow_for_a_burst():
    assert find(steps([jitter, lambda i: jitter(i + 1), lambda i: jitter(i + 2)])) == {}
    # the margin: 3 ms of a 30 ms step (10%), so 2.5 ms more is not enough
    assert find(steps([jitter, jitter, lambda i: 2.5 + jitter(i)])) == {}
    # every rank waiting long, one longer (the story's two ranks on one core: 32.0 against
    # 17.4 ms): the whole pipeline is slow, not one rank
    assert find(steps([lambda i: 17.4, lambda i: 32.0 + jitter(i)], step_ms=67.0)) == {}
    # 40 ms a step for the first 10 steps: a mean 10 ms above the others, but one burst
    assert find(steps([jitter, jitter, lambda i: 40.0 if i < 10 else jitter(i)])) == {}
    # every fourth step 40 ms (its buffer hiding the rest): slow all along, so named
    assert find(steps([jitter, jitter, lambda i: 40.0 if i % 4 == 0 else jitter(i)]))
    # the twin's steps paired with a real variant, and warm-up steps, are not the rank's own
    burst = steps([jitter, lambda i: 12.0])
    burst["warmup"] = True
    assert find(burst) == {}
    paired = steps([jitter, lambda i: 12.0])
    paired["paired"] = "real"
    assert find(paired) == {}


def test_summary_rows_name_it_and_warn():
    frame = steps([jitter, lambda i: 12.0 + jitter(i)], hosts=("a", "b"))
    summary = pd.DataFrame(
        [
            {"np": 2, "variant": "synthetic", "warning": ""},
            {"np": 2, "variant": "real", "warning": "an earlier warning"},
        ]
    )
    out = add_stragglers(summary, frame).set_index("variant")
    assert out.loc["synthetic", "straggler"] == "" and out.loc["synthetic", "warning"] == ""
    real = out.loc["real"]
    assert real["straggler"] == "rank 1 on b"
    assert (real["straggler_input_wait_ms"], real["others_input_wait_ms"]) == (12.5, 0.5)
    assert real["warning"].startswith("an earlier warning; rank 1 on b is the slow rank: ")


def fed(waits: dict[int, float]) -> LiveState:
    """A live state given 20 steps of 30 ms from each rank, with ``waits[rank]`` ms of input wait."""
    state = LiveState(scenario="slow")
    for i in range(20):
        for rank, wait in waits.items():
            state.apply(
                {
                    "kind": "step",
                    "np": len(waits),
                    "variant": "real",
                    "rank": rank,
                    "step": i,
                    "input_wait_ms": wait,
                    "step_time_ms": 30.0,
                    "batch_size": 16,
                }
            )
    return state


def test_the_dashboard_marks_the_slow_rank():
    snap = fed({0: 0.4, 1: 9.0, 2: 0.5}).snapshot()
    assert [r.slow for r in snap.ranks] == [False, True, False]
    out = io.StringIO()
    Console(file=out, width=140, color_system=None).print(render(snap))
    assert "1 slow" in out.getvalue() and "0 slow" not in out.getvalue()
    # 1 ms apart, under the margin (3 ms of a 30 ms step), or all waiting long: none marked
    assert not any(r.slow for r in fed({0: 0.4, 1: 1.4}).snapshot().ranks)
    assert not any(r.slow for r in fed({0: 12.0, 1: 20.0}).snapshot().ranks)


def test_a_rank_whose_own_step_is_longer_is_named_by_its_step_time():
    """Ranks that do not meet at every step (no allreduce to wait in): one whose step is longer
    is named by its step time, and summary.csv's input-wait figures stay empty for it."""
    frame = steps([jitter, jitter])
    frame.loc[frame["rank"] == 1, "step_time_ms"] = 45.0
    # each at its own pace from the same start: rank 0 ends a step every 30 ms, rank 1 every 45
    frame["end_unix_s"] = 1000.0 + (frame["step"] + 1) * frame["step_time_ms"] / 1e3
    s = find(frame)[(2, "real")]
    assert (s.rank, s.figure) == (1, "step time")
    assert math.isclose(s.rank_ms, 45.0) and math.isclose(s.others_ms, 30.0)
    assert s.line().endswith(
        "ms for the others (the longest in 4 of 4 quarters of the measurement)"
    )
    row = add_stragglers(pd.DataFrame([{"np": 2, "variant": "real", "warning": ""}]), frame)
    assert row.loc[0, "straggler"] == "rank 1 on a" and math.isnan(
        row.loc[0, "straggler_input_wait_ms"]
    )


def test_ranks_in_lock_step_are_not_named_for_what_one_waited_inside_its_step():
    """A custom loop at np=2: each rank's time between epochs is no step's, but the other rank
    waits for it inside its own next step. Every 6th step rank 1 restarts its pipeline for
    150 ms outside its steps, and rank 0 waits for it within its step (180 ms). Both end each
    step together (an allreduce), so both keep one pace. By the steps' own times rank 0 would
    be named (56 against 30 ms a step): the rank that waited."""
    frame = steps([jitter, jitter])
    restart = frame["step"] % 6 == 0
    frame.loc[restart & (frame["rank"] == 0), "step_time_ms"] = 180.0
    ends = 1000.0 + (30.0 * (frame["step"] + 1) + 150.0 * (frame["step"] // 6 + 1)) / 1e3
    frame["end_unix_s"] = ends + 0.0005 * frame["rank"]  # half a millisecond apart
    assert find(frame) == {}
    # the same records without end times (a run directory from before them): by step time
    assert find(frame.drop(columns="end_unix_s"))[(2, "real")].rank == 0
