"""Memory arithmetic for cache and shuffle settings, checked before anything runs.

A decoded image costs H × W × 3 × 4 bytes (float32 after the read stage) plus its label.
An in-memory cache holds every image of a rank's shard; a shuffle buffer holds
``buffer_size`` of them. Settings that exceed the RAM budget are refused with the arithmetic.
"""

from __future__ import annotations

import psutil

from pipeprof.errors import PipeprofError
from pipeprof.scenario import PipelineConfig


def element_bytes(image_size: int) -> int:
    return image_size * image_size * 3 * 4 + 4


def default_ram_budget_bytes(ranks_per_host: int) -> int:
    """80% of the memory available now, shared by the ranks of one host."""
    return int(psutil.virtual_memory().available * 0.8 / max(1, ranks_per_host))


def _gb(n: float) -> str:
    return f"{n / 2**30:,.2f} GB" if n >= 2**30 else f"{n / 2**20:,.2f} MB"


def pipeline_bytes(
    pipe: PipelineConfig, image_size: int, images_per_rank: int, loader_workers: int | None = None
) -> dict[str, int]:
    """``loader_workers``: a DataLoader's worker processes (None: tf.data). Each keeps a memory
    cache of its own (0 workers: the rank's one), and its sampler shuffles indices, no buffer."""
    each = element_bytes(image_size)
    out = {}
    if pipe.cache.enabled and pipe.cache.kind == "memory":
        out["cache"] = images_per_rank * each * max(1, loader_workers or 0)
    if pipe.shuffle.enabled and loader_workers is None:
        out["shuffle"] = (
            min(pipe.shuffle.buffer_size, images_per_rank or pipe.shuffle.buffer_size) * each
        )
    return out


def check(
    pipe: PipelineConfig,
    image_size: int,
    images_per_rank: int,
    budget_bytes: int,
    where: str,
    loader_workers: int | None = None,
) -> None:
    """Raise a one-line PipeprofError showing the arithmetic when the settings do not fit
    (``loader_workers``: as ``pipeline_bytes``)."""
    each = element_bytes(image_size)
    need = pipeline_bytes(pipe, image_size, images_per_rank, loader_workers)
    total = sum(need.values())
    if total <= budget_bytes:
        return
    parts = []
    if "cache" in need:
        copies = (
            f" × {loader_workers} loader workers' own caches" if (loader_workers or 0) > 1 else ""
        )
        parts.append(
            f"memory cache {images_per_rank:,} images × {each:,} B ({image_size}×{image_size}×3 float32 + label)"
            f"{copies} = {_gb(need['cache'])}"
        )
    if "shuffle" in need:
        parts.append(
            f"shuffle buffer {need['shuffle'] // each:,} × {each:,} B = {_gb(need['shuffle'])}"
        )
    raise PipeprofError(
        f"{where}: {' + '.join(parts)} = {_gb(total)} per rank exceeds the RAM budget of "
        f"{_gb(budget_bytes)}; use a file cache (pipeline.cache.kind = \"file\"), a smaller shuffle "
        f"buffer, or a larger --ram-budget"
    )
