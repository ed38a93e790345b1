"""The one orchestration loop of a compare, for pipeprof's scenarios and a user's script
alike: one launch per worker count, in order; after each, what the ranks streamed is taken in
and the results so far are handed on; the first failure ends the loop, and so does a stop
signal between launches. Nothing measured before is lost, and the teardown is the same for
every compare: the record stream closes, then the stop signal (if any) becomes the outcome."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeprof.launch import signals
from pipeprof.launch.runner import LaunchResult
from pipeprof.workflows.live import RecordStream


@dataclass
class Outcome:
    failure: str | None = None  # one line; None when every launch ended well
    signum: int | None = None  # the stop signal that ended it early


# one worker count's launch: its result, or (None, why it could not start); then its failure line
Launch = Callable[[int], tuple[LaunchResult | None, str | None]]


def each_worker_count(
    nps: list[int],
    launch: Launch,
    *,
    stream: RecordStream,
    caught: signals.Catch,
    run_dir: Path,
    after: Callable[[int], None],
) -> Outcome:
    """``launch(n)`` for each worker count, then ``after(n)`` (the results so far), stopping at
    the first launch that returns a failure line; ``caught`` (entered here) turns a stop
    signal between launches into the outcome, and stays usable for what the caller does next."""
    out = Outcome()
    with caught, stream:
        for n in nps:
            result, failure = launch(n)
            stream.after_launch()
            after(n)
            if failure is not None:
                out.failure, out.signum = failure, result.signum if result is not None else None
                break
    stream.close()
    out.failure, out.signum = caught.outcome(out.failure, out.signum, run_dir)
    return out
