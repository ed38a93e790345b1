"""Counting a data set without TensorFlow (for memory checks before launching)."""

from __future__ import annotations

from pathlib import Path

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")


def count_images(root: str | Path) -> int:
    root = Path(root)
    if not root.is_dir():
        return 0
    return sum(1 for c in root.iterdir() if c.is_dir() and not c.name.startswith(".")
               for p in c.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)
