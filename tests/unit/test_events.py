"""Progress events: one module, one discriminator, every kind emitted by someone; a rank's
line read back as the event it printed."""

import math
import re
from pathlib import Path

from pipeprof import progress
from pipeprof.progress import KINDS, Launch, Precision, VariantDone, line, parse_line

REPO = Path(__file__).resolve().parents[2]


def test_a_progress_line_reads_back_as_the_event_printed():
    sent = Precision(
        np=2,
        variant="real",
        index=1,
        of_variants=2,
        half_pct=math.nan,
        target_pct=2.0,
        gap=True,
        steps=40,
        seconds=4.5,
    )
    got = parse_line("noise from horovodrun " + line(sent))
    assert isinstance(got, Precision) and got.np == 2 and got.gap and math.isnan(got.half_pct)
    assert parse_line(line(Launch(np=None, of_variants=1))) == Launch(np=None, of_variants=1)


def test_cut_unknown_and_foreign_lines_are_no_event():
    whole = line(VariantDone(np=1, variant="real", index=1, of_variants=2, wall_s=3.0))
    assert parse_line(whole[: len(whole) // 2]) is None  # another rank's output cut it
    assert (
        parse_line(f'{progress.PROGRESS_TAG} {{"kind": "from_a_newer_pipeprof", "np": 1}}') is None
    )
    assert parse_line("Epoch 1/3") is None


def test_every_kind_is_emitted_somewhere_and_nothing_handles_a_kind_nobody_emits():
    source = "\n".join(
        p.read_text() for p in (REPO / "pipeprof").rglob("*.py") if p.name != "progress.py"
    )
    for kind, cls in KINDS.items():
        assert re.search(rf"\b{cls.__name__}\(", source), f"{cls.__name__} ({kind}) is never made"
    assert "step_progress" not in source and '"event"' not in source  # the old second channel
