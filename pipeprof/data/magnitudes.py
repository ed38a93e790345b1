"""An augmentation's random ranges, shared by the input libraries (tf.data's and PyTorch's), so
a scenario's ``pipeline.augment`` draws from the same ranges whichever library runs it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeprof.scenario import AugmentConfig


@dataclass(frozen=True)
class Magnitudes:
    """An AugmentConfig's random ranges once ``strength`` is applied."""

    min_area: float  # crops cover [min_area, 1] of the image's area
    max_angle: float  # radians either way
    brightness: float  # shift in [-brightness, brightness]
    contrast: float  # factor in [1 - contrast, 1 + contrast]

    @classmethod
    def of(cls, aug: AugmentConfig) -> Magnitudes:
        s = aug.strength
        return cls(
            max(0.05, 1.0 - (1.0 - aug.crop_scale_min) * s),
            math.radians(aug.rotation_deg * s),
            aug.brightness * s,
            min(0.95, aug.contrast * s),
        )
