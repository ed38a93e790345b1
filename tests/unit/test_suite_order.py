"""Every launch file has its measured seconds in tests/conftest.py, so the two workers take the
long ones first: a file left out counts as short and ran last (the truth slice's 147 s once
did, beside the unit files, with the other worker idle)."""

import re
from pathlib import Path

from tests.conftest import LAUNCH_FILE_SECONDS

TESTS = Path(__file__).resolve().parents[1]


def test_every_launch_file_that_shares_the_cores_has_its_seconds():
    shared = set()
    for path in TESTS.rglob("test_*.py"):
        text = path.read_text()
        marks = re.search(r"^pytestmark = (.+)$", text, re.M)
        module = marks.group(1) if marks else ""
        if "alone" in module:
            continue
        # the file's mark, a test's, or a parameter's (pytest.param(..., marks=...))
        if "horovod" in module or re.search(r"pytest\.mark\.horovod\b", text):
            shared.add(path.name)
    assert shared == set(LAUNCH_FILE_SECONDS), (
        shared - set(LAUNCH_FILE_SECONDS),
        set(LAUNCH_FILE_SECONDS) - shared,
    )
