"""Fit predict's ring-step latency α on a kept truth run's calibration cases, and score it.

Reads a ``run.py --keep`` directory (its ``results.json`` and ``runs/<case>``) and runs
nothing: predict is re-run in-process from each case's np=1 measurements.

1. For each calibration case's synthetic step at np 2 and 4 (as its compare measured it), the
   step beyond predict's synthetic step without α, per ring step (2(N−1) of them). α is the
   median of these figures. The validation cases' same figures are printed beside, never used.
2. predict's gaps at np 2 and 4 on both sets, without α and with the fitted one (or ``--hop``),
   judged as ``run.py`` judges them: within max(5 points, 20% of the measured gap).

    .venv/bin/python benchmarks/truth/hop_fit.py KEPT_DIR [--hop MS] [-v]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.truth.run import predict_within as within  # noqa: E402
from pipeprof.analysis import predict as model  # noqa: E402
from pipeprof.workflows.predict import load_source  # noqa: E402

SETS = ("calibration", "validation")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kept", type=Path, help="a run.py --keep directory")
    p.add_argument("--hop", type=float, help="score this α instead of the fitted one")
    p.add_argument("-v", action="store_true", help="every row")
    args = p.parse_args()
    results = args.kept / "results.json"
    if not results.is_file():
        raise SystemExit(f"hop_fit.py: {results} does not exist (a run.py --keep directory?)")
    res = json.loads(results.read_text())
    rows = [r for r in res["rows"] if r["np"] > 1]
    cases = sorted({r["case"] for r in rows})
    widest = {c: max(r["np"] for r in res["rows"] if r["case"] == c) for c in cases}
    sources = {
        c: load_source(args.kept / "runs" / c, None, measure_missing_stages=False)[0] for c in cases
    }

    def predicted(case: str, hop: float) -> dict[int, model.Prediction]:
        target = model.Target(
            gpus_per_node=widest[case], cores_per_node=float(res["machine"]["cores"]), hop_ms=hop
        )
        return {q.np: q for q in model.predict(sources[case], target, [2, 4])}

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
        print(
            f"{s}: synthetic step beyond predict's without α, per ring step: {len(got)} figures, "
            f"{min(got):.2f}-{max(got):.2f} ms, median {statistics.median(got):.2f}"
            + ("  <- α is fitted here" if s == "calibration" else "  (not used)")
        )
    alpha = args.hop if args.hop is not None else statistics.median(per_step["calibration"])
    print(f"α = {alpha:.2f} ms\n")
    for hop in (0.0, alpha):
        for s in SETS:
            scored = []
            for r in rows:
                if r["set"] != s or math.isnan(r["gap"]):
                    continue
                q = predicted(r["case"], hop)[r["np"]]
                scored.append((r["case"], r["np"], q.gap_pct, r["gap"], r["expected_gap"]))
            ok = sum(within(q, g) for _, _, q, g, _ in scored)
            mae = statistics.fmean(abs(q - g) for _, _, q, g, _ in scored)
            print(f"α {hop:4.2f} ms  {s:<11}  within {ok} of {len(scored)}  MAE {mae:.1f} points")
            if args.v and hop:
                for case, n, q, g, t in scored:
                    print(
                        f"    {case:<18} np={n}  predicted {q:5.1f}%  measured {g:5.1f}%  "
                        f"truth {t:5.1f}%  {'' if within(q, g) else 'outside'}"
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
