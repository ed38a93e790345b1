import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(os.environ.get("PIPEPROF_BIN", REPO / ".venv" / "bin"))


def small_scenario(name: str, steps: int, extra: str = "") -> str:
    """A scenario on 90 generated 40px images (3 classes), batch 8, ``steps`` fixed measured steps."""
    return f"""
name = "{name}"
[data]
source = "generated"
image_size = 32
num_classes = 3
[data.generate]
images = 90
size = 40
classes = 3
[train]
batch_size = 8
warmup_steps = 5
measure_steps = {steps}
{extra}"""


def verdict_of(gap: float, half: float) -> str:
    """The verdict line a gap and its 95% half-width give (the 5% and 20% lines of README.md)."""
    spanned = [b for b in (5.0, 20.0) if gap - half < b < gap + half]
    if spanned:
        return f"on the {spanned[0]:g}% line"
    return (
        "not input-bound"
        if gap < 5
        else "moderately input-bound"
        if gap < 20
        else "highly input-bound"
    )


@pytest.fixture(scope="session")
def data_cache_dir(tmp_path_factory):
    """Where tests let pipeprof generate built-in datasets (shared by the pytest session)."""
    return tmp_path_factory.mktemp("pipeprof-data")


def run_pipeprof(
    *argv: str, data: Path | None = None, timeout: float = 600, ok: bool = True, **env: str
) -> subprocess.CompletedProcess:
    """``python -m pipeprof ARGV`` from the repository, as a user runs it, its output kept;
    ``data``: where it generates built-in data sets; ``env``: more variables. ``ok``: fail the
    test with the output's tail unless it exits 0."""
    more = {"PIPEPROF_DATA_DIR": str(data)} if data is not None else {}
    got = subprocess.run(
        [sys.executable, "-m", "pipeprof", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, **more, **env},
    )
    if ok:
        assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
    return got


def pipeprof_cmd() -> list[str]:
    exe = VENV_BIN / "pipeprof"
    return [str(exe)] if exe.exists() else ["pipeprof"]


def real_rows_agree_with_their_table(summary) -> None:
    """Each real row of a summary.csv (a DataFrame) has the gap its table says:
    1 - samples/s ÷ its ceiling, within the gap's own interval."""
    for _, row in summary[summary["variant"] == "real"].iterrows():
        said = 100 * (1 - row["samples_per_s"] / row["twin_samples_per_s"])
        assert abs(said - row["gap_pct"]) <= max(row["gap_pct_ci95"], 0.5), row.to_dict()
