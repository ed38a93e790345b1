"""Progress events, typed, in one module: what ranks and workflows say while a run goes on.

Ranks print them on their output as ``PIPEPROF-PROGRESS {json}`` lines (the launcher merges
every rank's output into one stream; ``emit``); workflows hand them to their ``Reporter``
(``pipeprof.reporting``) directly; the dashboard, the plain terminal lines and the Prometheus
exporter receive the same dataclasses. One discriminator, ``kind``, as in the records ranks
stream (``telemetry.stream``), and every kind here is emitted by someone: a kind nobody
emits has no class.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, cast

from pipeprof.config import build

PROGRESS_TAG = "PIPEPROF-PROGRESS"  # what starts a progress line in a launch's output


@dataclass(frozen=True)
class Plan:
    """A compare's worker counts and variants, before anything starts (workflows)."""

    kind: ClassVar[str] = "plan"
    worker_counts: list[int]
    variants: list[str]


@dataclass(frozen=True)
class Launch:
    """The ranks of one worker count are being started (workflows; ``np`` None under watch)."""

    kind: ClassVar[str] = "launch"
    np: int | None
    of_variants: int
    launcher: str = ""  # what starts them ("horovodrun", "mpirun")
    hosts: str = ""  # where: "host:ranks,..." ("localhost:2" on this host alone), or Dask's words


@dataclass(frozen=True)
class RanksUp:
    """Rank 0 is set up: its device, batch and learning rate (pipeprof's own ranks)."""

    kind: ClassVar[str] = "start"
    np: int
    device: str
    per_worker_batch: int
    learning_rate: float


@dataclass(frozen=True)
class VariantStart:
    kind: ClassVar[str] = "variant_start"
    np: int
    variant: str
    index: int
    of_variants: int
    steps: int = 0  # 0: adaptive


@dataclass(frozen=True)
class StepProgress:
    """Every few steps of a variant with a fixed number of steps."""

    kind: ClassVar[str] = "progress"
    np: int
    variant: str
    index: int
    of_variants: int
    step: int
    steps: int


@dataclass(frozen=True)
class Precision:
    """An adaptive measurement's check: how narrow its interval is, against its target."""

    kind: ClassVar[str] = "precision"
    np: int
    variant: str
    index: int
    of_variants: int
    half_pct: float
    target_pct: float
    gap: bool  # the interval is the paired gap's (else the variant's throughput's)
    steps: int
    seconds: float


@dataclass(frozen=True)
class VariantDone:
    kind: ClassVar[str] = "variant_done"
    np: int
    variant: str
    index: int
    of_variants: int
    wall_s: float
    steps: int = 0
    stop_reason: str = ""
    half_pct: float = math.nan


@dataclass(frozen=True)
class RankWarning:
    """What a rank must tell the user, not only its log (a rank that cannot reach the
    launcher's record stream): the workflow passes it to its reporter's ``warning``."""

    kind: ClassVar[str] = "rank_warning"
    rank: int
    host: str
    message: str

    def text(self) -> str:
        return f"rank {self.rank} on {self.host}: {self.message}"


Event = (
    Plan | Launch | RanksUp | VariantStart | StepProgress | Precision | VariantDone | RankWarning
)
KINDS: dict[str, type[Event]] = {
    c.kind: c
    for c in (
        Plan,
        Launch,
        RanksUp,
        VariantStart,
        StepProgress,
        Precision,
        VariantDone,
        RankWarning,
    )
}


def to_dict(event: Event) -> dict[str, Any]:
    return {"kind": event.kind, **asdict(event)}


def from_dict(data: dict[str, Any]) -> Event | None:
    """The event a dict describes; None for a kind this pipeprof does not know (a newer one's)."""
    cls = KINDS.get(str(data.get("kind", "")))
    if cls is None:
        return None
    known = {f.name for f in fields(cls)}
    return cast(
        Event, build(cls, {k: v for k, v in data.items() if k in known}, "progress event", "")
    )


def line(event: Event) -> str:
    return f"{PROGRESS_TAG} {json.dumps(to_dict(event))}"


_sink: Callable[[Event], None] | None = None  # where events go instead of stdout (emit_to)


def emit(event: Event) -> None:
    """Print ``event`` for the launcher (a rank's side), or hand it to the sink ``emit_to``
    set (a rank no pipeprof launcher reads: ``pipeprof rank`` shows its events itself)."""
    if _sink is not None:
        _sink(event)
    else:
        print(line(event), flush=True)


def emit_to(sink: Callable[[Event], None] | None) -> None:
    """Send this process's events to ``sink`` (None: back to stdout, for the launcher)."""
    global _sink
    _sink = sink


def parse_line(text: str) -> Event | None:
    """The event in a launch's output line, None if it holds none (or a cut one: another
    rank's output may interleave; the next line will do)."""
    if PROGRESS_TAG not in text:
        return None
    try:
        return from_dict(json.loads(text.split(PROGRESS_TAG, 1)[1]))
    except (ValueError, TypeError):
        return None
