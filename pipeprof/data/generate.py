"""The built-in dataset: real image files on disk, deterministic from a seed.

Each class is an oriented colour grating (its angle and hue set by the class) with random
frequency, phase, a distracting ellipse and noise, so a small CNN can learn it and a
decoder has real JPEG/PNG work to do. Images are written one folder per class; the folder
only appears under its final name once complete, so an interrupted run is redone, never
half-used.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from pipeprof.scenario import GenerateConfig

COMPLETE_MARKER = ".pipeprof-complete.json"


def default_root() -> Path:
    return Path(os.environ.get("PIPEPROF_DATA_DIR", Path.home() / ".cache" / "pipeprof" / "datasets"))


def dataset_dir(cfg: GenerateConfig, path: str = "") -> Path:
    """Where a generated dataset lives: ``path`` if given, else a folder named by its config."""
    if path:
        return Path(path).expanduser()
    key = hashlib.sha1(json.dumps(cfg.__dict__, sort_keys=True).encode()).hexdigest()[:10]
    return default_root() / f"gen-{cfg.classes}c-{cfg.size}px-{cfg.images}-{key}"


def is_complete(root: Path, cfg: GenerateConfig) -> bool:
    marker = root / COMPLETE_MARKER
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()) == cfg.__dict__
    except (OSError, ValueError):
        return False


def render(cfg: GenerateConfig, index: int) -> tuple[np.ndarray, int]:
    """Image ``index`` of the dataset as uint8 HxWx3, and its class. Pure and deterministic."""
    label = index % cfg.classes
    rng = np.random.default_rng([cfg.seed, index])
    n = cfg.size
    yy, xx = np.mgrid[0:n, 0:n].astype(np.float32) / n
    angle = np.pi * label / cfg.classes + rng.normal(0, 0.05)
    freq = rng.uniform(3.0, 6.0)
    phase = rng.uniform(0, 2 * np.pi)
    wave = 0.5 + 0.5 * np.sin(2 * np.pi * freq * (xx * np.cos(angle) + yy * np.sin(angle)) + phase)
    hue = label / cfg.classes + rng.normal(0, 0.03)
    base = 0.5 + 0.5 * np.cos(2 * np.pi * (hue + np.array([0.0, 1 / 3, 2 / 3], dtype=np.float32)))
    img = wave[..., None] * base[None, None, :] + (1 - wave[..., None]) * (1 - base[None, None, :]) * 0.6
    # a distractor that carries no class information
    cy, cx, ry, rx = rng.uniform(0.2, 0.8), rng.uniform(0.2, 0.8), rng.uniform(0.05, 0.25), rng.uniform(0.05, 0.25)
    blob = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 < 1.0
    img[blob] = rng.uniform(0, 1, size=3)
    img += rng.normal(0, 0.06, size=img.shape)
    return (np.clip(img, 0, 1) * 255).astype(np.uint8), label


def generate(cfg: GenerateConfig, root: Path, progress: Callable[[int, int], None] | None = None) -> Path:
    """Write the dataset under ``root`` (class_XX/img_NNNNNN.jpg) unless it is already there."""
    if is_complete(root, cfg):
        return root
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf  # encoding with TF keeps the dependency list to the chosen packages

    tmp = root.with_name(root.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    for c in range(cfg.classes):
        (tmp / f"class_{c:03d}").mkdir(parents=True, exist_ok=True)
    ext = "jpg" if cfg.format == "jpeg" else "png"
    for i in range(cfg.images):
        pixels, label = render(cfg, i)
        if cfg.format == "jpeg":
            data = tf.io.encode_jpeg(pixels, quality=cfg.quality).numpy()
        else:
            data = tf.io.encode_png(pixels).numpy()
        (tmp / f"class_{label:03d}" / f"img_{i:06d}.{ext}").write_bytes(data)
        if progress is not None:
            progress(i + 1, cfg.images)
    (tmp / COMPLETE_MARKER).write_text(json.dumps(cfg.__dict__, sort_keys=True))
    if root.exists():
        shutil.rmtree(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(root)
    return root
