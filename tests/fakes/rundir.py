"""A run directory as compare writes it, made from seeded numbers instead of a launch: steps of
every rank (a straggler among them), the twin's alternating rounds, host/process/GPU samples,
the ranks' hellos, and optionally the ablation's, predict's and tune's files. The summary is
computed by pipeprof's own code from those steps, as after a real launch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from pipeprof.records import STEP_COLUMNS
from pipeprof.rundir import FINISHED, RunDir, manifest
from pipeprof.telemetry.samples import GpuSample, HostSample, ProcSample
from pipeprof.workflows.summary import write_summary

T0 = 1_790_000_000.0


def _steps(
    rng,
    np_: int,
    variant: str,
    start: float,
    n: int,
    step_ms: float,
    wait_ms: float,
    slow_rank: int | None,
    paired: str = "",
    rounds: int = 0,
) -> tuple[list[dict], float]:
    rows, t = [], start
    for i in range(n):
        base = step_ms * (1 + 0.05 * rng.standard_normal())
        t += base / 1e3
        for r in range(np_):
            wait = wait_ms * (3.0 if r == slow_rank else 1.0) * (1 + 0.1 * rng.standard_normal())
            rows.append(
                {
                    "np": np_,
                    "variant": variant,
                    "rank": r,
                    "step": i,
                    "warmup": i < 3,
                    "input_wait_ms": max(0.0, wait),
                    "step_time_ms": base,
                    "batch_size": 16,
                    "end_unix_s": t,
                    "paired": paired,
                    "round": (i // max(1, n // rounds)) if rounds else -1,
                }
            )
    return rows, t


def make_run(
    path: Path,
    nps=(1, 2, 4),
    *,
    state: str = FINISHED,
    stages: bool = True,
    prediction: bool = True,
    trials: bool = False,
    gpus: bool = True,
    seed: int = 0,
) -> Path:
    rng = np.random.default_rng(seed)
    run = RunDir.create(str(path), "fake")
    scenario = {"name": "fake", "train": {"batch_size": 16, "batch_mode": "per_worker"}}
    run.write_manifest(
        manifest(
            scenario,
            ["compare", "fake", "--np", ",".join(map(str, nps))],
            [],
            {
                "worker_counts": list(nps),
                "variants": ["synthetic", "real"],
                "device": "real",
                "data_root": "",
            },
        )
    )
    run.write_status(state)
    t = T0
    events, host_rows, proc_rows, gpu_rows = [], [], [], []
    for n in nps:
        start = t
        for rank in range(n):
            events.append(
                {
                    "kind": "hello",
                    "rank": rank,
                    "local_rank": rank,
                    "host": "node1",
                    "np": n,
                    "t_unix_s": t,
                    "nvml": "ok",
                    "gpus": [str(rank)],
                }
            )
        synth, t = _steps(rng, n, "synthetic", t, 40, 50.0 + 2 * n, 0.2, None)
        real, t = _steps(
            rng, n, "real", t, 40, 60.0 + 4 * n, 8.0, n - 1 if n > 1 else None, rounds=4
        )
        twin, t = _steps(
            rng, n, "synthetic", t, 40, 50.0 + 2 * n, 0.2, None, paired="real", rounds=4
        )
        for name, rows in (("synthetic", synth), ("real", real + twin)):
            (run.path / "steps").mkdir(exist_ok=True)
            pd.DataFrame(rows, columns=STEP_COLUMNS).to_csv(
                run.path / "steps" / f"np{n}-{name}.csv", index=False
            )
        for ts in np.arange(start, t, 0.5):
            host_rows.append(
                HostSample(
                    ts, "node1", 70 + 20 * rng.random(), "70;80", 4000.0, 16000.0, 1.0, 0.1
                ).to_dict()
            )
            for rank in range(n):
                proc_rows.append(
                    ProcSample(ts, "node1", rank, 90 + 10 * rng.random(), 900.0).to_dict()
                )
                if gpus:
                    gpu_rows.append(
                        GpuSample(
                            ts,
                            "node1",
                            str(rank),
                            str(rank),
                            60 + 30 * rng.random(),
                            20.0,
                            5000.0,
                            16000.0,
                            1400.0,
                            200.0,
                            60.0,
                        ).to_dict()
                    )
        for name, steps in (("synthetic", synth), ("real", real)):
            measured = [s for s in steps if not s["warmup"] and s["rank"] == 0]
            with (run.path / "variants.jsonl").open("a") as fh:
                fh.write(
                    json.dumps(
                        {
                            "np": n,
                            "variant": name,
                            "synthetic": name == "synthetic",
                            "per_worker_batch": 16,
                            "global_batch": 16 * n,
                            "learning_rate": 0.01 * n,
                            "loss_mean": 2.0,
                            "accuracy_mean": 0.1,
                            "wall_s": 3.0,
                            "measured_steps": len(measured),
                            "measured_s": sum(s["step_time_ms"] for s in measured) / 1e3,
                            "stop_reason": "target",
                        }
                    )
                    + "\n"
                )
    (run.path / "telemetry").mkdir(exist_ok=True)
    (run.path / "live").mkdir(exist_ok=True)
    pd.DataFrame(host_rows).to_csv(run.path / "telemetry" / "host.csv", index=False)
    pd.DataFrame(proc_rows).to_csv(run.path / "telemetry" / "proc.csv", index=False)
    if gpus:
        pd.DataFrame(gpu_rows).to_csv(run.path / "telemetry" / "gpu.csv", index=False)
    (run.path / "live" / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    write_summary(run.path, {"synthetic"}, ["synthetic", "real"])
    if stages:
        run.write_stages(
            pd.DataFrame(
                [
                    {
                        "stage": s,
                        "cores": 2,
                        "samples_per_s_1": 900.0 / (i + 1),
                        "samples_per_s_configured": 1700.0 / (i + 1),
                        "core_ms_per_sample_1": 1.1 * (i + 1),
                        "marginal_core_ms_1": c,
                        "core_ms_per_sample_configured": 1.2 * (i + 1),
                        "marginal_core_ms_configured": c,
                    }
                    for i, (s, c) in enumerate(
                        (("read", 1.1), ("label", 0.05), ("shuffle", 0.02), ("augment", 2.4))
                    )
                ]
            )
        )
        run.write_verdicts(
            [
                {
                    "np": 1,
                    "bottleneck": "augment",
                    "input_bound": True,
                    "text": [
                        "input-bound: the augment stage bounds throughput (67% of the pipeline's CPU).",
                        "np=1: each rank would train at 300 samples/s on synthetic data.",
                    ],
                    "advice": ["move augmentation onto the accelerator"],
                }
            ],
            "input-bound\n",
        )
    if prediction:
        rows = [
            {
                "device": "real",
                "np": n,
                "gap_pct": 5.0 + 3 * i,
                "dominant": "input" if i > 2 else "compute",
                "synthetic_samples_per_s": 300.0 * n,
                "real_samples_per_s": 280.0 * n,
                "advice": "cache",
            }
            for i, n in enumerate((1, 2, 4, 8, 16, 32))
        ]
        run.write_prediction(
            pd.DataFrame(rows),
            {
                "target": {"gpus_per_node": 8, "cores_per_node": 64},
                "notes": [],
                "predictions": rows,
            },
        )
    if trials:
        frame = pd.DataFrame(
            [
                {
                    "cache": c,
                    "parallel_calls": p,
                    "samples_per_s": 2000.0 + 1500 * (c != "off") + 10 * k,
                    "half_pct": 1.0,
                    "cpu_cores_used": 1.0,
                    "seconds": 1.0,
                    "stop": "target",
                    "phase": "search",
                    "error": "",
                }
                for k, (c, p) in enumerate(
                    [("off", 1), ("before_augment", 1), ("before_augment", 2)]
                )
            ]
        )
        run.write_tune(
            frame,
            {
                "winner": {"cache": "before_augment", "parallel_calls": 2},
                "winner_samples_per_s": 3520.0,
                "cores_per_rank": 1,
                "autotune": {"samples_per_s": 2100.0},
                "scenario_default": {"samples_per_s": 2000.0},
            },
            "[pipeline]\n",
            "ds = ds\n",
        )
    return run.path
