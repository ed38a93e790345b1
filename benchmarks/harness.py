"""What the benchmark scripts share: where things are, running pipeprof, reading its results,
taking turns.

Each script in benchmarks/ measures one thing and prints it. Before this module each one also
carried its own copy of the repository's path and of the pipeprof command, its own subprocess
wrapper and its own reader of summary.csv, and the copies had drifted apart: four ways of
reading a run directory, a different report of a failed run in almost every script (an output
tail, a traceback, a log file), the A/B order of a round written out several times. Here is
one of each:

* paths: ``REPO``, put first on ``sys.path`` when this module is imported, so that a script
  imports this checkout's ``pipeprof``, ``tests`` and ``benchmarks`` even when it runs from a
  copy of the tree; ``PIPEPROF``, this interpreter's ``python -m pipeprof``, which run from
  ``REPO`` is this checkout's pipeprof (the venv's console script is whichever checkout was
  installed); ``tool`` for the venv's other commands; ``horovodrun`` for a local Gloo launch;
  ``prepared`` for a scenario and its data; ``out_dir`` and ``scratch`` for run directories.
* runs: ``run`` and ``pipeprof`` start a command and wait for it. Its output goes to a log
  file, or is captured and kept in a log file of its own only if the command fails. A failure
  is a ``Failed`` of one line (what failed, how, its last line, where its output is);
  ``entry`` ends a script on it without a traceback.
* results: read through ``pipeprof.rundir.RunDir``, the reader pipeprof's own commands use,
  so a benchmark reads a run directory as ``pipeprof report`` does; a file a benchmark cannot
  do without is a ``Failed`` naming it. ``print_tagged`` and ``read_tagged`` carry figures
  from a process under horovodrun back to the script that started it.
* taking turns: ``turns`` is a round's order, rotated by one each round so that every side
  goes first as often and the machine's drift lands on all of them alike; ``in_rounds`` runs
  measurements that way and keeps each one's results in round order. (``timeslice`` shares
  the machine between two runs at once; it is a method of its own, beside this module.)

What stays in each script is what it measures and how it prints it. Importing this module is
cheap: pipeprof, and pandas with it, is imported only when a scenario or a result is read.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

if TYPE_CHECKING:
    import pandas as pd

    from pipeprof.scenario import Scenario

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PIPEPROF = [sys.executable, "-m", "pipeprof"]  # run from REPO: this checkout's pipeprof

T = TypeVar("T")
R = TypeVar("R")


# --- paths -----------------------------------------------------------------------------------


def tool(name: str) -> str:
    """A command of this interpreter's environment (the venv's ``horovodrun``), else from PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        raise Failed(f"{name} not found next to {sys.executable} or on PATH")
    return found


def horovodrun(np: int) -> list[str]:
    """The start of a horovodrun command for ``np`` ranks on this host over Gloo; the ranks'
    command follows it."""
    return [tool("horovodrun"), "-np", str(np), "-H", f"localhost:{np}", "--gloo"]


def prepared(name: str) -> tuple[Scenario, str]:
    """A scenario (a built-in name or a TOML file) and the root of its data, made first if it
    is not there yet, as compare makes it. A script calls it once before two runs that would
    both want to make the data."""
    from pipeprof import scenario
    from pipeprof.reporting import Reporter
    from pipeprof.workflows.data import prepare_data

    loaded = scenario.load(name)
    return loaded, prepare_data(loaded, Reporter())


def out_dir(given: str | Path | None, prefix: str) -> Path:
    """Where a script keeps what it writes: ``given`` (its ``--out``) or, without one, a new
    temporary directory named ``prefix...``; made either way, and left in place."""
    path = Path(given or tempfile.mkdtemp(prefix=prefix))
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def scratch(keep: str | Path | None = None) -> Iterator[Path]:
    """Where a script's run directories go while it runs: ``keep`` (its ``--keep DIR``) when
    given, kept; otherwise a temporary directory, removed on the way out."""
    if keep:
        yield Path(keep)
        return
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)


# --- runs ------------------------------------------------------------------------------------


class Failed(RuntimeError):
    """A run, or a result, that a benchmark needs and did not get: one line. ``code`` is the
    command's exit status (None when it timed out or no command was involved), ``last_line``
    the last line it printed (for pipeprof, usually its own one-line error)."""

    def __init__(self, message: str, code: int | None = None, last_line: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.last_line = last_line


def failure(
    what: str,
    code: int | None,
    output: str,
    log: Path | None = None,
    shown: str = "",
    timeout: float | None = None,
) -> Failed:
    """The ``Failed`` of a command that exited with ``code`` (None: it ran past ``timeout``).
    Its ``output`` is in ``log`` already, or is written now to a new log file in the temporary
    folder (under ``$ shown``, the command), so the one line can say where to read it."""
    last = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "")
    if log is None:
        fd, name = tempfile.mkstemp(prefix="pipeprof-bench-", suffix=".log")
        with os.fdopen(fd, "w") as fh:
            fh.write((f"$ {shown}\n" if shown else "") + output)
        log = Path(name)
    how = f"exit {code}" if code is not None else f"timed out after {timeout:g} s"
    said = f": {last[:200]}" if last else ""
    return Failed(f"{what} failed ({how}){said} (output: {log})", code, last)


def _text(data: str | bytes | None) -> str:
    # TimeoutExpired carries bytes even where the run asked for text
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def _joined(stdout: str, stderr: str) -> str:
    return "\n".join(part.rstrip("\n") for part in (stdout, stderr) if part) + "\n"


def run(
    argv: Sequence[str],
    *,
    what: str,
    log: Path | None = None,
    cwd: str | Path = REPO,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    shown: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to its end, in ``REPO`` unless ``cwd`` says otherwise.

    With ``log``, the command's output (stdout and stderr together) is appended to that file
    after a ``$ command`` line (``shown``, or argv), and the result carries none. Without, stdout
    and stderr are captured apart (so that a tagged line on stdout stays whole) and returned.
    A non-zero exit or a time-out raises ``failure(what, ...)``."""
    shown = shown or " ".join(map(str, argv))
    if log is None:
        try:
            proc = subprocess.run(
                list(argv), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired as exc:
            out = _joined(_text(exc.stdout), _text(exc.stderr))
            raise failure(what, None, out, shown=shown, timeout=timeout) from None
        if proc.returncode != 0:
            raise failure(what, proc.returncode, _joined(proc.stdout, proc.stderr), shown=shown)
        return proc
    code: int | None
    with log.open("a") as fh:
        fh.write(f"$ {shown}\n")
        fh.flush()
        start = log.stat().st_size
        try:
            code = subprocess.run(
                list(argv), stdout=fh, stderr=subprocess.STDOUT, cwd=cwd, env=env, timeout=timeout
            ).returncode
        except subprocess.TimeoutExpired:
            code = None
    if code != 0:
        with log.open("rb") as fh:
            fh.seek(start)
            out = fh.read().decode(errors="replace")
        raise failure(what, code, out, log=log, timeout=timeout)
    return subprocess.CompletedProcess(list(argv), 0, "", "")  # its output is in the log


def pipeprof(
    args: Sequence[str],
    *,
    what: str | None = None,
    log: Path | None = None,
    cwd: str | Path = REPO,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """``pipeprof ARGS`` (``PIPEPROF``), as ``run`` runs a command; a failure reads
    ``pipeprof SUBCOMMAND failed ...`` unless ``what`` says otherwise."""
    return run(
        [*PIPEPROF, *args],
        what=what or f"pipeprof {args[0]}",
        log=log,
        cwd=cwd,
        env=env,
        timeout=timeout,
        shown=f"pipeprof {' '.join(args)}",
    )


def entry(main: Callable[[], int | None]) -> NoReturn:
    """Run a script's ``main`` and exit with its status; a ``Failed`` ends the script with its
    one line on stderr (exit 1) instead of a traceback."""
    try:
        code = main()
    except Failed as exc:
        sys.exit(f"error: {exc}")
    sys.exit(code or 0)


def print_tagged(tag: str, figures: Mapping[str, Any]) -> None:
    """One line ``TAG {json}`` on stdout, flushed: how a process under horovodrun hands its
    figures to the script that started it (``read_tagged``)."""
    print(f"{tag} {json.dumps(figures)}", flush=True)


def read_tagged(output: str, tag: str) -> dict[str, Any] | None:
    """The figures of the first ``TAG {json}`` line in ``output`` (horovodrun may have put a
    rank's prefix before the tag); None when there is none."""
    for line in output.splitlines():
        if f"{tag} " in line:
            figures: dict[str, Any] = json.loads(line.split(f"{tag} ", 1)[1])
            return figures
    return None


# --- results ---------------------------------------------------------------------------------


def _results(run_dir: str | Path, needed: str) -> Any:
    from pipeprof.rundir import RunDir

    results = RunDir(run_dir)
    if not (results.path / needed).is_file():
        raise Failed(f"{results.path}: no {needed}")
    return results


def summary(run_dir: str | Path) -> pd.DataFrame:
    """summary.csv: one row per (np, variant), as compare wrote it."""
    frame: pd.DataFrame = _results(run_dir, "summary.csv").summary()
    return frame


def prediction(run_dir: str | Path) -> pd.DataFrame:
    """prediction.csv: one row per target np, as predict wrote it into the source run."""
    frame: pd.DataFrame = _results(run_dir, "prediction.csv").prediction()
    return frame


def verdicts(run_dir: str | Path) -> list[dict[str, Any]]:
    """verdict.json: one verdict per np (compare --verdict or --ablation)."""
    found: list[dict[str, Any]] = _results(run_dir, "verdict.json").verdicts()
    return found


def measured_steps(run_dir: str | Path, variant: str | None = None) -> pd.DataFrame:
    """The step records of the measured steps (warm-up left out), one variant's if given.
    ``RunDir.steps``: rank 0's step files, and the streamed steps of a launch that never
    finished; a twin's steps paired with a real variant are left out."""
    from pipeprof.rundir import RunDir

    steps = RunDir(run_dir).steps()
    keep = ~steps["warmup"].astype(bool)
    if variant is not None:
        keep &= steps["variant"] == variant
    return steps[keep]


def variant_runs(run_dir: str | Path) -> list[dict[str, Any]]:
    """variants.jsonl: one line per (np, variant) launched, with its wall time."""
    from pipeprof.rundir import RunDir

    return RunDir(run_dir).variant_runs()


# --- taking turns ----------------------------------------------------------------------------


def turns(sides: Sequence[T], round_index: int) -> list[T]:
    """The order of round ``round_index`` (from 0): ``sides`` rotated by one place a round
    (A B, then B A; A B C, B C A, C A B), so each goes first as often as the others."""
    k = round_index % len(sides)
    return [*sides[k:], *sides[:k]]


def in_rounds(rounds: int, sides: Mapping[str, Callable[[], R]]) -> dict[str, list[R]]:
    """Call every side once a round, in ``turns`` order, for ``rounds`` rounds; each side's
    results in round order (so a ratio can be taken within each round)."""
    got: dict[str, list[R]] = {name: [] for name in sides}
    for r in range(rounds):
        for name in turns(list(sides), r):
            got[name].append(sides[name]())
    return got


# --- smoke modes -----------------------------------------------------------------------------


def smoke_check(ok: bool, what: str) -> None:
    """End a ``--smoke`` run (exit 1, one line) where a figure it printed is missing or absurd:
    ``what`` says which. A smoke run checks that the benchmark runs and prints sane figures,
    never whether its target is met."""
    if not ok:
        raise Failed(f"smoke: {what}")


def finite_positive(value: float) -> bool:
    """A measured rate or ratio a smoke run can accept: a number, finite, above 0."""
    return isinstance(value, (int, float)) and value == value and 0 < value < float("inf")


SMOKE_SCENARIO = """name = "smoke"
description = "a smoke run's: 96 generated 48 px JPEGs, 3 classes, no augmentation, the small CNN at 32 px"
[data]
source = "generated"
image_size = 32
num_classes = 3
[data.generate]
images = 96
size = 48
classes = 3
[pipeline.shuffle]
buffer_size = 16
[pipeline.augment]
enabled = false
[train]
batch_size = 8
warmup_steps = 3
"""


def smoke_scenario(folder: str | Path, extra: str = "") -> Path:
    """A tiny scenario for a smoke run, written into ``folder`` (``extra``: more TOML, e.g. a
    [train] device); its data is generated on first use, as any scenario's."""
    path = Path(folder) / "smoke.toml"
    path.write_text(SMOKE_SCENARIO + extra)
    return path


def parse_smoke(
    parser: argparse.ArgumentParser, smoke: Mapping[str, Any], argv: Sequence[str] | None = None
) -> argparse.Namespace:
    """A script's arguments. With its ``--smoke`` flag (``args.smoke``) given, ``smoke`` (dest:
    value) becomes the default of its other flags, so that a flag given explicitly still wins."""
    args = parser.parse_args(argv)
    if args.smoke:
        parser.set_defaults(**smoke)
        args = parser.parse_args(argv)
    return args


def prepared_with(name: str, sets: Sequence[str] = ()) -> tuple[Scenario, str]:
    """``prepared``, with the scenario overridden by ``KEY=VALUE`` strings as pipeprof's
    ``--set`` overrides it: the data that runs given those ``--set`` flags will want."""
    from pipeprof import scenario
    from pipeprof.reporting import Reporter
    from pipeprof.workflows.data import prepare_data

    loaded = scenario.load(name, [scenario.parse_override(s) for s in sets])
    return loaded, prepare_data(loaded, Reporter())
