"""The input pipeline's stages, named once: the order they run in, which of them cost CPU per
sample (the stage benchmark measures those), and the ablation's rungs built from them."""

from __future__ import annotations

# stages that do work per sample, in pipeline order (data.pipeline builds them so)
COSTLY: tuple[str, ...] = ("read", "label", "shuffle", "map", "augment")
# every stage, in the order the ablation adds them (prefetch and cache move work, not add it)
ORDER: tuple[str, ...] = (*COSTLY, "prefetch", "cache")
# the ablation's rungs: the read alone, then each stage added in ORDER
LADDER: tuple[str, ...] = (ORDER[0], *(f"+{stage}" for stage in ORDER[1:]))
