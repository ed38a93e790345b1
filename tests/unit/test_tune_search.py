"""The tuner's search, against objectives whose optimum is known."""

import itertools

import pytest

from pipeprof.analysis.stats import STOP_LOST, STOP_MAX_TIME
from pipeprof.scenario import PipelineConfig
from pipeprof.tune import space as sp
from pipeprof.tune.search import coordinate_descent

SPACE = [
    sp.Dimension("parallel_calls", (1, 2, 4, "autotune")),
    sp.Dimension("prefetch", (1, 4, "autotune")),
    sp.Dimension("private_threadpool_size", (0, 2, 4)),
    sp.Dimension("max_intra_op_parallelism", (0, 1)),
    sp.Dimension("cache", ("off", "before_augment")),
]


def separable(point, window=None):
    """A smooth objective with a unique optimum: parallel 4, prefetch autotune, pool 2, intra 1, cache on."""
    score = {1: 100, 2: 180, 4: 240, "autotune": 230}[point["parallel_calls"]]
    score *= {1: 0.8, 4: 0.97, "autotune": 1.0}[point["prefetch"]]
    score *= {0: 0.9, 2: 1.0, 4: 0.95}[point["private_threadpool_size"]]
    score *= {0: 0.98, 1: 1.0}[point["max_intra_op_parallelism"]]
    score *= {"off": 0.7, "before_augment": 1.0}[point["cache"]]
    return {"samples_per_s": score, "cpu_cores_used": 1.0}


def test_finds_the_optimum_of_a_separable_objective_with_far_fewer_trials_than_the_grid():
    start = {
        "parallel_calls": 1,
        "prefetch": 1,
        "private_threadpool_size": 0,
        "max_intra_op_parallelism": 0,
        "cache": "off",
    }
    res = coordinate_descent(SPACE, start, separable, budget_s=1e9)
    grid_best = max(sp.grid(SPACE), key=lambda p: separable(p)["samples_per_s"])
    assert res.best.point == grid_best
    assert len(res.trials) <= 0.5 * len(sp.grid(SPACE))


def drifting_machine(objective, slow_from_s: float):
    """``objective`` on a machine that slows by a fifth at ``slow_from_s``; a trial takes its
    window's length, or its minimum when the rate cannot beat the bar."""
    clock = [0.0]

    def evaluate(point, window):
        rate = objective(point)["samples_per_s"] * (1.0 if clock[0] < slow_from_s else 0.8)
        lost = window.beat is not None and rate < window.beat
        took = window.min_s if lost else window.max_s
        clock[0] += took
        return {
            "samples_per_s": rate,
            "seconds": took,
            "stop": STOP_LOST if lost else STOP_MAX_TIME,
        }

    return evaluate, lambda: clock[0]


def test_a_slowdown_mid_search_does_not_hide_a_better_setting():
    # only the cache matters (+10%) and it is swept last; the machine slows after the incumbent
    # was measured: held to that stale figure, the cache would lose (0.8 x 1.1 < 1.02)
    def cache_only(point, window=None):
        return {"samples_per_s": 110.0 if point["cache"] == "before_augment" else 100.0}

    evaluate, clock = drifting_machine(cache_only, slow_from_s=4.0)
    res = coordinate_descent(
        SPACE,
        {d.name: d.values[0] for d in SPACE},
        evaluate,
        budget_s=1e9,
        trial_s=1.0,
        clock=clock,
    )
    assert res.best.point["cache"] == "before_augment"
    # before the cache was swept, the incumbent was measured again after the slowdown
    cache_trial = next(i for i, t in enumerate(res.trials) if t.point["cache"] == "before_augment")
    before = [t for t in res.trials[:cache_trial] if t.phase == "recheck"]
    assert before and before[-1].samples_per_s == 80.0


def test_a_lucky_fast_trial_is_confirmed_against_the_incumbent_before_the_search_moves():
    # every setting is the same (100/s); one trial of one candidate catches a fast second (+10%)
    lucky = {
        "parallel_calls": 2,
        "prefetch": 1,
        "private_threadpool_size": 0,
        "max_intra_op_parallelism": 0,
        "cache": "off",
    }
    calls = []

    def evaluate(point, window):
        calls.append(dict(point))
        fast = point == lucky and calls.count(lucky) == 1
        return {"samples_per_s": 110.0 if fast else 100.0}

    res = coordinate_descent(SPACE, {d.name: d.values[0] for d in SPACE}, evaluate, budget_s=1e9)
    confirms = [t for t in res.trials if t.phase == "confirm"]
    assert len(confirms) == 1 and confirms[0].point == {d.name: d.values[0] for d in SPACE}
    search = [t for t in res.trials if t.phase == "search"]
    assert len(search) == sum(
        len(d.values) - 1 for d in SPACE
    )  # one round of sweeps: the search never moved


def test_a_candidate_that_cannot_win_stops_at_its_minimum():
    evaluate, clock = drifting_machine(separable, slow_from_s=1e9)
    windows = []
    res = coordinate_descent(
        SPACE,
        {d.name: d.values[0] for d in SPACE},
        lambda p, w: windows.append(w) or evaluate(p, w),
        budget_s=1e9,
        trial_s=1.0,
        clock=clock,
    )
    lost = [t for t in res.trials if t.stop == STOP_LOST]
    assert lost and all(t.seconds == 0.5 and t.phase == "search" for t in lost)
    search = [(t, w) for t, w in zip(res.trials, windows) if t.phase == "search"]
    assert all(
        w.beat is not None and w.target_pct == 1.0 for _, w in search
    )  # held to the incumbent + 2%
    assert res.best.phase == "run-off"


def test_budget_stops_the_search_and_still_returns_the_best_so_far():
    t = itertools.count()
    res = coordinate_descent(
        SPACE, {d.name: d.values[0] for d in SPACE}, separable, budget_s=3.5, clock=lambda: next(t)
    )
    assert res.stopped_by_budget and res.best is not None and len(res.trials) < 12


def test_disallowed_points_are_never_measured():
    measured = []

    def f(p, w):
        measured.append(p)
        return separable(p, w)

    coordinate_descent(
        SPACE,
        {d.name: d.values[0] for d in SPACE},
        f,
        budget_s=1e9,
        allowed=lambda p: p["cache"] == "off",
    )
    assert all(p["cache"] == "off" for p in measured)


def test_failing_points_never_win():
    def f(p, w):
        if p["parallel_calls"] == 4:
            return {"error": "boom"}
        return separable(p, w)

    res = coordinate_descent(SPACE, {d.name: d.values[0] for d in SPACE}, f, budget_s=1e9)
    assert res.best.point["parallel_calls"] == "autotune" and not res.best.error


def test_points_become_pipelines_and_toml_fragments():
    base = PipelineConfig()
    p = sp.apply(
        base,
        {
            "parallel_calls": 3,
            "prefetch": 2,
            "private_threadpool_size": 4,
            "max_intra_op_parallelism": 1,
            "cache": "before_augment",
            "shuffle_buffer": 64,
        },
    )
    assert (
        p.parallel_calls,
        p.prefetch.depth,
        p.private_threadpool_size,
        p.max_intra_op_parallelism,
    ) == (3, 2, 4, 1)
    assert p.cache.enabled and p.cache.kind == "memory" and p.shuffle.buffer_size == 64
    import tomllib

    frag = tomllib.loads(sp.fragment_toml(p))
    assert frag["pipeline"]["parallel_calls"] == 3 and frag["pipeline"]["cache"]["enabled"] is True
    assert "num_parallel_calls=3" in sp.tfdata_code(p) and "ds.cache()" in sp.tfdata_code(p)
    assert sp.point_of(base, sp.default_space(2))["cache"] == "off"
    assert sp.autotune_point(base, sp.default_space(2))["parallel_calls"] == "autotune"


@pytest.mark.parametrize("cores", [1, 2, 8])
def test_default_space_scales_with_cores(cores):
    dims = {d.name: d.values for d in sp.default_space(cores)}
    assert cores in dims["parallel_calls"] and "autotune" in dims["parallel_calls"]
    assert len(set(dims["private_threadpool_size"])) == len(dims["private_threadpool_size"])


def test_a_trial_budget_ends_the_search_after_that_many_trials_whatever_the_time_left():
    start = {
        "parallel_calls": 1,
        "prefetch": 1,
        "private_threadpool_size": 0,
        "max_intra_op_parallelism": 0,
        "cache": "off",
    }
    res = coordinate_descent(SPACE, start, separable, budget_s=1e9, max_trials=4)
    assert res.stopped_by_budget
    assert sum(t.phase != "run-off" for t in res.trials) == 4  # then the run-off of the best few
    unbounded = coordinate_descent(SPACE, start, separable, budget_s=1e9)
    assert not unbounded.stopped_by_budget and len(unbounded.trials) > 4
