"""Fit predict's busy-core share κ on a kept truth run's calibration cases, and score it.

Reads a ``run.py --keep`` directory and runs nothing: predict is re-run in-process from each
case's np=1 measurements (``hop_fit.Kept``), with the CLI's ring-step latency.

``busy_sync_ms``'s term, κ × ρ × P, is what a rank's busy cores add to a synchronous step.
The rows it applies to are those at np 2 and 4 where it sets predict's step (their predicted
gap moves with κ). For each such calibration row, the κ at which predict's gap equals the
measured one (bisected in [0, KAPPA_MAX]); κ is the median of these. The validation rows' same
figures are printed beside, never used. Then predict's gaps on both sets with the κ in the
code and with the fitted one (or ``--kappa``), judged as ``run.py`` judges them.

    .venv/bin/python benchmarks/truth/busy_fit.py KEPT_DIR [--kappa K] [-v] [--smoke]

``--smoke`` (CI, on the directory ``run.py --smoke --keep`` left): as above, but where no
calibration row has the term set its step (a smoke run's one light case) κ is the code's; then
a check that the rows were scored.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks import harness  # noqa: E402
from benchmarks.truth.hop_fit import SETS, Kept, fit_args, smoke_checks  # noqa: E402
from pipeprof.analysis import predict as model  # noqa: E402

KAPPA_MAX = 2.0
MOVES_PTS = 0.5  # a row the term applies to: its gap moves this much from κ = 0 to the code's κ


def at(kept: Kept, case: str, n: int, kappa: float) -> model.Prediction:
    """predict's figures for ``case`` at ``n`` with κ = ``kappa`` and the CLI's α."""
    model.BUSY_SYNC = kappa
    return kept.predicted(case, model.HOP_MS)[n]


def gap(kept: Kept, case: str, n: int, kappa: float) -> float:
    return at(kept, case, n, kappa).gap_pct


def kappa_of(kept: Kept, case: str, n: int, measured: float) -> float:
    """The κ at which predict's gap equals ``measured`` (gaps grow with κ)."""
    lo, hi = 0.0, KAPPA_MAX
    if gap(kept, case, n, lo) >= measured:
        return lo
    if gap(kept, case, n, hi) <= measured:
        return hi
    while hi - lo > 1e-3:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gap(kept, case, n, mid) < measured else (lo, mid)
    return (lo + hi) / 2


def main() -> int:
    args = fit_args(__doc__, "--kappa", "κ")
    kept = Kept(args.kept, "busy_fit.py")
    in_code = model.BUSY_SYNC
    per_row: dict[str, list[float]] = {s: [] for s in SETS}
    for r in kept.rows:
        case, n = r["case"], r["np"]
        if (
            math.isnan(r["gap"])
            or gap(kept, case, n, in_code) - gap(kept, case, n, 0.0) < MOVES_PTS
        ):
            continue  # unmeasured, or another term sets the step
        k = kappa_of(kept, case, n, r["gap"])
        per_row[r["set"]].append(k)
        if args.v:
            print(f"  {r['set']:<11} {case:<18} np={n}  measured {r['gap']:5.1f}%  κ {k:.2f}")
    for s in SETS:
        got = per_row[s]
        print(
            f"{s}: κ that meets each measured gap where the term sets the step: {len(got)} rows"
            + (
                f", {min(got):.2f}-{max(got):.2f}, median {statistics.median(got):.2f}"
                if got
                else ""
            )
            + ("  <- κ is fitted here" if s == "calibration" else "  (not used)")
        )
    if args.kappa is None and not per_row["calibration"] and args.smoke:
        args.kappa = in_code  # a smoke run's light case: the code's κ, to score with it
    if args.kappa is None and not per_row["calibration"]:
        raise SystemExit(
            f"busy_fit.py: no calibration row in {args.kept} where the term sets the step"
        )
    kappa = args.kappa if args.kappa is not None else statistics.median(per_row["calibration"])
    print(f"κ = {kappa:.2f} (the code's: {in_code:.2f})\n")
    scores = []
    for k in dict.fromkeys((in_code, kappa)):

        def at_kappa(case: str, n: int, k: float = k) -> model.Prediction:
            return at(kept, case, n, k)

        for s in SETS:
            scored = kept.score(s, f"κ {k:.2f}", at_kappa, args.v)
            scores += [scored] if s == "calibration" else []
    model.BUSY_SYNC = in_code
    if args.smoke:
        smoke_checks(None, scores, "κ")
    return 0


if __name__ == "__main__":
    harness.entry(main)
