"""The ablation ladder: each rung adds one stage, so differences in step time are stage costs.

Rungs, in order: synthetic · read · +label · +shuffle · +map (the scenario's own, when it has
one) · +augment · +prefetch · +cache. A
rung's marginal cost is its mean step time minus the previous rung's (negative: the stage
saves time, as prefetch and cache should), and its share of the gap is that over the gap
between the scenario's real variant and the synthetic run, in ms per step.
"""

from __future__ import annotations

import dataclasses
import math

import pandas as pd

from pipeprof.analysis import stages
from pipeprof.analysis.stages import LADDER
from pipeprof.scenario import CacheConfig, MapConfig, PipelineConfig, PrefetchConfig, StageSwitch

# A rung describes a stage's share; the verdict rests on the real variant and the stage
# benchmark. Each rung may measure for this share of train.max_measure_s (at least the minimum).
RUNG_TIME_SHARE = 0.25


STAGE_ORDER = stages.ORDER


def ladder(
    base: PipelineConfig, *, upto: str = "cache", skip_off: bool = False
) -> list[tuple[str, PipelineConfig]]:
    """Cumulative pipelines, the one stage ladder: read only (no label, shuffle, augment,
    prefetch or cache), then each stage of ``STAGE_ORDER`` added in turn, up to ``upto``,
    as the scenario configures it. A stage the scenario has off is skipped with ``skip_off``
    (the stage benchmark: its cost is zero by construction), else switched on (prefetch as
    AUTOTUNE, a memory cache before augment)."""
    p = dataclasses.replace(
        base,
        label=StageSwitch(False),
        shuffle=dataclasses.replace(base.shuffle, enabled=False),
        map=MapConfig(),
        augment=dataclasses.replace(base.augment, enabled=False),
        cache=CacheConfig(enabled=False),
        prefetch=PrefetchConfig(enabled=False),
    )
    rungs = [("read", p)]
    for stage in STAGE_ORDER[1 : STAGE_ORDER.index(upto) + 1]:
        cfg = getattr(base, stage)
        if stage == "map":  # the scenario's own transformation: a rung only when it has one
            if cfg.function:
                p = dataclasses.replace(p, map=cfg)
                rungs.append((stage, p))
            continue
        if not cfg.enabled:
            if skip_off:
                continue
            cfg = {
                "prefetch": PrefetchConfig(True, "autotune"),
                "cache": CacheConfig(enabled=True),
            }.get(stage, dataclasses.replace(cfg, enabled=True))
        p = dataclasses.replace(p, **{stage: cfg})
        rungs.append((stage, p))
    return rungs


def ladder_pipelines(base: PipelineConfig) -> list[tuple[str, PipelineConfig]]:
    """The ablation's rungs (``LADDER``'s names): every stage, cache and prefetch last."""
    return [(stage if stage == "read" else f"+{stage}", p) for stage, p in ladder(base)]


def add_stage_costs(summary: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Per np: each rung's marginal ms per step and its % of the gap (reference vs synthetic)."""
    out = summary.copy()
    out["stage_marginal_ms"] = math.nan
    out["stage_pct_of_gap"] = math.nan
    # A rung measures briefly (RUNG_TIME_SHARE) to describe its stage's share; its wide gap
    # interval stays in the table, but warns of nothing: the verdict rests on the real variant.
    if "warning" in out.columns:
        out.loc[out["variant"].isin(LADDER), "warning"] = ""
    for _, group in out.groupby("np"):
        t = dict(zip(group["variant"], group["step_time_ms_mean"]))
        if "synthetic" not in t:
            continue
        gap_ms = t.get(reference, math.nan) - t["synthetic"]
        prev = t["synthetic"]
        for rung in LADDER:
            if rung not in t:
                continue
            marginal = t[rung] - prev
            prev = t[rung]
            idx = group.index[group["variant"] == rung]
            out.loc[idx, "stage_marginal_ms"] = marginal
            out.loc[idx, "stage_pct_of_gap"] = 100.0 * marginal / gap_ms if gap_ms > 0 else math.nan
    return out
