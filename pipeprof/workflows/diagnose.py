"""After an ablation compare: measure each stage alone and say which one bounds throughput.

Writes ``stages.csv`` (each stage's rate and CPU cost, at one thread and at the configured
parallelism, on the cores one rank has) and ``verdict.json`` / ``verdict.txt`` (per np).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from pipeprof import plugins
from pipeprof.analysis import remedies
from pipeprof.analysis.stages import COSTLY
from pipeprof.analysis.verdict import Verdict, decide
from pipeprof.data.stagebench import StageBench, stage_costs
from pipeprof.launch import topology
from pipeprof.rundir import RunDir
from pipeprof.scenario import PipelineConfig, Scenario


def cores_per_rank(scenario: Scenario, np: int, override: float | None = None) -> float:
    """The CPU cores one rank has at ``np``: given, or a host's usable cores over the ranks
    Horovod puts on the busiest host (launch.topology), a fraction when they outnumber the
    cores (4 ranks on 2 cores have half a core each, though each runs at least one thread)."""
    if override:
        return float(override)
    placed = topology.assign(np, scenario.launch)
    return placed.cores / max(1, placed.ranks_per_host)


def cached_stages(pipe: PipelineConfig) -> set[str]:
    """The stages before the pipeline's cache: read and label before augment, all of them after
    (the scenario's own map included)."""
    if not pipe.cache.enabled:
        return set()
    return set(COSTLY[:2]) if pipe.cache.placement == "before_augment" else set(COSTLY)


def measure_stages(
    scenario: Scenario,
    data_root: str,
    nps: list[int],
    run_dir: Path,
    *,
    cores_override: float | None = None,
    seconds: float = 2.0,
) -> list[dict]:
    """Each stage of the scenario's first variant alone (pipeline only, no model) on the cores
    one rank has at the largest np; written to ``stages.csv``."""
    run = RunDir(run_dir)
    base = scenario.variant_pipeline(scenario.variants[0])
    bench_cores = max(1, int(cores_per_rank(scenario, max(nps), cores_override)))
    per_worker = scenario.train.batch_size  # the pipeline's batch on one rank
    if scenario.train.batch_mode == "global":
        per_worker = scenario.train.batch_size // max(nps)
    with StageBench(
        scenario.data,
        data_root,
        per_worker,
        cores=bench_cores,
        seconds=seconds,
        cache_dir=str(run_dir / "cache" / "stagebench"),
        log_path=run.log_path("stagebench"),
    ) as bench:
        rows = stage_costs(bench, base)
    for row in rows:  # stages whose output the cache holds are paid once, not per epoch
        row["cached"] = row["stage"] in cached_stages(base)
    stages = pd.DataFrame(rows)
    stages.insert(1, "cores", bench_cores)
    run.write_stages(stages)
    return rows


def diagnose(
    scenario: Scenario,
    data_root: str,
    summary: pd.DataFrame,
    run_dir: Path,
    *,
    cores_override: float | None = None,
    seconds: float = 2.0,
    rows: list[dict] | None = None,
) -> list[Verdict]:
    """The verdict per np from the stage costs (measured now unless ``rows`` were, before the
    launch) and the run's gaps; remedies that ran are cited with their figures."""
    run = RunDir(run_dir)
    reference = scenario.variants[0].name
    nps = sorted(int(n) for n in summary["np"].unique())
    if rows is None:
        rows = measure_stages(
            scenario, data_root, nps, run_dir, cores_override=cores_override, seconds=seconds
        )
    verdicts = verdicts_per_np(
        rows, summary, scenario, reference, cores_override, remedies_cited=True
    )
    write_verdicts(run, verdicts)
    return verdicts


def verdicts_per_np(
    rows: list[dict],
    summary: pd.DataFrame,
    scenario: Scenario,
    reference: str,
    cores_override: float | None,
    *,
    remedies_cited: bool = False,
) -> list[Verdict]:
    """The verdict at each worker count the summary has a ceiling for, from the stage costs
    ``rows`` and the gap of the ``reference`` variant (pipeprof's scenarios and a user's script
    alike); ``remedies_cited``: the remedy variants that ran are cited with their figures."""
    verdicts = []
    library = scenario.data.library
    loader = library != plugins.AUTO and bool(
        plugins.capability(plugins.INPUTS, library, "loader_knobs", False)
    )
    for n in sorted(int(n) for n in summary["np"].unique()):
        at = summary[summary["np"] == n].set_index("variant")
        if "synthetic" not in at.index:
            continue
        measured = reference in at.index
        busy = (
            float(at.loc["synthetic", "cpu_util_pct"]) if "cpu_util_pct" in at.columns else math.nan
        )
        verdicts.append(
            v := decide(
                rows,
                np=n,
                synthetic_per_rank=float(at.loc["synthetic", "samples_per_s"]) / n,
                cores_per_rank=cores_per_rank(scenario, n, cores_override),
                gap_pct=float(at.loc[reference, "gap_pct"]) if measured else None,
                gap_ci95=float(at.loc[reference, "gap_pct_ci95"]) if measured else None,
                host_busy_pct=busy,
                input_wait_pct=float(at.loc[reference, "input_wait_max_pct"])
                if measured and "input_wait_max_pct" in at.columns
                else None,
                measured_remedies=remedies.measured_lines(summary, reference, n)
                if remedies_cited
                else None,
                loader=loader,
                grain=bool(plugins.capability(plugins.INPUTS, library, "grain_knobs", False)),
            )
        )
        slow = at.loc[reference].get("straggler") if measured else None
        if isinstance(slow, str) and slow:  # named in summary.csv (analysis.straggler)
            mine, others = at.loc[reference, ["straggler_input_wait_ms", "others_input_wait_ms"]]
            # the headline: what follows is rank 0's pipeline, measured on this host
            v.text.insert(
                0,
                f"one rank is slow: {slow} waited {mine:.1f} ms a step for input against "
                f"{others:.1f} ms for the others, who wait for it in the allreduce; for the "
                "pipeline as this host runs it:"
                if not math.isnan(mine)
                else f"one rank is slow: {slow}, its step longer than the others'; for the "
                "pipeline as this host runs it:",
            )
            measured_first = sum(a.startswith("measured:") for a in v.advice)
            v.advice.insert(
                measured_first,  # after the remedies this run measured, before the untried
                f"find why {slow} is slower than the others: its shard of the data, its host's "
                "load, CPU or storage (the stage costs above are measured on this host, for "
                "rank 0's pipeline)",
            )
    return verdicts


def write_verdicts(run: RunDir, verdicts: list[Verdict]) -> None:
    run.write_verdicts(
        [v.to_dict() for v in verdicts],
        "\n\n".join("\n".join(v.text + [f"  - {a}" for a in v.advice]) for v in verdicts) + "\n",
    )
