"""How far the truth itself moves between runs, and pipeprof's class on the rows where it stays.

Each run of ``run.py`` measures its truth anew: the machine's figures for the fluid truth and,
for the emulated rows whose fluid truth is under 20%, one round of the plain loop's loss
(``reference.py``). A class is scored against that one round. Where two runs' truths for
the same row fall on both sides of a line, the row's class is not known to the suite: no
verdict can be scored right on it in every run, and "on the line" is what the truths say.

This script reads the recorded runs (``results-*.txt``, the report ``run.py`` writes), prints
each row's truths across them, and marks the row *settled* when at least two runs measured it
and every one of them put it in the same class. A run counts for a row when its truth came
the same way as today's: the plain loop measured that row in it, or the row is one the plain
loop never measures (CPU-trained, or a fluid truth of 20% or more there). Then it scores one run's
verdicts (the last file, or ``--score``) twice: on every row, as ``run.py`` does, and on the
settled rows only. It changes no truth and no score of ``run.py``'s; it only says which rows
the recorded runs could judge. ::

    .venv/bin/python benchmarks/truth/truth_spread.py [--score FILE] [FILE ...]

``--smoke`` reads the recorded runs as the default does (it is quick) and checks that every
one gave rows, that some row is settled and that the scored run's rows were scored.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
from benchmarks import harness  # noqa: E402
from benchmarks.truth.run import CLASSES, LINES, REFERENCE_BELOW, klass  # noqa: E402

# the runs on the plain loop as it is now: three phases in one launch since 0c0507e (np >= 2),
# np = 1 measured too since ec71c5b; the run on 18d453e and older ran it otherwise. From
# eeff803 on it is measured just after the case's own run, the mean of two rounds in one launch
RUNS = (
    "results-2026-11-27-0c0507e.txt",
    "results-2026-11-27-f2d7c65.txt",
    "results-2026-11-27-52325ee.txt",
    "results-2026-11-27-6f90ed9-validation.txt",
    "results-2026-11-27-ab644bc-validation.txt",
    "results-2026-11-27-eeff803-validation.txt",
)

ROW = re.compile(
    r"^(?P<set>validation|calibration)\s+(?P<case>\S+)\s+(?P<device>\S+)\s+(?P<np>\d+)\s+"
    r"(?P<truth>-?[\d.]+)%\s+(?P<gap>-?[\d.]+|nan)% ±\s*(?P<ci>[\d.]+|nan)\s+"
    r"(?P<true_class>not|moderately|highly)\s+(?P<got_class>.+?)\s+"
    r"(?P<true_stage>map|read|none)\s+(?P<got_stage>map|read|none)(?: ✗)?\s"
)
# "val-control np=1 1.7% (fluid 0.0%)"; since eeff803 with the rounds:
# "val-control np=1 1.3% (rounds 0.9, 1.7; fluid 0.0%)"
REFERENCE = re.compile(r"([\w.-]+) np=(\d+) -?[\d.]+% \((?:rounds [^;]*; )?fluid -?[\d.]+%\)")


@dataclass(frozen=True)
class Row:
    set: str
    case: str
    device: str  # "emulated:MS" or "cpu"
    np: int
    truth: float
    got_class: str  # "not", "moderately", "highly" or "on the N% line"
    true_stage: str
    got_stage: str


def read_run(path: Path) -> tuple[list[Row], set[tuple[str, int]]]:
    """A recorded run's rows, and the (case, np) of each row the plain loop measured in it."""
    rows: list[Row] = []
    plain: set[tuple[str, int]] = set()
    for line in path.read_text().splitlines():
        if "the loss a plain loop measured" in line:
            for ref in REFERENCE.finditer(line):
                plain.add((ref.group(1), int(ref.group(2))))
        elif m := ROW.match(line):
            got = m.group("got_class").removesuffix(" ✗").strip()
            rows.append(
                Row(
                    m.group("set"),
                    m.group("case"),
                    m.group("device"),
                    int(m.group("np")),
                    float(m.group("truth")),
                    got,
                    m.group("true_stage"),
                    m.group("got_stage"),
                )
            )
    if not rows:
        raise harness.Failed(f"{path}: no row of run.py's report in it")
    return rows, plain


def counts(row: Row, plain: set[tuple[str, int]]) -> bool:
    """Whether a run's truth for ``row`` came as it comes now (see the module's docstring)."""
    never = row.device == "cpu" or row.truth >= REFERENCE_BELOW  # no plain loop by design
    return never or (row.case, row.np) in plain


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="*", help=f"run.py reports (default: {', '.join(RUNS)})")
    p.add_argument("--score", help="the run whose verdicts to score (default: the last)")
    p.add_argument("--smoke", action="store_true", help="check the figures printed (CI)")
    args = p.parse_args()
    paths = [Path(r) for r in args.runs] or [HERE / r for r in RUNS]
    for path in paths + ([Path(args.score)] if args.score else []):
        if not path.is_file():
            raise harness.Failed(f"{path}: no such file (a report run.py wrote)")
    truths: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for path in paths:
        rows, plain = read_run(path)
        for r in rows:
            if counts(r, plain):
                truths[(r.set, r.case, r.np)].append(r.truth)
    scored, scored_plain = read_run(Path(args.score) if args.score else paths[-1])

    print(f"the truth across {len(paths)} recorded runs: {', '.join(p.name for p in paths)}")
    print(f"{'set':<12}{'case':<22}{'np':>3}  {'runs':>4}  {'truths, %':<32}{'sd':>5}  class")
    settled: set[tuple[str, str, int]] = set()
    for key in sorted(truths):
        got = truths[key]
        classes = sorted({klass(t) for t in got}, key=CLASSES.index)
        sd = f"{statistics.stdev(got):5.1f}" if len(got) > 1 else "    –"
        if len(got) < 2:
            say = "one run: its spread is not known"
        elif len(classes) == 1:
            settled.add(key)
            say = f"settled: {classes[0]}"
        else:
            lines = [f"{x:.0f}%" for x in LINES if min(got) < x <= max(got)]
            say = f"NOT settled: {' and '.join(classes)} (across the {', '.join(lines)} line)"
        shown = ", ".join(f"{t:.1f}" for t in got)
        print(f"{key[0]:<12}{key[1]:<22}{key[2]:>3}  {len(got):>4}  {shown:<32}{sd}  {say}")

    def settled_here(r: Row) -> bool:
        """Settled, and this run's truth came as the others' did (a run without the plain
        loop where it is measured now is not scored against their spread)."""
        return counts(r, scored_plain) and (r.set, r.case, r.np) in settled

    name = Path(args.score).name if args.score else paths[-1].name
    scored_sets = 0
    for which in ("calibration", "validation"):
        rows = [r for r in scored if r.set == which]
        if not rows:
            continue
        scored_sets += 1
        mine = [r for r in rows if settled_here(r)]
        right = sum(r.got_class == klass(r.truth) for r in rows)
        right_settled = sum(r.got_class == klass(r.truth) for r in mine)
        print(
            f"\n{which} rows of {name}: class right on {right} of {len(rows)} "
            f"({100 * right / len(rows):.0f}%) as run.py scores them; on the {len(mine)} rows "
            f"whose truth is settled, {right_settled} of {len(mine)}"
            + (f" ({100 * right_settled / len(mine):.0f}%)" if mine else "")
        )
        bound = [r for r in mine if r.true_stage != "none"]
        if bound:
            stage = sum(r.got_stage == r.true_stage for r in bound)
            print(f"  stage right on {stage} of the {len(bound)} settled input-bound rows")
        for r in rows:
            if not counts(r, scored_plain):
                print(f"  not scored: {r.case} np={r.np}: this run's truth had no plain loop")
            elif not settled_here(r):
                spread = truths.get((r.set, r.case, r.np), [r.truth])
                print(
                    f"  not scored: {r.case} np={r.np}: truths {min(spread):.1f}-"
                    f"{max(spread):.1f}%, this run's {r.truth:.1f}%; pipeprof said {r.got_class}"
                )
            elif r.got_class != klass(r.truth):
                print(f"  wrong: {r.case} np={r.np}: truth {r.truth:.1f}%, pipeprof {r.got_class}")
    if args.smoke:
        harness.smoke_check(bool(truths), "no row's truth read from the recorded runs")
        harness.smoke_check(bool(settled), "no row settled across the recorded runs")
        harness.smoke_check(scored_sets > 0, f"no row of {name} scored")
    return 0


if __name__ == "__main__":
    harness.entry(main)
