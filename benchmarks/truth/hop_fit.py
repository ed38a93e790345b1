"""Fit predict's ring-step latency α on a kept truth run's calibration cases, and score it.

Reads a ``run.py --keep`` directory (its ``results.json`` and ``runs/<case>``) and runs
nothing: predict is re-run in-process from each case's np=1 measurements.

1. For each calibration case's synthetic step at np 2 and 4 (as its compare measured it), the
   step beyond predict's synthetic step without α, per ring step (2(N−1) of them). α is the
   median of these figures. The validation cases' same figures are printed beside, never used.
2. predict's gaps at np 2 and 4 on both sets, without α and with the fitted one (or ``--hop``),
   judged as ``run.py`` judges them: within max(5 points, 20% of the measured gap).

    .venv/bin/python benchmarks/truth/hop_fit.py KEPT_DIR [--hop MS] [-v] [--smoke]

``--smoke`` (CI, on the directory ``run.py --smoke --keep`` left) fits and scores as above,
then checks that a fit and a score were printed for the calibration set.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks import harness  # noqa: E402
from benchmarks.truth.run import predict_within as within  # noqa: E402
from pipeprof.analysis import predict as model  # noqa: E402
from pipeprof.workflows.predict import load_source  # noqa: E402

SETS = ("calibration", "validation")


class Kept:
    """A kept run's rows at np ≥ 2 and predict re-run in-process from each case's np=1 run."""

    def __init__(self, kept: Path, script: str) -> None:
        results = kept / "results.json"
        if not results.is_file():
            raise SystemExit(f"{script}: {results} does not exist (a run.py --keep directory?)")
        res = json.loads(results.read_text())
        self.cores = float(res["machine"]["cores"])
        self.rows = [r for r in res["rows"] if r["np"] > 1]
        self.cases = sorted({r["case"] for r in self.rows})
        self.widest = {c: max(r["np"] for r in res["rows"] if r["case"] == c) for c in self.cases}
        self.sources = {
            c: load_source(kept / "runs" / c, None, measure_missing_stages=False)[0]
            for c in self.cases
        }

    def predicted(self, case: str, hop: float) -> dict[int, model.Prediction]:
        target = model.Target(
            gpus_per_node=self.widest[case], cores_per_node=self.cores, hop_ms=hop
        )
        return {q.np: q for q in model.predict(self.sources[case], target, [2, 4])}

    def score(
        self,
        which: str,
        label: str,
        prediction: Callable[[str, int], model.Prediction],
        every: bool,
    ) -> tuple[int, float]:
        """predict's gaps on one set's rows at np ≥ 2, judged as ``run.py`` judges them
        (printed, with ``every`` row); returns how many were within tolerance and the MAE."""
        scored = []
        for r in self.rows:
            if r["set"] == which and not math.isnan(r["gap"]):
                q = prediction(r["case"], r["np"]).gap_pct
                scored.append((r["case"], r["np"], q, r["gap"], r["expected_gap"]))
        if not scored:
            print(f"{label}  {which:<11}  no rows in this run")
            return 0, math.nan
        ok = sum(within(q, g) for _, _, q, g, _ in scored)
        mae = statistics.fmean(abs(q - g) for _, _, q, g, _ in scored)
        print(f"{label}  {which:<11}  within {ok} of {len(scored)}  MAE {mae:.1f} points")
        for case, n, q, g, t in scored if every else ():
            print(
                f"    {case:<18} np={n}  predicted {q:5.1f}%  measured {g:5.1f}%  "
                f"truth {t:5.1f}%  {'' if within(q, g) else 'outside'}"
            )
        return ok, mae


def fit_args(doc: str, option: str, constant: str) -> argparse.Namespace:
    """A fit script's command line: the kept run, ``option`` to score a given ``constant``
    instead of the fitted one, and -v for every row."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("kept", type=Path, help="a run.py --keep directory")
    p.add_argument(option, type=float, help=f"score this {constant} instead of the fitted one")
    p.add_argument("-v", action="store_true", help="every row")
    p.add_argument("--smoke", action="store_true", help="check the figures printed (CI)")
    return p.parse_args()


def smoke_checks(
    fitted: list[float] | None, scores: list[tuple[int, float]], constant: str
) -> None:
    """``--smoke``: the calibration set gave ``constant`` a figure (unless ``fitted`` is None:
    not asked of it), and every score of it an error."""
    if fitted is not None:
        harness.smoke_check(bool(fitted), f"no calibration figure to fit {constant} on")
    harness.smoke_check(
        bool(scores) and all(not math.isnan(mae) for _, mae in scores),
        f"predict's errors with each {constant}: {scores}",
    )


def main() -> int:
    args = fit_args(__doc__, "--hop", "α")
    kept = Kept(args.kept, "hop_fit.py")
    rows, cases, predicted = kept.rows, kept.cases, kept.predicted

    per_step: dict[str, list[float]] = {s: [] for s in SETS}
    for case in cases:
        setname = next(r["set"] for r in rows if r["case"] == case)
        summary = pd.read_csv(args.kept / "runs" / case / "summary.csv")
        bare = predicted(case, 0.0)
        for n in (2, 4):
            synth = summary[(summary["np"] == n) & (summary["variant"] == "synthetic")]
            if len(synth):
                excess = float(synth["step_time_ms_mean"].iloc[0]) - bare[n].synth_step_ms
                per_step[setname].append(excess / (2 * (n - 1)))
    for s in SETS:
        got = per_step[s]
        if not got:
            print(f"{s}: no synthetic step at np 2 or 4 in this run")
            continue
        print(
            f"{s}: synthetic step beyond predict's without α, per ring step: {len(got)} figures, "
            f"{min(got):.2f}-{max(got):.2f} ms, median {statistics.median(got):.2f}"
            + ("  <- α is fitted here" if s == "calibration" else "  (not used)")
        )
    if args.hop is None and not per_step["calibration"]:
        raise SystemExit(f"hop_fit.py: no calibration case at np 2 or 4 in {args.kept}")
    alpha = args.hop if args.hop is not None else statistics.median(per_step["calibration"])
    print(f"α = {alpha:.2f} ms\n")
    scores = []
    for hop in (0.0, alpha):

        def at_hop(case: str, n: int, hop: float = hop) -> model.Prediction:
            return predicted(case, hop)[n]

        for s in SETS:
            scored = kept.score(s, f"α {hop:4.2f} ms", at_hop, bool(args.v and hop))
            scores += [scored] if s == "calibration" else []
    if args.smoke:
        smoke_checks(per_step["calibration"], scores, "α")
    return 0


if __name__ == "__main__":
    harness.entry(main)
