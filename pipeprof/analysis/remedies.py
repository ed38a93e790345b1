"""Remedies, measured: the fixes the verdict would advise, run as variants beside the real one.

Each remedy is the scenario's real pipeline with one change, run in the same launch and
alternating with the same synthetic twin, so its gap is measured like the real variant's.
What it is worth is the share of the real variant's gap it closes at each np. A remedy that
does not apply to this scenario is skipped with its reason, never silently.

Pure: no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import pandas as pd

from pipeprof.scenario import CacheConfig, PipelineConfig, ServiceUse

PREFIX = "remedy:"
NOTHING_BELOW_PCT = 5.0  # the verdict's line: under it, a run is not input-bound


@dataclass(frozen=True)
class Remedy:
    name: str  # the variant is PREFIX + name
    stages: tuple[str, ...]  # the stages it relieves: read, augment
    what: str  # in words, for the verdict and the tables


CATALOGUE = (
    Remedy(
        "augment-on-device",
        ("augment",),
        "augmentation on the accelerator (the same augmentation on the batch "
        "inside the training step)",
    ),
    Remedy(
        "batch-augment",
        ("augment",),
        "batch-level augmentation (vectorised after batch, one call per batch)",
    ),
    Remedy(
        "decode-less",
        ("read",),
        "JPEGs decoded at a reduced scale (DCT scaling) instead of whole, then resized",
    ),
    Remedy("cache-decoded", ("read",), "decoded images cached in RAM before augmentation"),
    Remedy(
        "loader-workers",
        ("read", "augment"),
        "a DataLoader worker process for each core the rank has (num_workers)",
    ),
    Remedy(
        "data-service",
        ("read", "augment"),
        "preprocessing on tf.data service workers (the rank only takes " "their batches)",
    ),
)
BY_NAME = {r.name: r for r in CATALOGUE}


@dataclass(frozen=True)
class Planned:
    remedy: Remedy
    pipeline: PipelineConfig | None  # None: skipped
    skipped: str = ""  # why, when skipped

    @property
    def variant(self) -> str:
        return PREFIX + self.remedy.name


@dataclass(frozen=True)
class Data:
    """What a remedy needs to know of the data set: its stored images' format ("jpeg", "png",
    "mixed"; "" when not known, e.g. TFRecords) and smallest short side, and the model's input side."""

    format: str = ""
    side: int = 0
    image_size: int = 0


@dataclass(frozen=True)
class Loader:
    """A DataLoader pipeline's workers as the scenario gives them, and the cores a rank has."""

    workers: int
    cores: int


def apply(
    remedy: Remedy,
    base: PipelineConfig,
    on_bad_file: str = "skip",
    data: Data | None = None,
    loader: Loader | None = None,
) -> tuple[PipelineConfig | None, str]:
    """The real pipeline with the remedy's change, or (None, why it does not apply);
    ``loader``: the run reads through a DataLoader (None: tf.data)."""
    data = data or Data()
    aug = base.augment
    if remedy.name == "loader-workers":
        if loader is None:
            return None, "the pipeline is tf.data's, which has no loader workers"
        if loader.workers >= loader.cores:
            return None, (
                f"the loader already runs {loader.workers} worker(s) on the rank's "
                f"{loader.cores} core(s)"
            )
        knobs = dataclasses.replace(base.loader, num_workers=loader.cores)
        return dataclasses.replace(base, loader=knobs), ""
    if remedy.name == "data-service" and loader is not None:
        return None, "a tf.data service feeds tf.data pipelines, not a DataLoader's"
    if remedy.stages == ("augment",) and not aug.enabled:
        return None, "the scenario's pipeline does not augment"
    if remedy.name == "augment-on-device":
        if aug.placement == "device":
            return None, "the scenario already augments on the device"
        if base.cache.enabled and base.cache.placement == "after_augment":
            return (
                None,
                "the cache is placed after augment (augmentation is frozen; nothing to move)",
            )
        return dataclasses.replace(base, augment=dataclasses.replace(aug, placement="device")), ""
    if remedy.name == "batch-augment":
        if aug.placement != "element":
            return None, f'the scenario already augments per batch (placement = "{aug.placement}")'
        if base.cache.enabled and base.cache.placement == "after_augment":
            return (
                None,
                "the cache is placed after augment (augmentation is frozen; nothing to vectorise)",
            )
        return dataclasses.replace(base, augment=dataclasses.replace(aug, placement="batch")), ""
    if remedy.name == "decode-less":
        if base.read.decode == "reduced":
            return None, "the scenario already decodes JPEGs at a reduced scale"
        if data.format != "jpeg":
            return None, (
                f"the stored images are {data.format.upper() if data.format != 'mixed' else 'of mixed formats'}"
                ": only JPEGs decode at a reduced scale"
                if data.format
                else "the stored images' format and size are not known for this data source"
            )
        if data.side < 2 * data.image_size:
            return None, (
                f"the stored images ({data.side}px) are less than twice the model's input "
                f"({data.image_size}px): there is nothing to decode less"
            )
        return dataclasses.replace(base, read=dataclasses.replace(base.read, decode="reduced")), ""
    if remedy.name == "cache-decoded":
        if (
            base.cache.enabled
            and base.cache.kind == "memory"
            and base.cache.placement == "before_augment"
        ):
            return None, "the scenario already caches decoded images in RAM before augment"
        return dataclasses.replace(
            base, cache=CacheConfig(enabled=True, kind="memory", placement="before_augment")
        ), ""
    if remedy.name == "data-service":
        if base.service.enabled:
            return None, "the scenario's pipeline already runs on tf.data service"
        if on_bad_file == "fail":
            return (
                None,
                'data.on_bad_file = "fail": a service worker cannot end a rank on a bad file',
            )
        if base.cache.enabled and base.cache.kind == "file":
            return None, "the pipeline has a file cache, which every service worker would write"
        return dataclasses.replace(base, service=ServiceUse(enabled=True)), ""
    raise ValueError(f"unknown remedy {remedy.name!r}")


SERVICE_HERE = (
    "its workers would share this host's cores with the ranks, so it moves the work without "
    "relieving it: name CPU hosts in service.hosts, or measure it anyway with --remedies all"
)


def plan(
    base: PipelineConfig,
    stages: list[str] | None,
    on_bad_file: str = "skip",
    service_hosts: bool = False,
    data: Data | None = None,
    loader: Loader | None = None,
) -> list[Planned]:
    """The remedies for ``stages`` (the stages that bound throughput), or every remedy when
    ``stages`` is None (``--remedies all``); each applied to ``base`` or skipped with why. Chosen
    for a stage, tf.data service runs only when its workers have CPU hosts of their own
    (``service_hosts``)."""
    data = data or Data()
    # a remedy of the other input library is not one of this run's, skipped or not
    other = "data-service" if loader is not None else "loader-workers"
    chosen = [
        r for r in CATALOGUE if r.name != other and (stages is None or set(r.stages) & set(stages))
    ]
    out = []
    for r in chosen:
        if r.name == "data-service" and stages is not None and not service_hosts and not loader:
            out.append(Planned(r, None, SERVICE_HERE))
        else:
            out.append(Planned(r, *apply(r, base, on_bad_file, data, loader)))
    return out


def device_note(name: str, device: str, gpus: int) -> str:
    """How a remedy's figure must be read on this run's device ("" when as on a cluster)."""
    if name != PREFIX + "augment-on-device":
        return ""
    if device.startswith("emulated"):
        return "emulated device: the augmentation ran on the CPU inside the step, so its cost lands in the step"
    if gpus == 0:
        return "no accelerator: the augmentation ran on the CPU inside the step, so its cost lands in the step"
    return ""


def add_gap_closed(
    summary: pd.DataFrame, reference: str, device: str = "auto", gpus: int = 0
) -> pd.DataFrame:
    """Per np: each remedy row's share of the reference (real) variant's gap it closed, in %
    (100: no gap left; negative: wider than before), and a note on how to read it."""
    out = summary.copy()
    out["gap_closed_pct"] = math.nan
    out["remedy_note"] = [device_note(str(v), device, gpus) for v in out["variant"]]
    for _, group in out.groupby("np"):
        ref = group[group["variant"] == reference]
        if ref.empty or not float(ref["gap_pct"].iloc[0]) > 0 or nothing_to_close(ref.iloc[0]):
            continue  # a share of no gap is noise: 0.07% "closed" by 2,000% is not a figure
        base_gap = float(ref["gap_pct"].iloc[0])
        for idx, row in group.iterrows():
            if str(row["variant"]).startswith(PREFIX) and not math.isnan(float(row["gap_pct"])):
                out.loc[idx, "gap_closed_pct"] = (
                    100.0 * (base_gap - float(row["gap_pct"])) / base_gap
                )
    return out


def nothing_to_close(real: pd.Series) -> bool:
    """True when the real variant's gap is under the verdict's line and its interval reaches 0:
    no gap is there to close, and a remedy's share of it would be noise. (A wide interval alone
    is not enough: a read-bound CPU-trained case measured 53.8% ±61.7, and its cache closed 81%.)"""
    base, half = float(real["gap_pct"]), float(real["gap_pct_ci95"])
    return base < NOTHING_BELOW_PCT and not base - (half if not math.isnan(half) else 0.0) > 0


def measured_lines(summary: pd.DataFrame, reference: str, np: int) -> list[str]:
    """What the remedies did at ``np``, best first, for the verdict ("… closed 85% of the gap")."""
    if "gap_closed_pct" not in summary.columns:
        return []
    ref = summary[(summary["np"] == np) & (summary["variant"] == reference)]
    if ref.empty:
        return []
    base, base_half = float(ref["gap_pct"].iloc[0]), float(ref["gap_pct_ci95"].iloc[0])
    nothing = nothing_to_close(ref.iloc[0])
    at = summary[(summary["np"] == np) & summary["variant"].astype(str).str.startswith(PREFIX)]
    if nothing:  # no shares to rank by: the smallest gap first
        at = at[at["gap_pct"].notna()].sort_values("gap_pct")
    else:
        at = at[at["gap_closed_pct"].notna()].sort_values("gap_closed_pct", ascending=False)
    lines = []
    for _, row in at.iterrows():
        remedy = BY_NAME[str(row["variant"])[len(PREFIX) :]]
        note = f" ({row['remedy_note']})" if row.get("remedy_note") else ""
        if nothing:
            lines.append(
                f"measured: {remedy.what}: gap {row['gap_pct']:.1f}% ±{row['gap_pct_ci95']:.1f} at np={np}, "
                f"where the real pipeline's {base:.1f}% ±{base_half:.1f} left nothing to close{note}"
            )
            continue
        effect = (
            f"closed {row['gap_closed_pct']:.0f}% of the gap"
            if row["gap_closed_pct"] >= 0
            else "did not close the gap (it widened)"
        )
        lines.append(
            f"measured: {remedy.what} {effect} at np={np} "
            f"({base:.1f}% → {row['gap_pct']:.1f}% ±{row['gap_pct_ci95']:.1f}){note}"
        )
    return lines
