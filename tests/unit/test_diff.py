"""pipeprof diff's arithmetic, on hand-worked rows: the change, its 95% interval (the two
runs' half-widths in quadrature), the call it supports, and --fail-on."""

import math

import pandas as pd
import pytest

from pipeprof.analysis.diff import FailOn, diff, failures, unjudged, unmatched


def summary(*rows):
    cols = ["np", "variant", "samples_per_s", "samples_per_s_ci95", "gap_pct", "gap_pct_ci95"]
    return pd.DataFrame(rows, columns=cols)


BEFORE = summary(
    (1, "synthetic", 1000.0, 30.0, math.nan, math.nan),
    (1, "real", 700.0, 21.0, 30.0, 2.0),
    (2, "real", 1200.0, 60.0, 25.0, 3.0),
    (4, "real", 2000.0, 80.0, 20.0, 2.0),
)
AFTER = summary(
    (1, "synthetic", 1000.0, 40.0, math.nan, math.nan),
    (1, "real", 800.0, 28.0, 20.0, 1.5),  # +100 ±35 of 700: +14.3% ±5.0; gap −10 ±2.5
    (2, "real", 1170.0, 80.0, 27.0, 4.0),  # −30 ±100 of 1200: −2.5% ±8.3; gap +2 ±5
    (8, "real", 3000.0, 90.0, 40.0, 2.0),  # no np=8 before
)


def test_each_change_its_interval_and_its_call():
    rows = diff(BEFORE, AFTER).set_index(["np", "variant"])
    assert list(rows.index) == [(1, "synthetic"), (1, "real"), (2, "real")]
    r = rows.loc[(1, "real")]
    assert r["samples_per_s_change_pct"] == pytest.approx(100 / 7)
    assert r["samples_per_s_change_ci95"] == pytest.approx(5.0)  # hypot(21, 28) = 35, of 700
    assert r["samples_per_s_call"] == "better"
    assert (r["gap_change_points"], r["gap_change_ci95"], r["gap_call"]) == (-10.0, 2.5, "better")
    r = rows.loc[(2, "real")]
    assert r["samples_per_s_change_pct"] == pytest.approx(-2.5)
    assert r["samples_per_s_change_ci95"] == pytest.approx(100 * 100 / 1200)  # hypot(60, 80)
    assert (r["samples_per_s_call"], r["gap_call"]) == ("no change", "no change")
    assert (r["gap_change_points"], r["gap_change_ci95"]) == (2.0, 5.0)
    r = rows.loc[(1, "synthetic")]  # the ceiling has no gap: no call on it
    assert (r["samples_per_s_call"], r["gap_call"]) == ("no change", "")
    # the other direction: the same rows called worse
    back = diff(AFTER, BEFORE).set_index(["np", "variant"]).loc[(1, "real")]
    assert (back["samples_per_s_call"], back["gap_call"]) == ("worse", "worse")
    assert unmatched(BEFORE, AFTER) == (["np=4 real"], ["np=8 real"])


def test_a_row_without_an_interval_says_so():
    rows = diff(BEFORE, summary((1, "real", 800.0, math.nan, 20.0, math.nan)))
    assert (rows.iloc[0]["samples_per_s_call"], rows.iloc[0]["gap_call"]) == (
        "no interval",
        "no interval",
    )


def test_fail_on_names_what_got_worse_beyond_its_threshold():
    back = diff(AFTER, BEFORE)  # np=1 real: gap +10 ±2.5 points, samples/s −12.5% ±4.4
    assert failures(back, [FailOn.parse("gap:2")]) == [
        "np=1 real: gap +10.0 points ±2.5: worse by more than 2 points (--fail-on gap:2)"
    ]
    assert failures(back, [FailOn.parse("gap:10")]) == []  # worse, but not by more than 10
    assert failures(back, [FailOn.parse("samples_per_s:5%")]) == [
        "np=1 real: samples/s -12.5% ±4.4: worse by more than 5% (--fail-on samples_per_s:5)"
    ]
    # np=2's gap +2 ±5 is no change, whatever the threshold
    assert failures(diff(BEFORE, AFTER), [FailOn.parse("gap:0")]) == []


@pytest.mark.parametrize(
    "text,says",
    [
        ("gapp:2", "the figure must be one of samples_per_s, gap"),
        ("gap:two", "the threshold after ':' must be a number (points)"),
        ("samples_per_s:-1", "the threshold must be 0 or more"),
    ],
)
def test_a_bad_fail_on_is_one_line(text, says):
    with pytest.raises(ValueError) as exc:
        FailOn.parse(text)
    assert says in str(exc.value) and str(exc.value).startswith(f"--fail-on {text}:")


def test_what_fail_on_cannot_judge_is_named():
    """A CI gate must not pass on a row it could not judge: one without an interval, or one
    the before run measured and the after run lost."""
    rows = diff(BEFORE, summary((1, "real", 800.0, math.nan, 20.0, 1.5)))
    rules = [FailOn.parse("samples_per_s:5"), FailOn.parse("gap:2")]
    only, _ = unmatched(BEFORE, AFTER)
    assert unjudged(rows, rules, only) == [
        "np=4 real: measured before, not after",
        "np=1 real: samples_per_s has no interval in one run",
    ]
    assert unjudged(rows, [], only) == []  # no rule, nothing to judge
    # a ceiling's row has no gap to judge: not counted against the gate
    ceiling = diff(BEFORE, summary((1, "synthetic", 1000.0, 40.0, math.nan, math.nan)))
    assert unjudged(ceiling, [FailOn.parse("gap:2")], []) == []
