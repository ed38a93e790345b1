"""Where a spin case's gap comes from when the truth says its pipeline has the CPU it needs.

The ground-truth suite's truth (``run.expected_gap``) gives a rank's pipeline its share of the
host's cores, less what the rank's own loop uses, and calls the gap 0 while the pipeline's CPU
per batch fits in that share within a step. At np 2 and 4 on 2 cores pipeprof measured 15-24%
on such rows. This probe measures, for one spin case and one worker count, side by side in
rounds (``harness.in_rounds``):

* ``clean``: the case's ceiling alone (its device time's cheap-pipeline scenario,
  ``--synthetic-only``);
* ``loads``: the same, beside NP processes that each run the case's pipeline at the clean
  step's pace, its batches thrown away (``inject.load``), all in this script's session;
* ``loads-own-sessions``: the same, each load in a session of its own, as horovodrun starts
  each rank (Horovod's shell runs ``setsid``): where the kernel's autogroup scheduling is on
  (``/proc/sys/kernel/sched_autogroup_enabled``), the cores are shared between sessions first,
  so this is how a rank's pipeline competes with the other ranks;
* ``pipeprof``: the case itself, ``compare --np NP``, its gap and the gap's two parts (the
  real steps' input wait, and the step's own slowdown: ``analysis.verdict.gap_parts``).

It prints each run's samples/s and, for the loaded ones, the slowdown against the clean run
of the same round. A slowdown the size of pipeprof's step part says the pipeline's CPU slows
the step even where the fluid share says it fits; none says the step part comes from
something a load in another process does not reproduce.

    .venv/bin/python benchmarks/truth/contention_probe.py CASE --np N [--rounds R] [--out DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
from benchmarks import harness  # noqa: E402
from benchmarks.truth import run as truth  # noqa: E402


def compare(toml: Path, np_: int, out: Path, log: Path, synthetic_only: bool) -> dict:
    """One ``compare --np NP,`` of ``toml`` into ``out``; its last row's figures."""
    args = ["compare", str(toml), "--np", f"{np_},", "--out", str(out), "--no-report"]
    args += ["--synthetic-only"] if synthetic_only else []
    args += ["--oversubscribe"] if np_ > harness_cores() else []
    harness.pipeprof([*args, "--no-dashboard"], log=log, timeout=900)
    row = harness.summary(out).iloc[-1]
    return {k: float(row[k]) for k in ("samples_per_s", "samples_per_s_ci95", "gap_pct",
                                       "gap_pct_ci95", "input_wait_pct", "step_time_ms_p50",
                                       "samples_per_s_per_worker", "cpu_util_pct")}  # fmt: skip


def harness_cores() -> int:
    from pipeprof.launch import topology

    return topology.usable_cores()


def with_loads(n: int, own_sessions: bool, load_argv: list[str], then) -> tuple[dict, list[str]]:
    """``then()`` while ``n`` loads run (each started warm: it says "ready" first)."""
    procs = [
        subprocess.Popen(
            load_argv,
            cwd=harness.REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=own_sessions,
        )
        for _ in range(n)
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                raise harness.Failed(f"a load ended before it was ready: {' '.join(load_argv)}")
        got = then()
    finally:
        for p in procs:
            p.terminate()
        said = [(p.communicate(timeout=60)[0] or "").strip() for p in procs]
    return got, said


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("case", help="a spin case of calibration.toml or validation.toml")
    p.add_argument("--np", type=int, required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", help="where the run directories go (default: a new temporary one)")
    args = p.parse_args()
    cases = {c.name: c for c in truth.load_cases("both")}
    if args.case not in cases or cases[args.case].kind != "spin":
        raise harness.Failed(
            f"{args.case}: not a spin case of benchmarks/truth/ (spin cases: "
            f"{', '.join(n for n, c in cases.items() if c.kind == 'spin')})"
        )
    case = cases[args.case]
    if case.device == "cpu":
        raise harness.Failed(f"{args.case}: CPU-trained; the probe is for emulated devices")
    from benchmarks.truth.inject import calibrate

    work = harness.out_dir(args.out, "contention-probe-")
    log = work / "pipeprof.log"
    m = truth.Machine(cores=harness_cores(), spin_iter_per_us=calibrate())
    device = truth.device_ms(case, m)
    case_toml = work / f"{case.name}.toml"
    case_toml.write_text(truth.scenario_toml(case, m))
    ceiling = dataclasses.replace(case, name=f"ceiling-{device:g}", kind="control", np=(args.np,))
    ceiling_toml = work / f"{ceiling.name}.toml"
    ceiling_toml.write_text(truth.scenario_toml(ceiling, m))
    root = harness.prepared(str(case_toml))[1]
    iterations = max(1, round(truth.spin_us(case, m) * m.spin_iter_per_us))
    autogroup = Path("/proc/sys/kernel/sched_autogroup_enabled")
    print(
        f"{case.name} at np={args.np} on {m.cores} cores: spin {truth.spin_us(case, m):g} µs "
        f"({iterations} iterations) a sample, device {device:g} ms; autogroup "
        f"{autogroup.read_text().strip() if autogroup.exists() else 'absent'}; {work}",
        flush=True,
    )
    pace_ms: list[float] = []
    runs = 0

    def out(name: str) -> Path:
        nonlocal runs
        runs += 1
        return work / f"{runs:02d}-{name}"

    def clean() -> tuple[dict, list[str]]:
        got = compare(ceiling_toml, args.np, out("clean"), log, synthetic_only=True)
        pace_ms.append(1e3 * truth.BATCH / got["samples_per_s_per_worker"])
        return got, []

    def loaded(own: bool):
        def side() -> tuple[dict, list[str]]:
            argv = [sys.executable, "-m", "benchmarks.truth.inject", "load", str(root),
                    str(case.image_size), str(iterations), f"{pace_ms[0]:.2f}", "600"]  # fmt: skip
            name = "loads-own-sessions" if own else "loads"
            return with_loads(
                args.np,
                own,
                argv,
                lambda: compare(ceiling_toml, args.np, out(name), log, synthetic_only=True),
            )

        return side

    def measured() -> tuple[dict, list[str]]:
        return compare(case_toml, args.np, out("pipeprof"), log, synthetic_only=False), []

    t0 = time.time()
    clean()  # the pace the loads keep: the clean step, measured before any round
    got = harness.in_rounds(
        args.rounds,
        {
            "clean": clean,
            "loads": loaded(False),
            "loads-own-sessions": loaded(True),
            "pipeprof": measured,
        },
    )
    slow: dict[str, list[float]] = {"loads": [], "loads-own-sessions": []}
    for r in range(args.rounds):
        base = got["clean"][r][0]["samples_per_s"]
        print(f"round {r + 1}: clean {base:,.0f} samples/s", end="")
        for name in slow:
            figures, said = got[name][r]
            slow[name].append(100 * (1 - figures["samples_per_s"] / base))
            print(
                f"; {name} {figures['samples_per_s']:,.0f} ({slow[name][-1]:+.1f}% slower, host "
                f"CPU {figures['cpu_util_pct']:.0f}%; a load: {said[0] if said else '?'})",
                end="",
            )
        pp = got["pipeprof"][r][0]
        print(
            f"; pipeprof gap {pp['gap_pct']:.1f}% ±{pp['gap_pct_ci95']:.1f}, of it input wait "
            f"{pp['input_wait_pct']:.1f} points and the step {pp['gap_pct'] - pp['input_wait_pct']:.1f}"
        )
    pp_gaps = [g[0]["gap_pct"] for g in got["pipeprof"]]
    pp_step = [g[0]["gap_pct"] - g[0]["input_wait_pct"] for g in got["pipeprof"]]
    print(
        f"mean over {args.rounds} rounds: the ceiling slowed {statistics.mean(slow['loads']):.1f}% "
        f"beside loads in one session, {statistics.mean(slow['loads-own-sessions']):.1f}% beside "
        f"loads in sessions of their own; pipeprof's gap {statistics.mean(pp_gaps):.1f}%, its "
        f"step part {statistics.mean(pp_step):.1f} points; {(time.time() - t0) / 60:.1f} min"
    )
    return 0


if __name__ == "__main__":
    harness.entry(main)
